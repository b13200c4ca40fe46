"""A hostile run against a worker and a collector (issue 37): what an attacker who reaches them gets.

    .venv/bin/python -m benchmarks.bench_hostile [--forged N] [--reads N] [--slow N] [--json]

One embedded broker, a worker with --api-tokens-file (one token for metric dest only, one for everything) and
--shuffle-claim-key-file, a shuffling collector holding the same claim key and a plain one. Then:

* **forged claims**: ``--forged`` frames written straight to the reports topic claiming a shuffle of a million
  (no MAC, a MAC under another key, a MAC of another frame, a claim header the collector never writes) beside
  genuine shuffled batches from the collector; a forged claim is *accepted* when the worker counts its reports
  as shuffled (``shuffled_reports`` above the genuine batches' reports) or states a central epsilon over them;
* **reads**: ``--reads`` requests for counts (every read route, the console's data, the Prometheus scrape,
  the metric listing) with no token, an unknown token, a malformed header, and the token of another metric;
  a read is *answered with data* when it gets a 200;
* **slow clients**: ``--slow`` sockets each to the worker and the collector that send nothing, that trickle a
  header a byte every 0.5 s, and (collector) that trickle a body: each is *held past its bound* when the server
  has not closed it 3 s after its header, body or idle timeout;
* **malformed requests**: garbage bodies, wrong content types, bad JSON, oversized headers, bad query
  parameters and paths on both servers; any answer >= 500 other than 503 is a *500*.

Goals: every count 0. ``--json`` prints one object with the counts and what was tried. A benchmark, not a
test: it prints what happened and never fails.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from cms_core import claims, wire
from infra.broker import EmbeddedBroker
from tests.agents.harness import Message, send
from tests.collector.harness import (CollectorProcess, parse_answer, raw_exchange, request, serving_worker,
                                     single_messages, write_registry)

TOPIC = "hostile"
READ_ROUTES = ("/estimates", "/topk?k=3", "/params", "/metrics", "/metrics?format=json", "/metrics/dest/estimates",
               "/metrics/dest", "/metrics/dest/topk?k=2", "/metrics/dest/estimates/7", "/discovered?metric=dest",
               "/metrics/screen/estimates", "/metrics/dest/trend?value=7&from=-10m")
HEADER_TIMEOUT, IDLE_TIMEOUT, BODY_TIMEOUT = 2, 3, 2
SLACK = 3.0


def get(url: str, headers: dict | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=15) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as exc:
        exc.read()
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0


def held_for(port: int, first: bytes, trickle: bytes, every: float, limit: float) -> float:
    """Seconds until the server closes a socket that sends ``first`` then ``trickle`` a byte every ``every`` s."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=limit + 5)
    started = time.monotonic()
    try:
        if first:
            sock.sendall(first)
        sock.settimeout(every if trickle else limit + 5)
        sent = 0
        while time.monotonic() - started < limit + 5:
            try:
                if not sock.recv(65536):
                    return time.monotonic() - started
            except TimeoutError:
                pass
            except OSError:
                return time.monotonic() - started
            if trickle:
                try:
                    sock.sendall(trickle[sent % len(trickle):][:1])
                except OSError:
                    return time.monotonic() - started
                sent += 1
        return time.monotonic() - started
    finally:
        sock.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--forged", type=int, default=40, help="forged claim frames (default 40)")
    parser.add_argument("--reads", type=int, default=4, help="rounds of unauthorized reads of every route (default 4)")
    parser.add_argument("--slow", type=int, default=4, help="slow sockets of each kind per server (default 4)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--control", action="store_true",
                        help="negative control: the 'forged' frames carry a valid MAC under the real claim key (what a "
                             "shuffling collector writes), so every one must count as accepted")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="ocms-bench-hostile-"))
    registry = write_registry(tmp)
    from registry import load_registry

    dest = load_registry(registry).metric("dest").version(1)
    key_file = tmp / "claim.key"
    key_file.write_text(secrets.token_hex(32) + "\n")
    tokens = {"ops": (secrets.token_urlsafe(24), None), "dest-team": (secrets.token_urlsafe(24), ["dest"])}
    tokens_file = tmp / "api-tokens.json"
    tokens_file.write_text(json.dumps({"applications": [
        {"name": name, "token_sha256": hashlib.sha256(token.encode()).hexdigest(),
         **({"metrics": metrics} if metrics else {})} for name, (token, metrics) in tokens.items()]}))
    counts = {"forged_claims_accepted": 0, "reads_answered_with_data": 0, "connections_held_past_bound": 0,
              "server_errors_500": 0}
    tried = {"forged_frames": 0, "genuine_shuffled_reports": 0, "unauthorized_reads": 0, "slow_connections": 0,
             "malformed_requests": 0}
    worst_hold = {}
    with EmbeddedBroker(log_path=tmp / "broker.log") as broker:
        broker.create_topics({TOPIC: 4})
        with serving_worker(registry, broker.bootstrap_servers, TOPIC, tmp, "--api-tokens-file", str(tokens_file),
                            "--shuffle-claim-key-file", str(key_file), "--web-header-timeout-seconds",
                            str(HEADER_TIMEOUT), "--web-idle-timeout-seconds", str(IDLE_TIMEOUT),
                            token=tokens["ops"][0]) as worker, \
                CollectorProcess(registry, broker.bootstrap_servers, TOPIC, tmp, "--shuffle-min-reports", "20",
                                 "--shuffle-max-seconds", "2", "--shuffle-claim-key-file", str(key_file),
                                 "--header-timeout-seconds", str(HEADER_TIMEOUT), "--idle-timeout-seconds",
                                 str(IDLE_TIMEOUT), "--body-timeout-seconds", str(BODY_TIMEOUT)) as collector:
            # ---- genuine shuffled batches, then forged claims beside them
            genuine = single_messages(dest, 40, seed=3)
            threads = [threading.Thread(target=request, args=(collector.url + "/v1/reports", m)) for m in genuine]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            tried["genuine_shuffled_reports"] = len(genuine)
            worker.wait_for_n(len(genuine))
            frame = single_messages(dest, 5, seed=9)
            body = wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_FRAME, dest.fingerprint, 5) + b"".join(
                m[wire.HEADER_SIZE:] for m in frame)
            other = wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_FRAME, dest.fingerprint, 5) + b"".join(
                m[wire.HEADER_SIZE:] for m in single_messages(dest, 5, seed=10))
            true_key = key_file.read_text().strip().encode()
            forgeries = [
                [(wire.SHUFFLE_HEADER, b"1000000")],
                claims.claim_headers(secrets.token_hex(32).encode(), 1_000_000, claims.new_batch_id(), body),
                claims.claim_headers(true_key, 1_000_000, claims.new_batch_id(), other),  # the MAC of another frame
                [(wire.SHUFFLE_HEADER, b"-1"), ("ocms-shuffle-batch", b"x" * 300)],
            ]
            if args.control:
                forgeries = [claims.claim_headers(true_key, 1_000_000, claims.new_batch_id(), body)]
            forged = [Message(body, b"", None, forgeries[i % len(forgeries)]) for i in range(args.forged)]
            send(broker.bootstrap_servers, TOPIC, forged)
            tried["forged_frames"] = len(forged)
            doc = worker.wait_for_n(len(genuine) + 5 * len(forged))
            shuffled = doc.get("shuffled_reports") or 0
            counts["forged_claims_accepted"] = max(0, shuffled - len(genuine)) // 5
            if doc.get("central_epsilon") is not None:  # a central epsilon over reports that were not all shuffled
                counts["forged_claims_accepted"] = max(counts["forged_claims_accepted"], 1)

            # ---- reads without a valid token
            wrong = [{}, {"Authorization": "Bearer " + secrets.token_urlsafe(24)}, {"Authorization": "Basic Zm9vOmJhcg=="},
                     {"Authorization": "Bearer"}, {"Authorization": "Bearer " + tokens["dest-team"][0]}]
            for _ in range(args.reads):
                for route in READ_ROUTES:
                    for headers in wrong:
                        if headers.get("Authorization", "").endswith(tokens["dest-team"][0]) and \
                                ("dest" in route or route in ("/estimates", "/topk?k=3", "/params")):
                            continue  # its own metric (and the name-less routes, which answer dest): allowed
                        status = get(worker.base_url + route, headers)
                        tried["unauthorized_reads"] += 1
                        counts["reads_answered_with_data"] += status == 200
                        counts["server_errors_500"] += status >= 500 and status != 503

            # ---- slow clients
            post_head = (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/vnd.ocms.wire-v1\r\n"
                         b"Content-Length: 100000\r\n\r\n")
            kinds = [("worker idle", worker.web_port, b"", b"", IDLE_TIMEOUT),
                     ("worker header", worker.web_port, b"GET /healthz HTTP/1.1\r\n", b"X-Slow: aaaaaaaa", HEADER_TIMEOUT),
                     ("collector idle", collector.port, b"", b"", IDLE_TIMEOUT),
                     ("collector header", collector.port, b"POST /v1/reports HTTP/1.1\r\n", b"X-Slow: aaaa",
                      HEADER_TIMEOUT),
                     ("collector body", collector.port, post_head, b"\x00", BODY_TIMEOUT)]
            results: list[tuple[str, float, float]] = []

            def hold(kind, port, first, trickle, bound):
                results.append((kind, held_for(port, first, trickle, 0.5, bound + SLACK + 10), bound))

            threads = [threading.Thread(target=hold, args=k) for k in kinds for _ in range(args.slow)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            tried["slow_connections"] = len(results)
            for kind, held, bound in results:
                worst_hold[kind] = round(max(worst_hold.get(kind, 0.0), held), 2)
                counts["connections_held_past_bound"] += held > bound + SLACK

            # ---- malformed requests
            bad = [(b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{\"a\": [1,"),
                   (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nabc"),
                   (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/vnd.ocms.wire-v1\r\n"
                    b"Content-Length: 40\r\n\r\n" + os.urandom(40)),
                   (b"POST /v1/metrics/%00/reports HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"),
                   (b"GET /v1/reports HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n"),
                   (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n"
                    + "\"\\ud800\"  ".encode()),
                   (b"GARBAGE\r\n\r\n")]
            for raw in bad:
                status, _, _ = raw_exchange(collector.port, raw)
                tried["malformed_requests"] += 1
                counts["server_errors_500"] += status is not None and status >= 500 and status != 503
            bad_queries = ["/metrics/dest/estimates?window=sideways", "/metrics/dest/estimates?from=yesterday",
                           "/metrics/dest/topk?k=-1", "/metrics/dest/trend?value=7&step=0",
                           "/metrics/nope/estimates", "/metrics/dest/estimates/%ff%fe", "/estimates?postprocess=x",
                           "/metrics/dest/estimates?confidence=2", "/metrics/dest/histogram?q=7"]
            for route in bad_queries:
                status = get(worker.base_url + route, {"Authorization": "Bearer " + tokens["ops"][0]})
                tried["malformed_requests"] += 1
                counts["server_errors_500"] += status >= 500 and status != 503
            for raw in bad[-3:]:
                status, _, _ = raw_exchange(worker.web_port, raw)
                tried["malformed_requests"] += 1
                counts["server_errors_500"] += status is not None and status >= 500 and status != 503
    shutil.rmtree(tmp, ignore_errors=True)
    doc = {**counts, "control": args.control, "tried": tried, "longest_hold_s": worst_hold,
           "bounds_s": {"header": HEADER_TIMEOUT, "idle": IDLE_TIMEOUT, "body": BODY_TIMEOUT, "slack": SLACK}}
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"bench_hostile: forged claims accepted {counts['forged_claims_accepted']} of {tried['forged_frames']}; "
              f"reads answered with data {counts['reads_answered_with_data']} of {tried['unauthorized_reads']}; "
              f"connections held past their bound {counts['connections_held_past_bound']} of "
              f"{tried['slow_connections']} (longest: {worst_hold}); 500s {counts['server_errors_500']} "
              f"(of {tried['malformed_requests']} malformed requests and every request above); goal: all 0")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
