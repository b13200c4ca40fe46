"""Device-path sampling precision: the exact relative gap 1 - R / e^eps and its bound.

R = T (m - 1) / (2^64 - T) is the realised probability ratio of the CSPRNG keep
decision (cms_core.privatize). Prints, per (eps, m): the keep probability k, the
exact gap (e^eps to 60 digits; float64 cannot see it), the documented bound
(privatize.ratio_gap_bound) and the old text's 1/(2^64 - T) for comparison
(docs/cms_core.md, "Sampling precision"; issue 18).

    .venv/bin/python -m benchmarks.sampling_gap

Exact arithmetic, not a timing: the figures do not depend on the machine.
"""

from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction

from cms_core import OCMSParams
from cms_core.privatize import keep_threshold, ratio_gap_bound, realised_probability_ratio

CASES = [(0.1, 2), (0.5, 2), (1.0, 3), (2.0, 4), (4.0, 8), (8.0, 55), (10.0, 149), (20.0, 10_000), (30.0, 1000)]


def exact_gap(params: OCMSParams) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 60
        ratio = realised_probability_ratio(params)
        eps = Fraction(params.epsilon)
        e = (Decimal(eps.numerator) / Decimal(eps.denominator)).exp()
        return 1 - Decimal(ratio.numerator) / Decimal(ratio.denominator) / e


def main() -> None:
    print(f"{'eps':>5} {'m':>6} {'keep k':>10} {'exact gap':>11} {'bound':>10} {'1/(2^64-T)':>11}")
    for eps, m in CASES:
        params = OCMSParams.build(eps, 10_000, hash_range=m)
        t = keep_threshold(params)
        print(f"{eps:>5g} {m:>6} {t / 2**64:>10.6g} {float(exact_gap(params)):>11.3g} {ratio_gap_bound(params):>10.3g} "
              f"{1 / (2**64 - t):>11.3g}")


if __name__ == "__main__":
    main()
