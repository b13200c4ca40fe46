"""Discovery evidence (issue 15): recall / false discoveries / error vs n and epsilon, and where time goes.

Workloads (seeded):
  * words: wordfreq English, the top ``--vocabulary`` words with their real frequencies, as
    UTF-8 bytes (any string, 257 candidates per surviving prefix) or an alphabet;
  * ids: a Zipf(s) distribution over ``--ids`` distinct 64-bit ids drawn uniformly from [0, 2^64).

Per (workload, epsilon, n): the true top 10/20/50 found (recall), false discoveries (discovered
values no report holds) next to what the cut-off rule predicts (P(any false discovery) <= alpha,
so the expected number is <= alpha too), the mean and median relative error of the discovered
values' counts, the CI coverage (share of discovered values whose CI holds the true frequency;
all of them, and those with an unbiased later-level estimate), the detection threshold the doc
states (found with probability >= 95%) and the first level's cut-off, and the decode /
simulation seconds.

    .venv/bin/python -m benchmarks.bench_discovery [--quick] [--reports 100000,1000000] [--epsilons 2,4] \
        [--json docs/results/discovery.json] [--profile words,4,1000000]
    OTHER/bin/python -m benchmarks.bench_discovery --plot docs/results/discovery.json   # any Python with matplotlib

``--json`` writes every row (and the profile) as JSON; ``--profile WORKLOAD,EPS,N`` times one run
per level: the kernel's match counting against the Python around it (candidate elements, runs,
sketch, cut-off, estimates). ``--plot FILE.json`` draws recall of the top 20 vs n per epsilon and
workload next to the JSON (``discovery_recall.png``); it needs only matplotlib.

Not a test: times depend on the machine. Results are printed, not asserted.
"""

from __future__ import annotations

import argparse
import json
import time


def _numerics():
    """Numpy and cms_core, imported only for measuring (``--plot`` runs in any Python with matplotlib)."""
    import numpy
    from cms_core import discovery

    return numpy, discovery


def words_workload(vocabulary: int):
    np, _ = _numerics()
    from fleet.datasets import load_wordfreq

    words, probs = load_wordfreq("en", vocabulary)
    return list(words), np.asarray(probs)


def ids_workload(count: int, s: float, rng):
    np, _ = _numerics()
    ids = [int(x) for x in rng.integers(0, 2**64, size=count, dtype=np.uint64, endpoint=False)]
    weights = 1.0 / np.arange(1, count + 1) ** s
    return ids, weights / weights.sum()


# n = 10^7 rows of the earlier run (docs/discovery.md, same script and seed before the mean-error and
# CI-coverage columns existed; not re-run: 54-256 s of decode each). Added to --json with
# "reused": true by --include-earlier so the plot shows recall up to 10^7; their missing columns are null.
EARLIER_1E7 = [
    # workload, eps, top10, top20, top50, found, false, median rel. error, f_top20, f_detect, cutoff1, cands, sim s, decode s
    ("words", 2.0, 1.00, 1.00, 0.60, 30, 0, 0.025, 0.0058, 0.0055, 0.0031, 33410, 10.6, 53.3),
    ("words", 4.0, 1.00, 1.00, 1.00, 88, 0, 0.027, 0.0058, 0.0018, 0.0010, 92006, 19.9, 137.7),
    ("ids", 2.0, 1.00, 1.00, 0.44, 22, 0, 0.034, 0.0050, 0.0055, 0.0031, 54528, 16.1, 115.1),
    ("ids", 4.0, 1.00, 1.00, 1.00, 58, 0, 0.041, 0.0050, 0.0018, 0.0010, 159232, 10.6, 255.8),
]


def earlier_rows(alpha: float) -> list[dict]:
    return [{"workload": w, "epsilon": e, "n": 10_000_000, "reused": True,
             "recall": {"10": r10, "20": r20, "50": r50}, "found": found, "false": false,
             "false_predicted_at_most": alpha, "median_rel_error": med, "mean_rel_error": None,
             "ci_coverage": None, "ci_coverage_unbiased": None, "top20_freq": f20, "threshold": fdet,
             "cutoff": cut, "candidates": cands, "sim_s": sim, "decode_s": dec}
            for w, e, r10, r20, r50, found, false, med, f20, fdet, cut, cands, sim, dec in EARLIER_1E7]


