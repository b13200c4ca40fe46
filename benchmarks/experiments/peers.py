"""OCMS+RR next to the peer libraries pure-ldp 1.2.0 and multi-freq-ldpy 0.2.5, one run, same data.

Data: n = 100,000 values of Zipf(s = 1.1) over d = 10,000 (fleet.datasets,
seeded); every method estimates the count of all d values; epsilon = 2 and 4.

Per method:
  accuracy   MSE and max |error| of the d estimated counts, raw (unbiased) and
             after Norm-Sub (cms_core.postprocess.norm_sub, total = 1); for
             multi-freq-ldpy only its own output exists (it clips and
             renormalizes inside its aggregator, so no raw estimate is exposed).
  client     reports per second of the library's own per-report privatise
             function (ours: the device path cms_core.privatize, OS CSPRNG, one
             Python call per report, like the peers').
  server     setup (one-off precomputation the library does in its server's
             constructor), aggregate (ingest all reports), estimate (all d
             values); server pairs/s = n * d / (aggregate + estimate).
  end to end client + setup + aggregate + estimate.

The O(n*d) servers (pure-ldp LH/OLH and multi-freq-ldpy LH/OLH loop over the
whole dictionary per report in Python) are timed on the first
``Config.sampled_reports`` reports and projected linearly to n (their cost is
exactly linear in n); at full size they would take many minutes, so their
accuracy at n = 100k is not measured (``--full-peers`` runs them anyway).

Peer set-up done here, never in site-packages:
  * pure_ldp.frequency_oracles imports its RAPPOR module, which needs
    scikit-learn and statsmodels; a stub module is registered in its place
    (RAPPOR is not benchmarked).
  * pure-ldp's FreqOracleServer calls np.zeros(None) for the sketch servers
    (Apple CMS has no d); numpy 2 rejects a None shape, numpy 1 made it 0-d.
    The module's ``np`` global is replaced by a proxy whose zeros() maps None
    to () (the numpy-1 behaviour) and forwards everything else to numpy.
  * pure-ldp needs xxhash < 4 (the bench extra pins 3.8.2).
  * Seeds: pure-ldp uses the global ``random`` and ``np.random`` states,
    multi-freq-ldpy numba's own generator; all three are seeded per run.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
import types
import warnings
from dataclasses import asdict, dataclass, field

import numpy as np

from cms_core import OCMSParams, OCMSSketch, ReportBatch, TrackedValues, kernel, privatize, simulate_reports, theory
from cms_core.postprocess import norm_sub

from .common import (
    best_of, fmt_num, fmt_sci, fmt_time, md_table, pyplot, rng_for, save_figure, seed_int,
)

PEER_MODULES = ("pure_ldp", "multi_freq_ldpy", "xxhash", "numba")
#: Goal thresholds (issue 6).
GOAL_DECODE_SPEEDUP = 150.0
GOAL_ACCURACY_RATIO = 1.8
GOAL_ACCURACY_EPS = 4.0


@dataclass(frozen=True)
class Config:
    n: int = 100_000
    d: int = 10_000
    zipf_s: float = 1.1
    epsilons: tuple[float, ...] = (2.0, 4.0)
    flh_k: int = 1000  # pure-ldp's own FLH experiment value
    cms_k: int = 1024  # pure-ldp's paper_experiments.py defaults for CMS/HCMS
    cms_m: int = 2048
    sampled_reports: int = 1000  # O(n*d) servers: timed on this many reports
    chunk: int = 10_000  # privatise/aggregate in chunks (bounded memory: a CMS report is an m-vector)
    full_quadratic: bool = False
    repeats: int = 3  # best-of for our (sub-second) server timings
    accuracy_repeats: int = 3  # independent privatizations of the same data per measured-accuracy row (mean ± se)


FULL = Config()
QUICK = Config(n=5_000, d=500, flh_k=50, cms_k=64, cms_m=128, sampled_reports=200, chunk=2_000, repeats=1,
               accuracy_repeats=2)


def missing_modules() -> list[str]:
    from .common import have

    return [m for m in PEER_MODULES if not have(m)]


# ------------------------------------------------------------------ peer import shims
class _ZerosNoneShim(types.ModuleType):
    """numpy proxy for pure_ldp.core._freq_oracle_server: zeros(None) -> zeros(()) as in numpy 1."""

    def __init__(self):
        super().__init__("numpy_zeros_none_shim")

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def zeros(shape, *args, **kwargs):
        return np.zeros(() if shape is None else shape, *args, **kwargs)


def import_pure_ldp():
    """pure-ldp's client/server classes with the shims above (idempotent)."""
    import xxhash

    if int(xxhash.VERSION.split(".")[0]) >= 4:
        raise RuntimeError(f"pure-ldp needs xxhash < 4 (found {xxhash.VERSION}); install the bench extra")
    name = "pure_ldp.frequency_oracles.rappor"
    if name not in sys.modules:
        stub = types.ModuleType(name)
        stub.__doc__ = "stub: pure-ldp's RAPPOR needs scikit-learn/statsmodels and is not benchmarked"

        class _Unavailable:
            def __init__(self, *args, **kwargs):
                raise RuntimeError("pure-ldp RAPPOR is stubbed out in benchmarks/experiments/peers.py")

        stub.RAPPORClient = stub.RAPPORServer = _Unavailable
        stub.__all__ = ["RAPPORClient", "RAPPORServer"]
        sys.modules[name] = stub
    import pure_ldp.core._freq_oracle_server as fos

    if not isinstance(fos.np, _ZerosNoneShim):
        fos.np = _ZerosNoneShim()
    from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer
    from pure_ldp.frequency_oracles.local_hashing import FastLHClient, FastLHServer, LHClient, LHServer

    return types.SimpleNamespace(CMSClient=CMSClient, CMSServer=CMSServer, FastLHClient=FastLHClient,
                                 FastLHServer=FastLHServer, LHClient=LHClient, LHServer=LHServer)


