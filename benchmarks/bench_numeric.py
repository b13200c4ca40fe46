"""Numeric telemetry accuracy (issue 40): quantile rank error of private histograms, ours beside peers.

For each cell (buckets, epsilon, n) and seed, n latencies (log-normal around 120 ms, clipped to [0, 20 s]) are
bucketized and reported once each; each method estimates the CDF at the bucket edges, and every method's
quantiles come from its CDF by the same rule (linear inside a bucket, ``cms_core.numeric``), so only the CDF
estimates differ. The rank error is measured against the devices' buckets with their values spread evenly inside
each (what any method over these buckets can know); ``bucketing`` is the true histogram's own rank error against
the raw values, the part no private method can remove. Methods:

* ``direct-rr+isotonic``: direct RR over the bucket index, the raw CDF made monotone by isotonic regression
  (:class:`cms_core.numeric.Histogram`);
* ``hierarchy-B<b>+isotonic`` (ours, :mod:`cms_core.hierarchy`): the hierarchical histogram at the branching the
  planner finds best among trees (each device one uniform level at the full epsilon, each level's oracle direct
  RR or OCMS+RR, the weighted least-squares consistent tree), its CDF made monotone the same way;
* ``ocms-rr+isotonic``: OCMS+RR over the bucket index, when the planner picks it;
* ``direct-rr`` (baseline): the same reports, raw cumulative sums made monotone by a running maximum;
* ``hierarchical`` (peer, PyPI ``ldp-hierarchical-mechanism``: Cormode, Kulkarni, Srivastava's hierarchical
  method, branching 4, each device reports one random level at the full epsilon, with Hay et al.'s
  consistency), when installed (the ``bench`` extra).

``ours`` is the planner's pick per cell (:func:`cms_core.planning.choose_numeric_mechanism`: the smallest
predicted CDF variance over the bucket edges, from the variance formulas alone, never from these results).

Prints a table of median rank errors |F(q_hat) - q| at q = 0.5, 0.9, 0.99 and, with ``--json``, one object
(``cells``: ``buckets``, ``epsilon``, ``n``, ``ours``, ``rank_error`` method -> [median at 0.5, 0.9, 0.99]).
``--quick`` runs n = 10^5 only. Not a test: figures for the closing note.

    python -m benchmarks.bench_numeric [--quick] [--seeds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

import numpy as np

from cms_core import hierarchy
from cms_core.numeric import BucketLayout, DirectRRNoise, Histogram, _quantile_from_cdf, rank_error
from cms_core.planning import choose_numeric_mechanism
from cms_core.theory import rr_keep_probability

QUANTILES = (0.5, 0.9, 0.99)
DIRECT = "direct-rr+isotonic"
UPPER_MS = 20_000.0


def layouts() -> dict[int, BucketLayout]:
    return {
        12: BucketLayout.explicit([5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000], 0, UPPER_MS),
        40: BucketLayout.explicit(np.geomspace(2, 15_000, 39), 0, UPPER_MS),
        1024: BucketLayout.explicit(np.linspace(0, UPPER_MS, 1025)[1:-1], 0, UPPER_MS),
    }


def latencies(n: int, rng) -> np.ndarray:
    return np.clip(rng.lognormal(np.log(120.0), 1.0, n), 0, UPPER_MS)


def direct_rr(indices: np.ndarray, k: int, epsilon: float, rng) -> np.ndarray:
    """Unbiased bucket frequencies from one direct-RR report per device (simulated by bucket)."""
    n = indices.size
    true_counts = np.bincount(indices, minlength=k)
    p = rr_keep_probability(epsilon, k)
    q = (1 - p) / (k - 1)
    kept = rng.binomial(true_counts, p)
    # a report not kept lands uniformly on one of the other k - 1 buckets
    own = np.repeat(np.arange(k), true_counts - kept)
    targets = rng.integers(0, k - 1, own.size)
    targets += targets >= own
    counts = kept + np.bincount(targets, minlength=k)
    return (counts / n - q) / (p - q)


def hierarchical_cdf(indices: np.ndarray, k: int, epsilon: float, seed: int):
    """The peer's CDF at each bucket index (None when the peer is not installed)."""
    try:
        from benchmarks.experiments.peers import import_pure_ldp

        import_pure_ldp()
        from hierarchical_mechanism_LDP import Private_TreeBary
    except Exception:  # noqa: BLE001 - optional peer
        return None
    np.random.seed(seed)  # the peer draws from numpy's global generator,
    random.seed(seed)  # and pure-ldp's local hashing its hash seeds from the standard library's
    tree = Private_TreeBary(k, 4, epsilon, on_all_levels=False)
    tree.update_tree(indices)
    tree.compute_attributes(verbose=False)  # else post_process prints its progress to stdout (breaks --json)
    tree.post_process()  # Hay et al.'s consistency; sets the CDF over the leaves
    cdf = np.asarray(tree.cdf[:k], dtype=np.float64)
    total = tree.cdf[-1] if tree.cdf[-1] > 0 else 1.0
    return np.maximum.accumulate(np.clip(cdf / total, 0.0, 1.0))


