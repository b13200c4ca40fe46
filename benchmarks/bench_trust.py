"""What tokens and TLS cost (issue 37): the collector's uploads/s and the worker's query latency with each.

    .venv/bin/python -m benchmarks.bench_trust [--duration S] [--connections C] [--queries N]

One embedded broker. The collector (metric flight_dest of deploy/registry.yaml) under wrk, single-report
uploads on C keep-alive connections, as fast as wrk can, four ways: plain, with --tokens-file (every upload
carries a bearer token), over TLS (--tls-cert/--tls-key; wrk's TLS, keep-alive, so the handshake is paid
once per connection), and both. Then one worker, N sequential GET /metrics?format=json (the metric listing:
a small answer without the read barrier that holds every estimate answer for the changelog's next fetch,
about 100 ms on the embedded broker, so the checks' own cost shows) on one keep-alive connection, the same
four ways (--api-tokens-file, TLS). The certificates
are made with the openssl command (tests/support/tls.py). A benchmark, not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import ssl
import tempfile
import time
from pathlib import Path

import numpy as np

from ocms.process import WorkerChild
from benchmarks.bench_collector import LUA, METRIC, REGISTRY, spawn, stop, wrk
from benchmarks.experiments.common import cpu_model
from cms_core import wire
from cms_core.privatize import simulate_reports
from ocms.run_collector import collector_command
from infra.broker import EmbeddedBroker, free_port
from registry import load_registry
from tests.support.tls import make_pki

TOKEN = "bench-trust-token-0123456789"
QUERY = "/metrics?format=json"
WAYS = (("plain", False, False), ("tokens", True, False), ("TLS", False, True), ("TLS + tokens", True, True))


def tokens_file(directory: Path) -> Path:
    path = directory / "tokens.json"
    path.write_text(json.dumps({"applications": [{"name": "bench", "token_sha256": hashlib.sha256(TOKEN.encode())
                                                  .hexdigest()}]}))
    return path


def wait_ok(host: str, port: int, path: str, context: ssl.SSLContext | None, headers: dict, timeout=90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            connection = connect(host, port, context)
            connection.request("GET", path, headers=headers)
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{path} on port {port} did not answer 200 within {timeout:.0f} s")


def connect(host: str, port: int, context: ssl.SSLContext | None) -> http.client.HTTPConnection:
    if context is not None:
        return http.client.HTTPSConnection(host, port, context=context, timeout=10)
    return http.client.HTTPConnection(host, port, timeout=10)


def query_latencies(port: int, context, headers: dict, count: int) -> np.ndarray:
    connection = connect("127.0.0.1", port, context)
    out = np.empty(count)
    for i in range(count):
        started = time.perf_counter()
        connection.request("GET", QUERY, headers=headers)
        response = connection.getresponse()
        response.read()
        assert response.status == 200, response.status
        out[i] = time.perf_counter() - started
    connection.close()
    return out


def collector_run(broker, work: Path, pki: Path, tokens: Path, body: Path, client, with_tokens: bool, with_tls: bool,
                  args) -> dict:
    """One collector, warmed for 2 s, then wrk for --duration: its result."""
    lua = work / "bench.lua"
    lua.write_text(LUA.replace('wrk.headers["Content-Type"]', (f'wrk.headers["Authorization"] = "Bearer {TOKEN}"\n'
                                                               if with_tokens else "") + 'wrk.headers["Content-Type"]'))
    flags = (["--tokens-file", str(tokens)] if with_tokens else []) + (
        ["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key")] if with_tls else [])
    port = free_port()
    process = spawn(collector_command(REGISTRY, broker.bootstrap_servers, port, "--source-topic", "bench-trust",
                                      "--access-log", "false", "--log-level", "warning", *flags),
                    work / f"collector-{port}.log")
    try:
        wait_ok("127.0.0.1", port, "/healthz", client if with_tls else None, {})
        url = f"{'https' if with_tls else 'http'}://127.0.0.1:{port}/v1/reports"
        wrk(url, body, lua, duration=2, connections=args.connections)
        return wrk(url, body, lua, duration=args.duration, connections=args.connections)
    finally:
        stop(process)


def worker_run(broker, work: Path, pki: Path, tokens: Path, client, with_tokens: bool, with_tls: bool,
               args) -> np.ndarray:
    """One worker, warmed with 200 queries, then --queries sequential ones: their latencies (s)."""
    flags = ["--registry", str(REGISTRY)] + (["--api-tokens-file", str(tokens)] if with_tokens else []) + (
        ["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key")] if with_tls else [])
    port = free_port()
    worker = WorkerChild("bench-trust", *flags, bootstrap=broker.bootstrap_servers, web_port=port,
                         app_id=f"bench-trust-{port}", log=work / f"worker-{port}.log")
    worker.start()
    headers = {"Authorization": f"Bearer {TOKEN}"} if with_tokens else {}
    context = client if with_tls else None
    try:
        wait_ok("127.0.0.1", port, QUERY, context, headers)
        query_latencies(port, context, headers, 200)
        return query_latencies(port, context, headers, args.queries)
    finally:
        worker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per wrk run (default 10)")
    parser.add_argument("--connections", type=int, default=128, help="keep-alive connections of wrk (default 128)")
    parser.add_argument("--queries", type=int, default=2000, help="sequential worker queries per way (default 2000)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the four ways, every other one reversed")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ocms-bench-trust-"))
    pki = make_pki(work)
    tokens = tokens_file(work)
    version = load_registry(REGISTRY).metric(METRIC).version(1)
    body = work / "body.bin"
    body.write_bytes(wire.encode_reports(version.params, simulate_reports(
        version.params, np.array([3], np.uint64), np.random.default_rng(1)))[0])
    client = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    uploads: dict[str, list] = {name: [] for name, _, _ in WAYS}
    queries: dict[str, list] = {name: [] for name, _, _ in WAYS}
    with EmbeddedBroker() as broker:
        for round_ in range(args.rounds):  # the order reversed every other round: a load that drifts shows
            order = WAYS if round_ % 2 == 0 else WAYS[::-1]
            for name, with_tokens, with_tls in order:
                uploads[name].append(collector_run(broker, work, pki, tokens, body, client, with_tokens, with_tls, args))
            for name, with_tokens, with_tls in order:
                queries[name].append(worker_run(broker, work, pki, tokens, client, with_tokens, with_tls, args))
    print(f"bench_trust on {cpu_model()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end; "
          f"wrk {args.connections} connections x {args.duration:g} s; {args.queries} sequential queries")
    print(f"| way | collector uploads/s, per round | p50 per round | non-2xx | worker GET {QUERY} p50 / p99 |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, _, _ in WAYS:
        rates = " / ".join(f"{u['rate']:,.0f}" for u in uploads[name])
        p50s = " / ".join(f"{u['p50_us'] / 1000:.1f}" for u in uploads[name])
        q = np.concatenate(queries[name])
        print(f"| {name} | {rates} | {p50s} ms | "
              f"{sum(u['non2xx'] for u in uploads[name])} | "
              f"{np.percentile(q, 50) * 1000:.2f} / {np.percentile(q, 99) * 1000:.2f} ms |")


if __name__ == "__main__":
    main()