_NUMBA_SEED = None


def seed_all(seed: int) -> None:
    """Seed the global generators the peers use (random, np.random, numba's)."""
    global _NUMBA_SEED
    random.seed(seed)
    np.random.seed(seed)
    from .common import have

    if have("numba"):
        if _NUMBA_SEED is None:
            import numba

            @numba.njit(cache=False)
            def _seed(s):
                np.random.seed(s)

            _NUMBA_SEED = _seed
        _NUMBA_SEED(seed)


# ------------------------------------------------------------------ one run = one row
@dataclass
class Row:
    library: str
    method: str
    params: str
    epsilon: float
    kind: str  # "ours", "sketch", "O(n·d)", "O(1)"
    client_seconds: float = math.nan
    client_path: str = ""
    setup_seconds: float = 0.0
    aggregate_seconds: float = math.nan
    estimate_seconds: float = math.nan
    sampled_reports: int | None = None  # aggregate timed on this many reports, projected to n
    threads: int = 1
    counts_raw: np.ndarray | None = field(default=None, repr=False)
    counts_post: np.ndarray | None = field(default=None, repr=False)
    post_label: str = "Norm-Sub"
    theory_mse: float | None = None
    notes: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)


def _chunks(n: int, size: int):
    for lo in range(0, n, size):
        yield lo, min(n, lo + size)


def _ocms_row(mode: str, eps: float, values: np.ndarray, truth: np.ndarray, cfg: Config, key: int,
              rep: int = 0, timed: bool = True, cache: dict | None = None) -> Row:
    n, d = cfg.n, cfg.d
    params = OCMSParams.build(eps, d, mode=mode, tracked_count=d if mode == "l2" else None)
    label = {"l2": "l-OCMS+RR", "mse": "MSE-OCMS+RR"}[mode]
    row = Row("ocms-pipeline (this repo)", label, f"m={params.hash_range}, field {params.field}", eps, "ours",
              client_path="cms_core.privatize (device path, CSPRNG)")
    # Reports for the server: the seeded simulation path (same distribution; reproducible numbers).
    t0 = time.perf_counter()
    batch = simulate_reports(params, values.astype(np.uint64), rng_for(100, key, rep))
    row.extra["simulate_reports_per_s"] = n / (time.perf_counter() - t0)
    reports = batch.to_reports()  # what a server receives: one (a0, a1, z) tuple per report
    tracked = TrackedValues.range(params, 0, d)

    def aggregate(threads):
        return OCMSSketch(params, tracked).update(ReportBatch.from_reports(params, reports), threads=threads)

    sketch = aggregate(1)
    est = sketch.estimate(postprocess_method="norm_sub")
    row.counts_raw = est.frequency * n
    row.counts_post = est.processed * n
    row.theory_mse = float(np.mean(params.variance(truth / n, n))) * n * n
    if not timed:
        return row
    # Client: the device path, one call per report (what a phone runs).
    t0 = time.perf_counter()
    for v in values.tolist():
        privatize(params, v)
    row.client_seconds = time.perf_counter() - t0
    row.aggregate_seconds = best_of(lambda: aggregate(1), cfg.repeats)
    row.estimate_seconds = best_of(lambda: sketch.estimate(postprocess_method="norm_sub"), cfg.repeats)
    threads = kernel.default_threads()
    row.extra["aggregate_seconds_all_threads"] = best_of(lambda: aggregate(threads), cfg.repeats)
    row.extra["threads_all"] = threads
    row.extra["ingest_seconds"] = best_of(lambda: ReportBatch.from_reports(params, reports), cfg.repeats)
    row.extra["decode_pairs_per_s_1_thread"] = n * d / best_of(
        lambda: kernel.match_counts(params, batch, tracked, threads=1), cfg.repeats)
    return row


