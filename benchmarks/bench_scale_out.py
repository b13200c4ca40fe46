"""State that scales out (issue 27): the same registry served by 1, 2 and 4 workers with ``--view share``.

    python -m benchmarks.bench_scale_out [--quick] [--json] [--metrics 200]

A registry of ``--metrics`` metric versions (categories, integers with D from 500 to 10,000,
strings; 10 s buckets kept 10 min, so memory is visible) gets reports in every partition of
every one of B buckets of every metric, on a fresh embedded broker per worker count. Per worker:
the view's bytes (its own accounting, /healthz ``view_bytes``) beside its RSS growth, its table
store's bytes, and the reports/s of the whole group (produce start to every report in some
view); then one-value queries of every metric on every worker, local or forwarded (the
``X-OCMS-Answered-By`` header), p50/p99; and whether every worker's answer of every metric
equals the single worker's, integer for integer. ``model_error`` is the capacity model's
(benchmarks/capacity_model.py) largest relative error on a worker's view bytes.

Goals (issue 27): 4 workers' largest view <= 35% of one worker's; answers equal; forwarded
one-value query p99 <= 50 ms; model error within +-20%. A benchmark: it prints numbers and never
fails on them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from agents.catalog import Catalog
from agents.status import TABLE_BYTES_EVERY_S
from agents.view import CountsView
from benchmarks.capacity_model import view_bytes_of
from cms_core import wire
from cms_core.privatize import simulate_reports
from cms_core.values import elements_to_array, encode_value, limbs_for
from infra.broker import EmbeddedBroker
from infra.process import free_port
from ocms.process import WorkerChild
from registry import load_registry

PARTITIONS = 4
BUCKET_S = 10
WORDS = [f"word-{i}" for i in range(400)]
TRACKED_INTEGERS = (500, 1000, 2000, 5000, 10_000)


def registry_text(count: int) -> str:
    out = ["metrics:"]
    for i in range(count):
        kind = ("categories", "integers", "strings")[i % 3]
        out += [f"  - name: m{i:03d}_{kind}", f"    description: scale-out metric {i}", "    owner: bench",
                f"    epsilon: {(1, 2, 3, 4)[i % 4]}", "    top_k: 5", f"    bucket: {BUCKET_S}s", "    retention: 10m"]
        if kind == "categories":
            out += [f"    categories: [{', '.join(f'c{j}' for j in range(8 + 12 * (i % 5)))}]", "    mechanism: direct"]
        elif kind == "integers":
            d = TRACKED_INTEGERS[(i // 3) % len(TRACKED_INTEGERS)]
            out += ["    integers: 100000", f"    tracked: {{range: [0, {d}]}}", "    mechanism: ocms"]
        else:
            out += ["    strings: true", f"    tracked: [{', '.join(repr(w) for w in WORDS[:200])}]", "    mode: l2",
                    "    mechanism: ocms"]
    return "\n".join(out) + "\n"


def frames(versions, buckets: int, per_frame: int, now: float) -> list[tuple[int, int, bytes]]:
    """(partition, timestamp ms, frame) for every metric version, bucket and partition."""
    base = int(now // BUCKET_S) * BUCKET_S - buckets * BUCKET_S
    out = []
    for i, version in enumerate(versions):
        params, rng = version.params, np.random.default_rng(i)
        n = buckets * PARTITIONS * per_frame
        if version.domain == "strings":
            codes = {w: encode_value(params, w) for w in WORDS}
            picks = (rng.zipf(1.3, n) - 1) % len(WORDS)
            elements = elements_to_array([codes[WORDS[p]] for p in picks], limbs_for(params))
        else:
            elements = ((rng.zipf(1.3, n) - 1) % params.dictionary_size).astype(np.uint64)
        batch = simulate_reports(params, elements, rng)
        for j in range(buckets * PARTITIONS):
            stamp = (base + (j // PARTITIONS) * BUCKET_S + 1) * 1000
            out.append((j % PARTITIONS, stamp, wire.encode_frame(params, batch.slice(j * per_frame, (j + 1) * per_frame))))
    return out


async def produce(bootstrap: str, topic: str, records) -> None:
    from infra.kafka import EMBEDDED, make_producer

    producer = make_producer(bootstrap, EMBEDDED, acks=1, linger_ms=2, max_batch_size=1 << 20)
    await producer.start()
    try:
        futures = [await producer.send(topic, frame, partition=p, timestamp_ms=t) for p, t, frame in records]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def get(url: str) -> tuple[int, dict, dict, float]:
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            body, status, headers = response.read(), response.status, dict(response.headers)
    except urllib.error.HTTPError as exc:
        body, status, headers = exc.read(), exc.code, dict(exc.headers)
    return status, json.loads(body), headers, time.perf_counter() - started


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS"))


def wait(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = condition()
        except OSError:
            result = None
        if result:
            return result
        time.sleep(0.1)
    raise RuntimeError(f"not within {timeout} s: {what}")


def run(workers: int, path: Path, versions, records, total: int, log_dir: Path, queries: int, shard) -> dict:
    with EmbeddedBroker() as broker:
        topic = f"scale-{workers}"
        ports = [free_port() for _ in range(workers)]
        children = [WorkerChild(topic, "--registry", str(path), "--view", "share", "--discovery-interval-seconds", "0",
                                bootstrap=broker.bootstrap_servers, web_port=port,
                                log=log_dir / f"{topic}-{port}.log").start() for port in ports]
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        try:
            for child in children:
                child.wait_healthy(180)

            def settled():
                docs = [get(url + "/healthz")[1] for url in urls]
                held = [set(d["ready_shards"]) for d in docs]
                return all(d["ready_shards"] == d["held_shards"] == d["assigned_partitions"] for d in docs) and \
                    set().union(*held) == set(range(PARTITIONS))

            wait(settled, 180, "every shard held and ready")
            before = [rss_mib(c.process.pid) for c in children]
            start = time.monotonic()
            asyncio.run(produce(broker.bootstrap_servers, topic, records))
            wait(lambda: sum(get(url + "/healthz")[1]["view_reports"] for url in urls) >= total, 600, "all counted")
            seconds = time.monotonic() - start
            time.sleep(TABLE_BYTES_EVERY_S)  # /healthz's table_bytes is re-counted at most this often
            health = [get(url + "/healthz")[1] for url in urls]
            after = [rss_mib(c.process.pid) for c in children]
            local, forwarded, answers = [], [], {}
            for w, url in enumerate(urls):
                for version in versions[:queries]:
                    value = version.tracked_names()[0]
                    status, doc, headers, seconds_q = get(f"{url}/metrics/{version.metric}/estimates/"
                                                          f"{urllib.parse.quote(str(value), safe='')}")
                    assert status == 200, (status, doc)
                    (local if headers.get("X-OCMS-Answered-By") == url else forwarded).append(seconds_q)
                for version in versions:
                    status, doc, _, _ = get(f"{url}/metrics/{version.metric}/estimates")
                    answers[(w, version.metric)] = (status, doc.get("n"), [r["match_count"] for r in doc["estimates"]])
            model = []
            for h in health:
                model.append(sum(view_bytes_of(len(v.tracked_values()), BUCKETS + 1, PARTITIONS) for v in versions
                                 if shard[v.metric] in h["held_shards"]))
            return {"workers": workers, "reports_per_s": total / seconds, "seconds": seconds,
                    "view_bytes": [h["view_bytes"] for h in health], "table_bytes": [h["table_bytes"] for h in health],
                    "held_shards": [h["held_shards"] for h in health], "model_view_bytes": model,
                    "rss_mib": after, "rss_growth_mib": [a - b for a, b in zip(after, before)],
                    "local_s": local, "forwarded_s": forwarded, "answers": answers}
        finally:
            for child in children:
                child.stop()


BUCKETS = 30


def percentile_ms(values, q) -> float | None:
    return float(np.percentile(values, q) * 1000) if values else None


def main() -> None:
    global BUCKETS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer buckets and reports (a couple of minutes)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    parser.add_argument("--metrics", type=int, default=200, help="metric versions in the registry (default 200)")
    args = parser.parse_args()
    if args.metrics < 1:
        parser.error("--metrics must be >= 1")
    BUCKETS, per_frame = (6, 25) if args.quick else (30, 100)
    queries = 40 if args.quick else args.metrics
    with tempfile.TemporaryDirectory(prefix="ocms-scale-") as tmp:
        folder = Path(tmp)
        path = folder / "registry.yaml"
        path.write_text(registry_text(args.metrics), encoding="utf-8")
        registry = load_registry(path)
        versions = [v for m in registry.metrics for v in m.live_versions]
        records = frames(versions, BUCKETS, per_frame, time.time())
        layout = Catalog(registry, CountsView()).state_layout(PARTITIONS)  # which shard holds each metric
        shard = {v.metric: layout.shard_of_metric(v.metric) for v in versions}
        total = len(records) * per_frame
        runs = {}
        for workers in (1, 2, 4):
            runs[workers] = r = run(workers, path, versions, records, total, folder, queries, shard)
            if not args.json:
                print(f"{workers} worker(s): {r['reports_per_s']:,.0f} reports/s; view bytes {r['view_bytes']} "
                      f"(model {[int(m) for m in r['model_view_bytes']]}); table bytes {r['table_bytes']}; "
                      f"RSS growth MiB {[round(g) for g in r['rss_growth_mib']]}; shards {r['held_shards']}", flush=True)
    single = {metric: answer for (_, metric), answer in runs[1]["answers"].items()}
    equal = all(answer == single[metric] for r in runs.values() for (_, metric), answer in r["answers"].items())
    errors = [abs(m - v) / v for r in runs.values() for m, v in zip(r["model_view_bytes"], r["view_bytes"]) if v]
    out = {"metric_versions": len(versions), "reports": total, "buckets": BUCKETS, "partitions": PARTITIONS,
           "workers": {}, "answers_equal": equal, "model_error": max(errors) if errors else None}
    for workers, r in runs.items():
        out["workers"][str(workers)] = {
            "view_bytes_max": max(r["view_bytes"]), "view_bytes": r["view_bytes"], "table_bytes": r["table_bytes"],
            "rss_growth_mib": r["rss_growth_mib"], "reports_per_s": r["reports_per_s"],
            # RSS growth over the accounted bytes (view + table store): Python objects, buffers, allocator
            "rss_over_accounted": max(g * 2**20 / (v + t) for g, v, t in zip(r["rss_growth_mib"], r["view_bytes"],
                                                                             r["table_bytes"])),
            "query_local_p50_ms": percentile_ms(r["local_s"], 50), "query_local_p99_ms": percentile_ms(r["local_s"], 99),
            "query_forwarded_p50_ms": percentile_ms(r["forwarded_s"], 50),
            "query_forwarded_p99_ms": percentile_ms(r["forwarded_s"], 99), "queries_forwarded": len(r["forwarded_s"])}
    out["largest_view_4_of_1"] = out["workers"]["4"]["view_bytes_max"] / out["workers"]["1"]["view_bytes_max"]
    if args.json:
        print(json.dumps(out, indent=1))
        return
    for workers, w in out["workers"].items():
        fwd = ("-" if w["query_forwarded_p50_ms"] is None
               else f"{w['query_forwarded_p50_ms']:.1f}/{w['query_forwarded_p99_ms']:.1f} ms")
        print(f"{workers} worker(s): largest view {w['view_bytes_max'] / 2**20:.1f} MiB (RSS grew up to "
              f"{w['rss_over_accounted']:.1f}x view + table bytes); {w['reports_per_s']:,.0f} "
              f"reports/s; one-value query p50/p99 local {w['query_local_p50_ms']:.1f}/{w['query_local_p99_ms']:.1f} ms, "
              f"forwarded {fwd}")
    print(f"4 workers' largest view: {out['largest_view_4_of_1']:.0%} of one worker's (goal <= 35%); answers equal: "
          f"{equal}; capacity model error on view bytes: {out['model_error']:+.1%} at most (goal within 20%)")


if __name__ == "__main__":
    main()
