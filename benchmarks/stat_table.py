"""Statistical table: empirical MSE / closed-form variance per mode and epsilon.

Same procedure as tests/cms_core/test_statistics.py (fixed dataset, seeded
rounds, simulation path, compiled decode), printed as a table for the record.

    .venv/bin/python -m benchmarks.stat_table [--rounds 2000] [--n 2000]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from cms_core import OCMSParams
from cms_core.evaluation import estimates_from_counts, round_match_counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--n", type=int, default=2000)
    args = ap.parse_args()
    d, n, rounds = 1000, args.n, args.rounds
    values = np.empty(n, np.uint64)
    values[: n // 2] = 1
    values[n // 2 : n // 2 + n // 10] = 2
    rest = n - n // 2 - n // 10
    values[n - rest :] = 3 + np.arange(rest) % (d - 3)
    truth = [(0, 0.0), (1, (n // 2) / n), (2, (n // 10) / n)]
    print(f"dataset: d={d}, n={n} reports per round, {rounds} rounds; MSE ratio = empirical / closed form")
    print(f"{'mode':5} {'eps':>4} {'m':>3} {'field':>12} | " + " | ".join(f"f={f:<4} MSE ratio  bias/se" for _, f in truth))
    for mode in ("mse", "l2"):
        for eps in (0.5, 1.0, 2.0, 3.0, 4.0, 5.0):
            kw = {"tracked_count": d} if mode == "l2" else {}
            params = OCMSParams.build(eps, d, mode=mode, **kw)
            counts = round_match_counts(params, values, np.array([x for x, _ in truth], np.uint64), rounds,
                                        np.random.default_rng(1000 + int(eps * 10)))
            g = estimates_from_counts(params, counts, n)
            cells = []
            for j, (_, f) in enumerate(truth):
                var = float(params.variance(f, n))
                err = g[:, j] - f
                cells.append(f"{(err ** 2).mean() / var:15.3f} {err.mean() / math.sqrt(var / rounds):+8.2f}")
            print(f"{mode:5} {eps:4.1f} {params.hash_range:3d} {str(params.field):>12} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