def _peer_loop(row: Row, cfg: Config, privatise, aggregate, values: np.ndarray, quadratic: bool):
    """Privatise all n values (timed), aggregate all (or the first sampled_reports, timed) in chunks."""
    n = cfg.n
    limit = n if (not quadratic or cfg.full_quadratic) else min(n, cfg.sampled_reports)
    client = agg = 0.0
    done = 0
    for lo, hi in _chunks(n, cfg.chunk):
        chunk = values[lo:hi].tolist()
        t0 = time.perf_counter()
        reports = [privatise(v) for v in chunk]
        client += time.perf_counter() - t0
        take = max(0, min(hi, limit) - lo)
        if take:
            t0 = time.perf_counter()
            for r in reports[:take]:
                aggregate(r)
            agg += time.perf_counter() - t0
            done += take
    row.client_seconds = client
    row.aggregate_seconds = agg * (n / done)
    if done < n:
        row.sampled_reports = done
    return done


def _pure_olh_row(pl, eps, values, truth, cfg, key, rep=0, timed=True, cache=None) -> Row:
    d = cfg.d
    ident = lambda x: x  # noqa: E731 - values are already indices 0..d-1
    row = Row("pure-ldp 1.2.0", "OLH (LH, use_olh)", "g = round(e^ε)+1, fresh seed per report", eps, "O(n·d)",
              client_path="LHClient.privatise")
    seed_all(seed_int(200, key, rep))
    client = pl.LHClient(eps, d, use_olh=True, index_mapper=ident)
    t0 = time.perf_counter()
    server = pl.LHServer(eps, d, use_olh=True, index_mapper=ident)
    row.setup_seconds = time.perf_counter() - t0
    done = _peer_loop(row, cfg, client.privatise, server.aggregate, values, quadratic=True)
    t0 = time.perf_counter()
    est = np.asarray(server.estimate_all(range(d), suppress_warnings=True), float)
    row.estimate_seconds = time.perf_counter() - t0
    if done == cfg.n:
        row.counts_raw = est
    g = server.g
    row.theory_mse = float(np.mean(theory.pairwise_variance(eps, g, truth / cfg.n, cfg.n))) * cfg.n**2
    row.notes.append("theory MSE assumes an ideal pairwise-independent hash (xxh32 per seed)")
    return row


def _pure_flh_row(pl, eps, values, truth, cfg, key, rep=0, timed=True, cache=None) -> Row:
    d, k = cfg.d, cfg.flh_k
    ident = lambda x: x  # noqa: E731
    row = Row("pure-ldp 1.2.0", "FLH (FastLH, OLH g)", f"k = {k} hash functions", eps, "sketch",
              client_path="FastLHClient.privatise")
    seed_all(seed_int(300, key, rep))
    if "flh_server" in cache:
        # Accuracy repeats reuse the server (its constructor hashes k x d values twice, ~20 s): clear its state.
        server = cache["flh_server"]
        server.reset()
        server.hash_counts[:] = 0
    else:
        t0 = time.perf_counter()
        server = pl.FastLHServer(eps, d, k, use_olh=True, index_mapper=ident)  # builds the k x d hash matrix
        row.setup_seconds = time.perf_counter() - t0
        cache["flh_server"] = server
        row.notes.append("pure-ldp's FastLHServer constructor hashes all k·d (seed, value) pairs twice (once in "
                         "update_params, once in __init__); its setup time is measured as the library does it")
    client = pl.FastLHClient(eps, d, k, use_olh=True, index_mapper=ident)
    _peer_loop(row, cfg, client.privatise, server.aggregate, values, quadratic=False)
    t0 = time.perf_counter()
    row.counts_raw = np.asarray(server.estimate_all(range(d), suppress_warnings=True), float)
    row.estimate_seconds = time.perf_counter() - t0
    return row