def run(domain, name, values, probs, epsilon, n, alpha, seed):
    np, D = _numerics()
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
    errors, covered, covered_unbiased = [], [], []
    for v, d in found.items():
        if v in index and not d.truncated:
            truth = true_counts[index[v]]
            if truth:
                errors.append(abs(d.frequency * n - truth) / truth)
                inside = d.ci_low <= truth / n <= d.ci_high
                covered.append(inside)
                if not d.selection_biased:
                    covered_unbiased.append(inside)
    per_level = n // domain.levels
    k_assumed = domain.branching(2) * 20
    threshold = D.detection_threshold(params[0], per_level, domain.levels, k_assumed, alpha=alpha, miss=0.05)
    return {
        "recall": recall, "found": len(found), "false": false,
        "median_rel_error": float(np.median(errors)) if errors else float("nan"),
        "mean_rel_error": float(np.mean(errors)) if errors else float("nan"),
        "ci_coverage": float(np.mean(covered)) if covered else float("nan"), "ci_checked": len(covered),
        "ci_coverage_unbiased": float(np.mean(covered_unbiased)) if covered_unbiased else float("nan"),
        "ci_checked_unbiased": len(covered_unbiased),
        "false_predicted_at_most": alpha,
        "levels": [{"level": lv.level, "reports": lv.reports, "candidates": lv.candidates,
                    "cutoff_frequency": lv.cutoff_frequency, "survivors": len(lv.survivors)}
                   for lv in result.levels],
        "threshold": threshold, "cutoff": result.levels[0].cutoff_frequency,
        "sim_s": t1 - t0, "decode_s": t2 - t1,
        "candidates": sum(lv.candidates for lv in result.levels),
        "top20_freq": float(true_counts[order[19]] / n),
    }


def profile_run(domain, name, values, probs, epsilon, n, alpha, seed):
    """One run with per-level timings: the kernel's match counting vs the Python around it."""
    _, D = _numerics()
    kernel_module = D.kernel
    original_counts, original_match = D._counts, kernel_module.match_counts
    levels: list[dict] = []

    def timed_match(*a, **kw):
        t = time.perf_counter()
        try:
            return original_match(*a, **kw)
        finally:
            levels[-1]["kernel_s"] += time.perf_counter() - t
            levels[-1]["kernel_calls"] += 1

    def timed_counts(params, batch, prefixes, domain_):
        levels.append({"reports": len(batch), "tracked": len(prefixes), "kernel_s": 0.0, "kernel_calls": 0})
        t = time.perf_counter()
        try:
            return original_counts(params, batch, prefixes, domain_)
        finally:
            levels[-1]["counts_s"] = time.perf_counter() - t

    D._counts, kernel_module.match_counts = timed_counts, timed_match
    try:
        row = run(domain, name, values, probs, epsilon, n, alpha, seed)
    finally:
        D._counts, kernel_module.match_counts = original_counts, original_match
    for i, lv in enumerate(levels, start=1):
        lv["level"] = i
        lv["python_in_counts_s"] = lv["counts_s"] - lv["kernel_s"]
        lv["pairs"] = lv["reports"] * lv["tracked"]
    accounted = sum(lv["counts_s"] for lv in levels)
    return {"workload": name, "epsilon": epsilon, "n": n, "decode_s": row["decode_s"], "sim_s": row["sim_s"],
            "levels": levels, "kernel_s": sum(lv["kernel_s"] for lv in levels),
            "python_in_counts_s": accounted - sum(lv["kernel_s"] for lv in levels),
            "outside_counts_s": row["decode_s"] - accounted}


def print_profile(p: dict) -> None:
    print(f"\nwhere the decode time goes: {p['workload']}, eps={p['epsilon']:g}, n={p['n']:,} "
          f"(decode {p['decode_s']:.2f} s; simulation {p['sim_s']:.2f} s, not decode)")
    header = f"{'level':>5} {'reports':>8} {'tracked':>8} {'pairs':>14} {'kernel s':>9} {'calls':>6} {'python s':>9} {'ns/pair':>8}"
    print(header)
    print("-" * len(header))
    for lv in p["levels"]:
        per_pair = 1e9 * lv["kernel_s"] / lv["pairs"] if lv["pairs"] else float("nan")
        print(f"{lv['level']:5d} {lv['reports']:8,} {lv['tracked']:8,} {lv['pairs']:14,} {lv['kernel_s']:9.3f} "
              f"{lv['kernel_calls']:6d} {lv['python_in_counts_s']:9.3f} {per_pair:8.2f}")
    print(f"total: kernel {p['kernel_s']:.2f} s, Python around the kernel (elements, runs, sketch) "
          f"{p['python_in_counts_s']:.2f} s, rest of discover (extensions, cut-offs, estimates) "
          f"{p['outside_counts_s']:.2f} s")


