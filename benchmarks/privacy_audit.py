"""Full black-box privacy audit of the device path (issue 14, "Privacy audit").

For each mechanism, 10^6 CSPRNG device-path reports on each of two inputs, a
Clopper-Pearson lower bound on ε at alpha = 0.01 for the most distinguishing
event, and the verdict: the bound must not exceed ε (no leak) and must reach 90%
of ε (the mechanism is not mis-calibrated). A leaky device (keep threshold of
1.25 ε claiming ε) is the negative control. tests/cms_core/test_privacy_audit.py
runs a reduced version in CI.

    .venv/bin/python -m benchmarks.privacy_audit [--trials 1000000]

Takes about a minute on one core (about 4 us per direct report, 9 us per OCMS+RR one).
"""

from __future__ import annotations

import argparse
import time

from cms_core import OCMSParams, privatize
from cms_core.audit import black_box_audit


def leaky(factor: float):
    """The device path with the keep threshold of factor * eps (a configuration bug), claiming eps."""
    built = {}

    def device(params: OCMSParams, value: int):
        if params not in built:
            built[params] = OCMSParams.build(params.epsilon * factor, params.dictionary_size,
                                             hash_range=params.hash_range, field=params.field,
                                             mechanism=params.mechanism)
        return privatize(built[params], value)

    return device


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=1_000_000, help="device-path reports per input (default 10^6)")
    ap.add_argument("--alpha", type=float, default=0.01)
    args = ap.parse_args()
    cases = [
        ("OCMS+RR eps=2 d=1000 (m=4)", OCMSParams.build(2.0, 1000), privatize),
        ("OCMS+RR eps=5 d=10000", OCMSParams.build(5.0, 10_000), privatize),
        ("direct RR eps=1 d=2", OCMSParams.build(1.0, 2, mechanism="direct"), privatize),
        ("direct RR eps=4 d=16", OCMSParams.build(4.0, 16, mechanism="direct"), privatize),
        ("LEAKY direct RR (threshold of 1.25 eps) eps=2 d=16", OCMSParams.build(2.0, 16, mechanism="direct"), leaky(1.25)),
        ("LEAKY OCMS+RR (threshold of 1.25 eps) eps=2 d=1000", OCMSParams.build(2.0, 1000), leaky(1.25)),
    ]
    print(f"trials per input {args.trials:,}; Clopper-Pearson alpha {args.alpha}; inputs x1=0, x2=1")
    print(f"{'mechanism':52} {'claimed':>7} {'eps_lb':>8} {'% claim':>8}  verdict")
    failures = 0
    for label, params, device in cases:
        start = time.perf_counter()
        result = black_box_audit(params, 0, 1, args.trials, alpha=args.alpha, device=device)
        ok_no_leak = not result.leaks
        ok_calibrated = result.fraction_of_claim >= 0.9
        expected_leak = label.startswith("LEAKY")
        if expected_leak:
            verdict = "caught (bound > eps)" if result.leaks else "NOT CAUGHT"
            failures += not result.leaks
        else:
            verdict = "ok" if ok_no_leak and ok_calibrated else ("LEAK" if not ok_no_leak else "MIS-CALIBRATED")
            failures += not (ok_no_leak and ok_calibrated)
        print(f"{label:52} {result.claimed_epsilon:7.3f} {result.epsilon_lower_bound:8.4f} "
              f"{100 * result.fraction_of_claim:7.1f}%  {verdict}  ({time.perf_counter() - start:.0f} s)")
    print("all checks passed" if failures == 0 else f"{failures} check(s) FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