def _pure_cms_row(pl, eps, values, truth, cfg, key, rep=0, timed=True, cache=None, *, hadamard: bool) -> Row:
    d, k, m = cfg.d, cfg.cms_k, cfg.cms_m
    name = "Apple HCMS (Hadamard CMS)" if hadamard else "Apple CMS"
    row = Row("pure-ldp 1.2.0", name, f"k = {k}, m = {m}", eps, "sketch",
              client_path="CMSClient.privatise")
    seed_all(seed_int(400 + int(hadamard), key, rep))
    t0 = time.perf_counter()
    server = pl.CMSServer(eps, k, m, is_hadamard=hadamard)
    row.setup_seconds = time.perf_counter() - t0
    client = pl.CMSClient(eps, server.get_hash_funcs(), m, is_hadamard=hadamard)
    _peer_loop(row, cfg, client.privatise, server.aggregate, values, quadratic=False)
    t0 = time.perf_counter()
    row.counts_raw = np.asarray(server.estimate_all(range(d), suppress_warnings=True), float)
    row.estimate_seconds = time.perf_counter() - t0
    return row


def _mfl_grr_row(eps, values, truth, cfg, key, rep=0, timed=True, cache=None) -> Row:
    from multi_freq_ldpy.pure_frequency_oracles.GRR import GRR_Aggregator_MI, GRR_Client

    d = cfg.d
    row = Row("multi-freq-ldpy 0.2.5", "GRR (k-RR)", "direct encoding over d", eps, "O(1)",
              client_path="GRR_Client (numba)", post_label="library clip+renormalise")
    GRR_Client(0, d, eps)  # numba compile outside the timing
    seed_all(seed_int(500, key, rep))
    reports = []
    _peer_loop(row, cfg, lambda v: GRR_Client(v, d, eps), reports.append, values, quadratic=False)
    t0 = time.perf_counter()
    freq = GRR_Aggregator_MI(reports, d, eps)
    row.aggregate_seconds += time.perf_counter() - t0  # counting + estimate happen in one call
    row.estimate_seconds = 0.0
    row.counts_post = np.asarray(freq, float) * cfg.n
    row.notes.append("aggregate + estimate are one library call (GRR_Aggregator_MI)")
    return row


def _mfl_olh_row(eps, values, truth, cfg, key, rep=0, timed=True, cache=None) -> Row:
    from multi_freq_ldpy.pure_frequency_oracles.LH import LH_Aggregator_MI, LH_Client

    d, n = cfg.d, cfg.n
    row = Row("multi-freq-ldpy 0.2.5", "OLH (LH, optimal)", "g = round(e^ε)+1, fresh seed per report", eps,
              "O(n·d)", client_path="LH_Client", post_label="library clip+renormalise")
    LH_Client(0, d, eps)  # numba compile of its GRR step outside the timing
    seed_all(seed_int(600, key, rep))
    reports = []
    limit = n if cfg.full_quadratic else min(n, cfg.sampled_reports)
    t0 = time.perf_counter()
    for v in values.tolist():
        reports.append(LH_Client(v, d, eps))
    row.client_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    freq = LH_Aggregator_MI(reports[:limit], d, eps)  # the per-report loop over d, then MI
    row.aggregate_seconds = (time.perf_counter() - t0) * (n / limit)
    row.estimate_seconds = 0.0
    if limit < n:
        row.sampled_reports = limit
    else:
        row.counts_post = np.asarray(freq, float) * n
    g = int(round(math.exp(eps))) + 1
    row.theory_mse = float(np.mean(theory.pairwise_variance(eps, g, truth / n, n))) * n * n
    row.notes.append("aggregate + estimate are one library call (LH_Aggregator_MI)")
    return row


# ------------------------------------------------------------------ metrics
def accuracy(counts: np.ndarray | None, truth: np.ndarray) -> tuple[float | None, float | None]:
    if counts is None:
        return None, None
    err = counts - truth
    return float(np.mean(err**2)), float(np.max(np.abs(err)))


