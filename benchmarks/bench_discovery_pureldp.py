"""Discovery vs pure-ldp's PEM and SFP (issue 15): same words, same epsilon, same reports count, same run.

pure-ldp's PEM (prefix extending method, Wang et al.) keeps the top k fragments per level; its
frequency oracle here is Apple's Hadamard Count Mean Sketch (HCMS, m = 2048, k_hash = 1024, the
library's paper defaults), because its default oracle (OLH) loops over the whole fragment domain
per report. Ours: OCMS+RR with the exact Bonferroni cut-off (``cms_core.discovery``). Both see
the same sampled words (wordfreq English top ``--vocabulary``, cut to ``--max-length``
characters), with the same alphabet (the characters of the vocabulary, plus PEM's padding '*').

    .venv/bin/python -m benchmarks.bench_discovery_pureldp --pure-ldp-python OTHER/bin/python [--reports 100000]

pure-ldp 1.2.0 needs numpy < 2 (it calls ``np.zeros(None)``) and imports scikit-learn and
statsmodels, so it runs in its own interpreter (a venv with ``pure-ldp==1.2.0 numpy==1.26.4
scipy==1.13.1 scikit-learn==1.5.2 statsmodels==0.14.4 pandas==2.1.4``), given by
``--pure-ldp-python``; this script runs PEM there on the same words (a JSON file) and times it.
``--sfp`` adds pure-ldp's SFP (Apple's Sequence Fragment Puzzle, same
HCMS oracle at epsilon/2 for the word and epsilon/2 for the fragment, fragment length 1, top-k
fragments per position), under ``--sfp-timeout`` seconds per run (reported as a timeout when it
does not finish). Without it, only our side runs. Not a test: times depend on the machine. Results are printed.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from cms_core import discovery as D


def sample_words(vocabulary: int, max_length: int, n: int, seed: int):
    from fleet.datasets import load_wordfreq

    words, probs = load_wordfreq("en", vocabulary)
    rng = np.random.default_rng(seed)
    codes = rng.choice(len(words), size=n, p=probs)
    sample = [words[c][:max_length] for c in codes.tolist()]
    return sample


def true_top(sample, k):
    from collections import Counter

    return [v for v, _ in Counter(sample).most_common(k)]


def run_ours(sample, alphabet, max_length, epsilon, seed):
    domain = D.DiscoveryDomain("strings", alphabet="".join(alphabet), max_length=max_length + 1, symbols_per_level=1)
    params = D.level_params("words", 1, epsilon, domain)
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    batches = D.simulate_level_reports(domain, params, sample, rng)
    t1 = time.perf_counter()
    result = D.discover(domain, params, batches)
    t2 = time.perf_counter()
    return [d.value for d in result.discovered], t1 - t0, t2 - t1


def _child(method_imports: str, setup: str, answer: str) -> str:
    """The script a pure-ldp method runs in its own interpreter: the job, the HCMS oracle (k=1024,
    m=2048) both heavy-hitter methods use, their client/server built on ``setup``'s ``common``,
    the timed client and server passes; ``answer`` sets ``found`` (and any ``extra`` to print)."""
    return "\n".join([
        "import json, random, sys, time",
        "import numpy as np",
        "from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer",
        method_imports,
        "job = json.load(open(sys.argv[1]))",
        'random.seed(job["seed"]); np.random.seed(job["seed"])',
        'server_fo = CMSServer(job["epsilon"], k=1024, m=2048, is_hadamard=True)',
        'client_fo = CMSClient(job["epsilon"], server_fo.get_hash_funcs(), m=2048, is_hadamard=True)',
        setup,
        "client = Client(**common, fo_client=client_fo)",
        "server = Server(**common, fo_server=server_fo)",
        "t0 = time.perf_counter()",
        'reports = [client.privatise(w) for w in job["sample"]]',
        "t1 = time.perf_counter()",
        "for r in reports:",
        "    server.aggregate(r)",
        "extra = {}",
        answer,
        "t2 = time.perf_counter()",
        'print(json.dumps({"found": found, "client_s": t1 - t0, "server_s": t2 - t1, **extra}))',
    ])


_PEM_CHILD = _child(
    "from pure_ldp.heavy_hitters.prefix_extending import PEMClient as Client, PEMServer as Server",
    'common = dict(epsilon=job["epsilon"], start_length=0, max_string_length=job["max_length"] + 1, fragment_length=1,\n'
    '              alphabet=list(job["alphabet"]) + ["*"], index_mapper=lambda s: s)',
    'found = [f.split("*")[0] for f in server.find_heavy_hitters(k=job["k"])[0]]',
)

_SFP_CHILD = _child(
    "from pure_ldp.heavy_hitters.apple_sfp.sfp_client import SFPClient as Client\n"
    "from pure_ldp.heavy_hitters.apple_sfp.sfp_server import SFPServer as Server",
    # SFPServer adds its padding to a set of symbols
    'common = dict(epsilon=job["epsilon"], fragment_length=1, max_string_length=job["max_length"],\n'
    '              alphabet=set(job["alphabet"]), index_mapper=lambda s: s)',
    'candidates, freqs = server.find_heavy_hitters(k=job["k"])\n'
    'order = sorted(range(len(candidates)), key=lambda i: -freqs[i])[: job["k"]]\n'
    'found = [candidates[i].split("*")[0] for i in order]\n'
    'extra = {"candidates": len(candidates)}',
)


def run_child(child, python, sample, alphabet, max_length, epsilon, k, seed, timeout=None):
    """A pure-ldp method in its own interpreter; (found, client seconds, server seconds) or None on timeout."""
    import json
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ocms-pureldp-") as tmp:
        job = f"{tmp}/job.json"
        with open(job, "w", encoding="utf-8") as f:
            json.dump({"sample": sample, "alphabet": alphabet, "max_length": max_length, "epsilon": epsilon,
                       "k": k, "seed": seed}, f)
        try:
            out = subprocess.run([python, "-c", child, job], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
    if out.returncode:
        raise SystemExit(f"pure-ldp run failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    return doc["found"], doc["client_s"], doc["server_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reports", default="100000")
    parser.add_argument("--epsilons", default="2,4")
    parser.add_argument("--vocabulary", type=int, default=20000)
    parser.add_argument("--max-length", type=int, default=8)
    parser.add_argument("--pem-k", type=int, default=20, help="PEM's top-k per level")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--sfp", action="store_true", help="also run pure-ldp's SFP (slow: see the module doc)")
    parser.add_argument("--sfp-timeout", type=float, default=600.0, help="seconds per SFP run before giving up")
    parser.add_argument("--methods", default="ocms,pem", help="comma-separated: ocms, pem (sfp via --sfp)")
    parser.add_argument("--pure-ldp-python", help="an interpreter with pure-ldp 1.2.0 (see the module doc)")
    args = parser.parse_args()
    if not args.pure_ldp_python:
        print("no --pure-ldp-python given: only OCMS+RR runs (see the module doc for pure-ldp's interpreter)")
    print(f"words: wordfreq en top {args.vocabulary:,} cut to {args.max_length} characters; PEM: HCMS m=2048 "
          f"k_hash=1024, top-{args.pem_k} per level; ours: OCMS+RR, alpha=0.05")
    header = (f"{'method':10} {'eps':>4} {'n':>9} {'top10':>6} {'top20':>6} {'found':>6} {'false':>6} "
              f"{'client s':>9} {'server s':>9}")
    print(header)
    print("-" * len(header))
    for n in [int(x) for x in args.reports.split(",")]:
        sample = sample_words(args.vocabulary, args.max_length, n, args.seed)
        alphabet = sorted(set("".join(sample)) - {"*"})
        top = true_top(sample, 20)
        held = set(sample)
        for epsilon in [float(x) for x in args.epsilons.split(",")]:
            methods = args.methods.split(",")
            runs = []
            if "ocms" in methods:
                runs.append(("ocms+rr", lambda: run_ours(sample, alphabet, args.max_length, epsilon, args.seed)))
            if args.pure_ldp_python and "pem" in methods:
                runs.append(("pem/hcms", lambda: run_child(_PEM_CHILD, args.pure_ldp_python, sample, alphabet,
                                                           args.max_length, epsilon, args.pem_k, args.seed)))
            if args.pure_ldp_python and args.sfp:
                runs.append(("sfp/hcms", lambda: run_child(_SFP_CHILD, args.pure_ldp_python, sample, alphabet,
                                                           args.max_length, epsilon, args.pem_k, args.seed,
                                                           timeout=args.sfp_timeout)))
            for name, run in runs:
                outcome = run()
                if outcome is None:
                    print(f"{name:10} {epsilon:4g} {n:9,} did not finish within {args.sfp_timeout:g} s", flush=True)
                    continue
                found, client_s, server_s = outcome
                found_set = set(found)
                print(f"{name:10} {epsilon:4g} {n:9,} {sum(v in found_set for v in top[:10]) / 10:6.0%} "
                      f"{sum(v in found_set for v in top) / 20:6.0%} {len(found_set):6d} "
                      f"{sum(v not in held for v in found_set):6d} {client_s:9.1f} {server_s:9.1f}", flush=True)


if __name__ == "__main__":
    main()
