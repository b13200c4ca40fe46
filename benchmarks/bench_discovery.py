"""Discovery evidence (issue 15): recall / false discoveries / error vs n and epsilon, and where time goes.

Workloads (seeded):
  * words: wordfreq English, the top ``--vocabulary`` words with their real frequencies, as
    UTF-8 bytes (any string, 257 candidates per surviving prefix) or an alphabet;
  * ids: a Zipf(s) distribution over ``--ids`` distinct 64-bit ids drawn uniformly from [0, 2^64).

Per (workload, epsilon, n): the true top 10/20/50 found (recall), false discoveries (discovered
values no report holds, against the rule's bound alpha), the median relative error of the
discovered values' counts, the detection threshold the doc states (found with probability
>= 95%) and the first level's cut-off, and the decode / simulation seconds.

    .venv/bin/python benchmarks/bench_discovery.py [--quick] [--reports 100000,1000000] [--epsilons 2,4]

Not a test: times depend on the machine. Results are printed, not asserted.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from cms_core import discovery as D


def words_workload(vocabulary: int):
    from producer.datasets import load_wordfreq

    words, probs = load_wordfreq("en", vocabulary)
    return list(words), np.asarray(probs)


def ids_workload(count: int, s: float, rng: np.random.Generator):
    ids = [int(x) for x in rng.integers(0, 2**64, size=count, dtype=np.uint64, endpoint=False)]
    weights = 1.0 / np.arange(1, count + 1) ** s
    return ids, weights / weights.sum()


def run(domain, name, values, probs, epsilon, n, alpha, seed):
    rng = np.random.default_rng(seed)
    params = D.level_params(name, 1, epsilon, domain)
    codes = rng.choice(len(values), size=n, p=probs)
    sample = [values[c] for c in codes.tolist()]
    true_counts = np.bincount(codes, minlength=len(values))
    t0 = time.perf_counter()
    batches = D.simulate_level_reports(domain, params, sample, rng)
    t1 = time.perf_counter()
    result = D.discover(domain, params, batches, alpha=alpha)
    t2 = time.perf_counter()
    index = {v: i for i, v in enumerate(values)}
    order = np.argsort(-true_counts, kind="stable")
    found = {d.value: d for d in result.discovered}
    # Strings longer than max_length are found as their first max_length symbols.
    def key(v):
        if domain.kind == "strings":
            p = D.prefix_of(domain, v, domain.levels)
            return D.prefix_label(domain, p)
        return v
    recall = {k: sum(1 for i in order[:k] if key(values[i]) in found) / k for k in (10, 20, 50)}
    held = {key(v) for v in values}
    false = sum(1 for v in found if v not in held)
    errors = []
    for v, d in found.items():
        if v in index and not d.truncated:
            truth = true_counts[index[v]]
            if truth:
                errors.append(abs(d.frequency * n - truth) / truth)
    per_level = n // domain.levels
    k_assumed = domain.branching(2) * 20
    threshold = D.detection_threshold(params[0], per_level, domain.levels, k_assumed, alpha=alpha, miss=0.05)
    return {
        "recall": recall, "found": len(found), "false": false,
        "median_rel_error": float(np.median(errors)) if errors else float("nan"),
        "threshold": threshold, "cutoff": result.levels[0].cutoff_frequency,
        "sim_s": t1 - t0, "decode_s": t2 - t1,
        "candidates": sum(lv.candidates for lv in result.levels),
        "top20_freq": float(true_counts[order[19]] / n),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reports", default="100000,1000000", help="comma-separated n")
    parser.add_argument("--epsilons", default="2,4")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--vocabulary", type=int, default=20000, help="wordfreq words in the population")
    parser.add_argument("--ids", type=int, default=100000, help="distinct 64-bit ids in the population")
    parser.add_argument("--max-length", type=int, default=8, help="string symbols described")
    parser.add_argument("--alphabet", default="utf8", help="utf8, or the characters of an alphabet")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--quick", action="store_true", help="n = 10^5 only")
    args = parser.parse_args()
    ns = [100_000] if args.quick else [int(x) for x in args.reports.split(",")]
    epsilons = [float(x) for x in args.epsilons.split(",")]
    words, word_probs = words_workload(args.vocabulary)
    if args.alphabet != "utf8":
        keep = [i for i, w in enumerate(words) if set(w) <= set(args.alphabet)]
        words, word_probs = [words[i] for i in keep], word_probs[keep] / word_probs[keep].sum()
    ids, id_probs = ids_workload(args.ids, 1.1, np.random.default_rng(args.seed))
    workloads = [
        ("words", D.DiscoveryDomain("strings", alphabet=args.alphabet, max_length=args.max_length, symbols_per_level=1),
         words, word_probs),
        ("ids", D.DiscoveryDomain("integers", bits=64, bits_per_level=8), ids, id_probs),
    ]
    print(f"alpha={args.alpha} (family-wise false-discovery bound per run); words: wordfreq en top {len(words):,}, "
          f"alphabet={args.alphabet}, max_length={args.max_length}; ids: Zipf(1.1) over {args.ids:,} random 64-bit ids")
    header = (f"{'workload':8} {'eps':>4} {'n':>9} {'top10':>6} {'top20':>6} {'top50':>6} {'found':>6} {'false':>6} "
              f"{'med.rel.err':>11} {'f_top20':>8} {'f_detect':>8} {'cutoff1':>8} {'cands':>7} {'sim s':>6} {'decode s':>8}")
    print(header)
    print("-" * len(header))
    for name, domain, values, probs in workloads:
        for epsilon in epsilons:
            for n in ns:
                r = run(domain, name, values, probs, epsilon, n, args.alpha, args.seed)
                print(f"{name:8} {epsilon:4g} {n:9,} {r['recall'][10]:6.0%} {r['recall'][20]:6.0%} {r['recall'][50]:6.0%} "
                      f"{r['found']:6d} {r['false']:6d} {r['median_rel_error']:11.3f} {r['top20_freq']:8.4f} "
                      f"{r['threshold']:8.4f} {r['cutoff']:8.4f} {r['candidates']:7,} {r['sim_s']:6.1f} {r['decode_s']:8.1f}",
                      flush=True)


if __name__ == "__main__":
    main()