def accuracy_pair(row: Row, truth: np.ndarray, cfg: Config) -> dict:
    """MSE and max |error| of one run's counts, raw and post-processed (Norm-Sub unless the library did its own)."""
    raw_mse, raw_max = accuracy(row.counts_raw, truth)
    post = row.counts_post
    if post is None and row.counts_raw is not None:
        post = norm_sub(row.counts_raw / cfg.n, 1.0) * cfg.n
    post_mse, post_max = accuracy(post, truth)
    return {"raw_mse": raw_mse, "raw_max_error": raw_max, "post_mse": post_mse, "post_max_error": post_max}


def _mean_se(values: list) -> tuple[float | None, float | None]:
    if not values or values[0] is None:
        return None, None
    arr = np.asarray(values, float)
    se = float(arr.std(ddof=1) / math.sqrt(arr.size)) if arr.size > 1 else None
    return float(arr.mean()), se


def summarize(row: Row, accs: list[dict], cfg: Config) -> dict:
    """One table row: timings of the first run, accuracy as the mean (± se) over the accuracy repeats."""
    n, d = cfg.n, cfg.d
    server = row.aggregate_seconds + row.estimate_seconds
    out = {k: v for k, v in asdict(row).items() if k not in ("counts_raw", "counts_post")}
    for metric in ("raw_mse", "raw_max_error", "post_mse", "post_max_error"):
        mean, se = _mean_se([a[metric] for a in accs])
        out[metric], out[f"{metric}_se"] = mean, se
    out["accuracy_runs"] = len(accs) if out["raw_mse"] is not None or out["post_mse"] is not None else 0
    out.update({
        "client_reports_per_s": n / row.client_seconds,
        "server_seconds": server,
        "server_pairs_per_s": n * d / server if server > 0 else None,
        "end_to_end_seconds": row.client_seconds + row.setup_seconds + server,
        "end_to_end_no_setup_seconds": row.client_seconds + server,
        "projected": row.sampled_reports is not None,
    })
    return out


# ------------------------------------------------------------------ run
def run(cfg: Config, out_dir: str, *, plots: bool = True, log=print) -> dict:
    """Run every method at every epsilon, write peers.md / peers.json (and PNGs); return the results."""
    os.makedirs(out_dir, exist_ok=True)
    missing = missing_modules()
    if missing:
        text = ("# Peer libraries\n\nNot run: missing " + ", ".join(missing) +
                ". Install the bench extra: `.venv/bin/pip install -e '.[bench]'`.\n")
        with open(os.path.join(out_dir, "peers.md"), "w", encoding="utf-8") as fh:
            fh.write(text)
        return {"skipped": missing}
    from fleet.datasets import parse_dataset

    t_start = time.perf_counter()
    pl = import_pure_ldp()
    ds = parse_dataset(f"zipf:s={cfg.zipf_s},d={cfg.d}")
    values = ds.sample(cfg.n, rng_for(99, 0))
    truth = np.bincount(values, minlength=cfg.d).astype(float)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # pure-ldp warns about n < 10,000 on every estimate
        for ei, eps in enumerate(cfg.epsilons):
            key = ei
            runs = [
                lambda **kw: _ocms_row("l2", eps, values, truth, cfg, key, **kw),
                lambda **kw: _ocms_row("mse", eps, values, truth, cfg, 10 + key, **kw),
                lambda **kw: _pure_olh_row(pl, eps, values, truth, cfg, key, **kw),
                lambda **kw: _pure_flh_row(pl, eps, values, truth, cfg, key, **kw),
                lambda **kw: _pure_cms_row(pl, eps, values, truth, cfg, key, hadamard=False, **kw),
                lambda **kw: _pure_cms_row(pl, eps, values, truth, cfg, key, hadamard=True, **kw),
                lambda **kw: _mfl_grr_row(eps, values, truth, cfg, key, **kw),
                lambda **kw: _mfl_olh_row(eps, values, truth, cfg, key, **kw),
            ]
            for make in runs:
                t0 = time.perf_counter()
                cache: dict = {}
                row = make(rep=0, timed=True, cache=cache)
                accs = [accuracy_pair(row, truth, cfg)]
                if accs[0]["raw_mse"] is not None or accs[0]["post_mse"] is not None:
                    for rep in range(1, cfg.accuracy_repeats):
                        accs.append(accuracy_pair(make(rep=rep, timed=False, cache=cache), truth, cfg))
                s = summarize(row, accs, cfg)
                rows.append(s)
                log(f"  peers eps={eps:g} {row.library} {row.method}: wall {time.perf_counter() - t0:.1f} s, "
                    f"raw MSE {fmt_sci(s['raw_mse'])}, server {fmt_num(s['server_pairs_per_s'])} pairs/s")
    seconds = time.perf_counter() - t_start
    payload = {"config": asdict(cfg), "seconds": seconds, "dataset": ds.description, "rows": rows,
               "goals": goals(rows, cfg)}
    names = plot(payload, out_dir) if plots else []
    with open(os.path.join(out_dir, "peers.md"), "w", encoding="utf-8") as fh:
        fh.write(markdown(payload, names))
    with open(os.path.join(out_dir, "peers.json"), "w", encoding="utf-8") as fh:
        json.dump(payload, fh, indent=1)
    return payload