def plot(path: str) -> str:
    """recall of the true top 20 (and top 10/50 dashed/dotted) vs n, one panel per workload, a line per epsilon."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    rows = doc["rows"]
    workloads = sorted({r["workload"] for r in rows}, key=lambda w: ["words", "ids"].index(w) if w in ("words", "ids") else 9)
    fig, axes = plt.subplots(1, len(workloads), figsize=(5.5 * len(workloads), 4), sharey=True, squeeze=False)
    styles = {10: ":", 20: "-", 50: "--"}
    for ax, workload in zip(axes[0], workloads):
        for j, epsilon in enumerate(sorted({r["epsilon"] for r in rows if r["workload"] == workload})):
            mine = sorted((r for r in rows if r["workload"] == workload and r["epsilon"] == epsilon), key=lambda r: r["n"])
            for k, style in styles.items():
                ax.plot([r["n"] for r in mine], [100 * r["recall"][str(k)] for r in mine], style, marker="o",
                        color=f"C{j}", label=f"eps={epsilon:g}, top {k}")
            reused = [r for r in mine if r.get("reused")]
            ax.plot([r["n"] for r in reused], [100 * r["recall"]["20"] for r in reused], "s", mfc="none", ms=11,
                    color="grey", label="earlier run (reused)" if j == 0 else None)
        ax.set_xscale("log")
        ax.set_xlabel("reports n (10^7: earlier run, reused)")
        ax.set_title({"words": "wordfreq English words (UTF-8)", "ids": "Zipf(1.1) over 64-bit ids"}.get(workload, workload))
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("recall of the true top k (%)")
    axes[0][-1].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Discovery recall (OCMS+RR prefix extension, alpha={doc.get('alpha', 0.05)})")
    fig.tight_layout()
    out = path.rsplit("/", 1)[0] + "/discovery_recall.png" if "/" in path else "discovery_recall.png"
    fig.savefig(out, dpi=110)
    return out


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
    parser.add_argument("--workloads", default="words,ids")
    parser.add_argument("--json", help="write the rows (and the profile) to this JSON file")
    parser.add_argument("--profile", help="WORKLOAD,EPS,N: per-level kernel vs Python timings of one run")
    parser.add_argument("--include-earlier", action="store_true",
                        help="add the earlier run's n = 10^7 rows (not re-run) to --json, marked reused")
    parser.add_argument("--plot", metavar="FILE.json", help="only draw the recall plot from a JSON written by --json")
    args = parser.parse_args()
    if args.plot:
        print(plot(args.plot))
        return
    np, D = _numerics()
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
    workloads = [w for w in workloads if w[0] in args.workloads.split(",")]
    print(f"alpha={args.alpha} (family-wise false-discovery bound per run); words: wordfreq en top {len(words):,}, "
          f"alphabet={args.alphabet}, max_length={args.max_length}; ids: Zipf(1.1) over {args.ids:,} random 64-bit ids")
    header = (f"{'workload':8} {'eps':>4} {'n':>10} {'top10':>6} {'top20':>6} {'top50':>6} {'found':>6} {'false':>6} "
              f"{'E[false]<=':>10} {'mean.rel.err':>12} {'med.rel.err':>11} {'CI cover':>12} {'unbiased':>12} "
              f"{'f_top20':>8} {'f_detect':>8} {'cutoff1':>8} {'cands':>7} {'sim s':>6} {'decode s':>8}")
    print(header)
    print("-" * len(header))
    rows = []
    for name, domain, values, probs in workloads:
        for epsilon in epsilons:
            for n in ns:
                r = run(domain, name, values, probs, epsilon, n, args.alpha, args.seed)
                cover = f"{r['ci_coverage']:.0%} ({r['ci_checked']})"
                unbiased = f"{r['ci_coverage_unbiased']:.0%} ({r['ci_checked_unbiased']})" if r["ci_checked_unbiased"] else "-"
                print(f"{name:8} {epsilon:4g} {n:10,} {r['recall'][10]:6.0%} {r['recall'][20]:6.0%} {r['recall'][50]:6.0%} "
                      f"{r['found']:6d} {r['false']:6d} {args.alpha:10.2f} {r['mean_rel_error']:12.3f} "
                      f"{r['median_rel_error']:11.3f} {cover:>12} {unbiased:>12} {r['top20_freq']:8.4f} "
                      f"{r['threshold']:8.4f} {r['cutoff']:8.4f} {r['candidates']:7,} {r['sim_s']:6.1f} {r['decode_s']:8.1f}",
                      flush=True)
                rows.append({"workload": name, "epsilon": epsilon, "n": n, **r})
    profile = None
    if args.profile:
        p_name, p_eps, p_n = args.profile.split(",")
        (_, domain, values, probs), = [w for w in workloads if w[0] == p_name]
        profile = profile_run(domain, p_name, values, probs, float(p_eps), int(p_n), args.alpha, args.seed)
        print_profile(profile)
    if args.include_earlier:
        rows += [r for r in earlier_rows(args.alpha) if r["workload"] in args.workloads.split(",")
                 and r["epsilon"] in epsilons]
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"alpha": args.alpha, "seed": args.seed, "vocabulary": len(words), "ids": args.ids,
                       "max_length": args.max_length, "alphabet": args.alphabet, "rows": rows, "profile": profile},
                      f, indent=1, default=float)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