def bucket_rank_error(layout: BucketLayout, true_cdf: np.ndarray, q: float, x: float) -> float:
    """|F(x) - q| for the true histogram's CDF, linear inside each bucket."""
    return abs(float(np.interp(x, layout.edges, np.concatenate(([0.0], true_cdf)))) - q)


def quantiles_from(layout: BucketLayout, cdf: np.ndarray) -> list[float]:
    return [_quantile_from_cdf(layout.edges, cdf, q) for q in QUANTILES]


def tree_histogram(layout: BucketLayout, params: hierarchy.HierarchyParams, indices: np.ndarray, rng) -> Histogram:
    """Our hierarchical histogram (or a flat oracle, a one-level tree) from one simulated report per device."""
    leaves, noise = hierarchy.estimate(params, hierarchy.simulate(params, indices, rng))
    return Histogram.of(layout, leaves, indices.size, noise)


def cell(k: int, layout: BucketLayout, epsilon: float, n: int, seeds: int, with_peer: bool) -> dict:
    errors: dict[str, list] = {}
    plan = choose_numeric_mechanism(k, epsilon, n)
    trees = {plan["candidates"][name]["branching"]: name for name in {plan["chosen"], plan["best_hierarchy"]}
             if name is not None and name != "direct-rr"}
    tree_params = {f"{name}+isotonic": hierarchy.HierarchyParams.build(
        k, epsilon, branching, mechanism="ocms" if name == "ocms-rr" else "auto") for branching, name in trees.items()}
    ours = f"{plan['chosen']}+isotonic"
    for seed in range(seeds):
        rng = np.random.default_rng([k, int(epsilon * 10), n, seed])
        values = latencies(n, rng)
        indices = layout.index(values)
        true_cdf = np.cumsum(np.bincount(indices, minlength=k)) / n
        errors.setdefault("bucketing", []).append(
            [rank_error(values, q, x) for q, x in zip(QUANTILES, quantiles_from(layout, true_cdf))])
        raw = direct_rr(indices, k, epsilon, rng)
        flat = Histogram.of(layout, raw, n, DirectRRNoise(epsilon, k))
        cdfs = {DIRECT: flat.cdf(), "direct-rr": np.maximum.accumulate(np.clip(np.cumsum(raw), 0.0, 1.0))}
        for name, params in tree_params.items():
            cdfs[name] = tree_histogram(layout, params, indices, rng).cdf()
        if with_peer:
            peer = hierarchical_cdf(indices, k, epsilon, seed)
            if peer is not None:
                cdfs["hierarchical"] = peer
        for name, cdf in cdfs.items():
            errors.setdefault(name, []).append(
                [bucket_rank_error(layout, true_cdf, q, x) for q, x in zip(QUANTILES, quantiles_from(layout, cdf))])
    medians = {name: [float(v) for v in np.median(np.array(rows), axis=0)] for name, rows in errors.items()}
    return {"buckets": k, "epsilon": epsilon, "n": n, "ours": ours, "rank_error": medians, "seeds": seeds}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 10^5 only")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--no-peer", action="store_true", help="leave out ldp-hierarchical-mechanism (slow)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    sizes = (10**5,) if args.quick else (10**5, 10**6)
    cells = []
    started = time.monotonic()
    for k, layout in layouts().items():
        for epsilon in (1.0, 2.0, 4.0):
            for n in sizes:
                result = cell(k, layout, epsilon, n, args.seeds, not args.no_peer)
                cells.append(result)
                if not args.json:
                    row = "  ".join(f"{name}{'*' if name == result['ours'] else ''} "
                                    f"{' / '.join(f'{100 * e:.2f}%' for e in errs)}"
                                    for name, errs in result["rank_error"].items())
                    print(f"k={k:>4} eps={epsilon:g} n={n:>9,}: {row}", flush=True)
    if args.json:
        print(json.dumps({"cells": cells, "quantiles": QUANTILES, "seconds": round(time.monotonic() - started, 1)}))
    else:
        print(f"median rank error at q = {', '.join(map(str, QUANTILES))} over {args.seeds} seeds (* ours: the "
              f"planner's pick); "
              f"{time.monotonic() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