def _find(rows, eps, library_prefix, method_prefix):
    for r in rows:
        if r["epsilon"] == eps and r["library"].startswith(library_prefix) and r["method"].startswith(method_prefix):
            return r
    return None


def goals(rows: list[dict], cfg: Config) -> list[dict]:
    """The issue's goals, each with the measured numbers and a verdict."""
    out = []
    for eps in cfg.epsilons:
        ours = _find(rows, eps, "ocms", "l-OCMS")
        for lib, meth in (("pure-ldp", "OLH"), ("multi-freq-ldpy", "OLH")):
            peer = _find(rows, eps, lib, meth)
            ratio = ours["server_pairs_per_s"] / peer["server_pairs_per_s"]
            decode = ours["extra"]["decode_pairs_per_s_1_thread"] / peer["server_pairs_per_s"]
            out.append({
                "goal": f"OCMS+RR server ≥ {GOAL_DECODE_SPEEDUP:g}× the O(n·d) peer {lib} {meth} (pairs/s, 1 thread)",
                "epsilon": eps, "value": ratio, "met": ratio >= GOAL_DECODE_SPEEDUP,
                "detail": f"{fmt_num(ours['server_pairs_per_s'])} vs {fmt_num(peer['server_pairs_per_s'])} pairs/s "
                          f"= {ratio:,.0f}× (decode kernel alone {decode:,.0f}×)",
            })
        for lib, meth in (("pure-ldp", "FLH"), ("pure-ldp", "Apple CMS"), ("pure-ldp", "Apple HCMS")):
            peer = _find(rows, eps, lib, meth)
            speed = peer["end_to_end_seconds"] / ours["end_to_end_seconds"]
            speed_ns = peer["end_to_end_no_setup_seconds"] / ours["end_to_end_no_setup_seconds"]
            out.append({
                "goal": f"OCMS+RR faster end to end than {lib} {meth} at n = {cfg.n:,}",
                "epsilon": eps, "value": speed, "met": speed > 1.0 and speed_ns > 1.0,
                "detail": f"{fmt_time(ours['end_to_end_seconds'])} vs {fmt_time(peer['end_to_end_seconds'])} "
                          f"({speed:.1f}×; without the peer's one-off setup {speed_ns:.1f}×)",
            })
            if eps == GOAL_ACCURACY_EPS:
                acc, acc_se = _ratio(peer, ours, "raw_mse")
                post, post_se = _ratio(peer, ours, "post_mse")
                border = acc_se is not None and abs(acc - GOAL_ACCURACY_RATIO) < 2 * acc_se
                out.append({
                    "goal": f"OCMS+RR ≥ {GOAL_ACCURACY_RATIO:g}× more accurate (count MSE) than {lib} {meth} at ε = {eps:g}",
                    "epsilon": eps, "value": acc, "met": acc >= GOAL_ACCURACY_RATIO,
                    "detail": f"raw MSE {fmt_sci(peer['raw_mse'])} vs {fmt_sci(ours['raw_mse'])} = "
                              f"{acc:.2f}× ± {acc_se or 0:.2f}" + (" (borderline: within 2 se of the goal)" if border else "")
                              + f"; after Norm-Sub {fmt_sci(peer['post_mse'])} vs {fmt_sci(ours['post_mse'])} = "
                              f"{post:.2f}× ± {post_se or 0:.2f}",
                })
    return out


def _ratio(a: dict, b: dict, metric: str) -> tuple[float, float | None]:
    """a/b of a mean metric with its standard error (delta method; the runs are independent)."""
    r = a[metric] / b[metric]
    sa, sb = a.get(f"{metric}_se"), b.get(f"{metric}_se")
    if sa is None or sb is None:
        return r, None
    return r, r * math.hypot(sa / a[metric], sb / b[metric])


# ------------------------------------------------------------------ output
def markdown(payload: dict, plots: list[str]) -> str:
    cfg = payload["config"]
    rows = payload["rows"]
    lines = [
        "# OCMS+RR next to pure-ldp and multi-freq-ldpy",
        "",
        f"Generated by `benchmarks/experiments/peers.py`. Data: {payload['dataset']}; n = {cfg['n']:,} values "
        f"(seeded), every method estimates all d = {cfg['d']:,} counts, single thread. Timings are from one run "
        f"(ours: best of {cfg['repeats']} for the server; the peers are pure Python and run once). Accuracy is the "
        f"mean ± standard error over {cfg['accuracy_repeats']} independent privatizations of the same data (fixed "
        "seeds).",
        "",
        "Rows marked ≈ are O(n·d) servers: their aggregation was timed on the first "
        f"{cfg['sampled_reports']:,} reports and projected linearly to n (a full run would take many minutes), so "
        "their accuracy at this n was not measured; their theory MSE (ideal hashing) is shown instead.",
        "",
    ]
    for p in plots:
        lines.append(f"![{p}]({p})")
    if plots:
        lines.append("")
    for eps in cfg["epsilons"]:
        lines += [f"## ε = {eps:g}", "", "Accuracy on the d counts (truth = exact counts of the sample):", ""]
        acc_rows = []
        for r in (r for r in rows if r["epsilon"] == eps):
            acc_rows.append([
                r["library"], r["method"], r["params"],
                _pm(r, "raw_mse"), fmt_num(r["raw_max_error"]),
                _pm(r, "post_mse"), fmt_num(r["post_max_error"]), r["post_label"],
                fmt_sci(r["theory_mse"]),
            ])
        lines += [md_table(["library", "method", "parameters", "MSE raw", "max err raw", "MSE post", "max err post",
                            "post-processing", "theory MSE (raw)"], acc_rows, "lll" + "r" * 4 + "lr"), ""]
        lines += ["Cost (client = the library's per-report privatise; server = aggregate + estimate all d):", ""]
        cost_rows = []
        for r in (r for r in rows if r["epsilon"] == eps):
            approx = "≈ " if r["projected"] else ""
            cost_rows.append([
                r["library"], r["method"], r["kind"],
                fmt_num(r["client_reports_per_s"]),
                fmt_time(r["setup_seconds"]),
                approx + fmt_time(r["aggregate_seconds"]),
                fmt_time(r["estimate_seconds"]),
                approx + fmt_num(r["server_pairs_per_s"]),
                approx + fmt_time(r["end_to_end_seconds"]),
            ])
        lines += [md_table(["library", "method", "server kind", "client reports/s", "server setup", "aggregate",
                            "estimate all d", "server pairs/s", "end to end"], cost_rows, "lll" + "r" * 6), ""]
        ours = [r for r in rows if r["epsilon"] == eps and r["kind"] == "ours"]
        for r in ours:
            ex = r["extra"]
            lines.append(
                f"- {r['method']}: decode kernel alone {fmt_num(ex['decode_pairs_per_s_1_thread'])} pairs/s (1 thread); "
                f"aggregate with {ex['threads_all']} threads {fmt_time(ex['aggregate_seconds_all_threads'])}; "
                f"of the aggregate, {fmt_time(ex['ingest_seconds'])} is turning {cfg['n']:,} report tuples into arrays "
                f"(ReportBatch.from_reports); seeded simulation path {fmt_num(ex['simulate_reports_per_s'])} reports/s."
            )
        lines.append("")
    lines += ["## Goals", ""]
    goal_rows = [[g["goal"], f"{g['epsilon']:g}", "**met**" if g["met"] else "**not met**", g["detail"]]
                 for g in payload["goals"]]
    lines += [md_table(["goal", "ε", "verdict", "measured"], goal_rows, "lrll"), ""]
    notes = sorted({n for r in rows for n in r["notes"]})
    if notes:
        lines += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]
    lines.append(f"Run time of this part: {payload['seconds']:.0f} s.")
    return "\n".join(lines) + "\n"


def _pm(row: dict, metric: str) -> str:
    if row[metric] is None:
        return "—"
    se = row.get(f"{metric}_se")
    return fmt_sci(row[metric]) + (f" ± {fmt_sci(se, 2)}" if se is not None else "")


def _color(row: dict) -> str:
    return "tab:red" if row["kind"] == "ours" else ("tab:blue" if row["library"].startswith("pure") else "tab:green")


#: Colour per library in both peer plots (the legend says which is which).
_LIBRARY_COLOURS = (("ours (ocms-pipeline)", "tab:red"), ("pure-ldp", "tab:blue"), ("multi-freq-ldpy", "tab:green"))


def _legend_handles(plt):
    from matplotlib.patches import Patch

    return [Patch(color=colour, label=label) for label, colour in _LIBRARY_COLOURS]


def plot(payload: dict, out_dir: str) -> list[str]:
    plt = pyplot()
    if plt is None:
        return []
    rows = payload["rows"]
    eps_list = payload["config"]["epsilons"]
    fig, axes = plt.subplots(1, len(eps_list), figsize=(6.4 * len(eps_list), 5.2), squeeze=False)
    for ax, eps in zip(axes[0], eps_list):
        sel = [r for r in rows if r["epsilon"] == eps]
        measured = sorted((r for r in sel if r["post_mse"] is not None), key=lambda r: r["post_mse"])
        projected = [r for r in sel if r["post_mse"] is None]  # O(n·d) peers: projected time only
        for k, r in enumerate(projected):
            color = _color(r)
            ax.axvline(r["end_to_end_seconds"], color=color, linestyle="--", linewidth=1)
            # Two such lines sit close together: their labels go on opposite sides, at different heights.
            ax.annotate(f"{r['library'].split()[0]} {r['method'].split(' (')[0]} (≈ time only)",
                        (r["end_to_end_seconds"], 0.3 + 0.4 * (k % 2)), xycoords=("data", "axes fraction"),
                        rotation=90, fontsize=7, ha="right" if k % 2 == 0 else "left", va="center", color=color)
        # Labels of nearby points collide: give each point its own row of text (sorted by MSE), with a leader
        # line from the point, in the right-hand margin of the panel.
        for i, r in enumerate(measured):
            color = _color(r)
            ax.scatter(r["end_to_end_seconds"], r["post_mse"], s=60, color=color,
                       marker="o" if r["kind"] == "ours" else "s", zorder=3)
            label_y = (i + 0.5) / max(len(measured), 1)  # same order as the points: leader lines do not cross
            ax.annotate(f"{r['library'].split()[0]} {r['method']}", (r["end_to_end_seconds"], r["post_mse"]),
                        xytext=(1.03, label_y), textcoords="axes fraction", fontsize=7, va="center", color=color,
                        arrowprops=dict(arrowstyle="-", color=color, linewidth=0.6, alpha=0.7))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("end-to-end seconds (client + setup + server), log")
        ax.set_ylabel("count MSE after post-processing, log\n(Norm-Sub; multi-freq-ldpy: its own clip+renormalise)")
        ax.set_title(f"ε = {eps:g}, n = {payload['config']['n']:,}, d = {payload['config']['d']:,}\n"
                     "dashed: O(n·d) peers, projected time (accuracy not measured)", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(handles=_legend_handles(plt), fontsize=7, loc="upper center")
    fig.subplots_adjust(wspace=0.95, right=0.8)
    name = "peers_accuracy_vs_time.png"
    save_figure(fig, os.path.join(out_dir, name))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8.5, 5.0))
    eps = eps_list[-1]
    sel = [r for r in rows if r["epsilon"] == eps]
    labels = [f"{r['library'].split()[0]} {r['method'].split(' (')[0]}" for r in sel]
    rates = [r["server_pairs_per_s"] for r in sel]
    colors = [_color(r) for r in sel]
    ax.bar(range(len(sel)), rates, color=colors)
    ax.set_yscale("log")
    ax.set_xticks(range(len(sel)))
    ax.set_xticklabels(labels, fontsize=7, rotation=35, ha="right", rotation_mode="anchor")
    ax.set_ylabel("server report × value pairs per second (log)")
    ax.set_title(f"Server throughput, ε = {eps:g}, n = {payload['config']['n']:,}, d = {payload['config']['d']:,} "
                 "(1 thread)", fontsize=9)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(handles=_legend_handles(plt), fontsize=7, loc="upper center")
    name2 = "peers_server_throughput.png"
    save_figure(fig, os.path.join(out_dir, name2))
    plt.close(fig)
    return [name, name2]


def replot(out_dir: str) -> list[str]:
    """Redraw both peer plots from the stored peers.json (no peer library needed)."""
    with open(os.path.join(out_dir, "peers.json"), encoding="utf-8") as fh:
        return plot(json.load(fh), out_dir)
