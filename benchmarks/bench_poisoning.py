"""The maximal-gain poisoning attack end to end: fake devices with their own token, through the collector.

    .venv/bin/python -m benchmarks.bench_poisoning [--reports N] [--seed S]

One embedded broker, one ``ocms worker --registry`` and one ``ocms collector`` with a tokens file of
two applications: ``genuine`` (the honest fleet) and ``fakes`` (the attacker's devices, which passed
the door with a token of their own). For each case (mechanism, d, epsilon), a registry metric pinned
to that mechanism receives ``--reports`` honest reports of values 0 .. d - 2 and, interleaved, fake
reports crafted by the maximal-gain attack (Cao, Jia, Gong, USENIX Security 2021;
:func:`cms_core.poisoning.maximal_gain_reports`) for the value d - 1, which nobody holds. Every
report is a valid wire-v1 report; the collector accepts all of them (202).

The fake count is chosen so that the formula (:func:`cms_core.theory.poisoning_gain`: a fraction
beta of fakes reads beta * gain) predicts a lift to max(5%, 10 standard deviations of the estimate
at f = 0). The worker's estimate of d - 1 is the measured rise; the benchmark prints it with the
worker's interval, the formula, their ratio, and whether the formula lies inside the interval. The
intervals are simultaneous at 95% over the six cases (Bonferroni: each at 1 - 0.05/6), so that one
of six landing outside by chance does not read as a failed formula.
It also prints ``ocms plan``'s figure for the case: the fake fraction that lifts a value nobody
holds to 1%. Seeded: the same ``--seed`` uploads the same reports (the counts do not depend on the
upload order), so the figures repeat. Exit status 1 when a formula lies outside its interval.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import secrets
import shutil
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cms_core import planning, theory, wire
from cms_core.poisoning import maximal_gain_reports
from cms_core.privatize import simulate_reports
from infra.broker import EmbeddedBroker
from infra.process import free_port
from ocms.process import WorkerChild
from ocms.run_collector import CollectorChild
from producer.reporter import HttpTransport
from registry import load_registry

#: (mechanism, d, epsilon): the issue's d = 1,024 at eps 2, a mid-sized and a small dictionary.
CASES = (("ocms", 1024, 2.0), ("direct", 1024, 2.0), ("ocms", 64, 1.0), ("direct", 64, 1.0),
         ("ocms", 16, 4.0), ("direct", 16, 4.0))
FRAME = 1000  # reports per upload (the collector's default --max-upload-reports)
TOPIC = "bench-poisoning"
LIFT_FLOOR = 0.05
LIFT_IN_SD = 10.0
#: Each case's interval at 1 - 0.05 / cases: simultaneous 95% over the cases.
CONFIDENCE = 1 - 0.05 / len(CASES)


@dataclass
class Case:
    mechanism: str
    d: int
    epsilon: float

    @property
    def metric(self) -> str:
        return f"{self.mechanism}_d{self.d}_eps{self.epsilon:g}"

    @property
    def target(self) -> int:
        return self.d - 1


def registry_text(cases) -> str:
    out = ["metrics:"]
    for c in cases:
        out += [f"  - name: {c.metric}", f"    description: poisoning benchmark, {c.mechanism} d={c.d} eps={c.epsilon:g}",
                "    owner: bench", f"    integers: {c.d}", f"    epsilon: {c.epsilon:g}", f"    mechanism: {c.mechanism}",
                "    bucket: 1h", "    retention: 24h"]
    return "\n".join(out) + "\n"


def tokens_file(path: Path) -> dict[str, str]:
    tokens = {"genuine": secrets.token_urlsafe(24), "fakes": secrets.token_urlsafe(24)}
    apps = [{"name": name, "token_sha256": hashlib.sha256(token.encode()).hexdigest()} for name, token in tokens.items()]
    path.write_text(json.dumps({"applications": apps}))
    return tokens


def fake_count(params, genuine: int) -> int:
    """Fakes for a predicted lift of max(LIFT_FLOOR, LIFT_IN_SD sd at f = 0) (beta = lift / gain, of all reports)."""
    gain = params.poisoning_gain
    lift = LIFT_FLOOR
    for _ in range(3):  # n includes the fakes: a few fixed-point steps settle it
        n = genuine / (1 - lift / gain)
        lift = max(LIFT_FLOOR, LIFT_IN_SD * math.sqrt(float(params.variance(0.0, n))))
    beta = lift / gain
    return math.ceil(beta * genuine / (1 - beta))


def frames(params, batch) -> list[bytes]:
    return [wire.encode_frame(params, batch.slice(i, min(i + FRAME, len(batch)))) for i in range(0, len(batch), FRAME)]


async def upload(url: str, metric: str, token: str, messages: list[bytes]) -> int:
    transport = HttpTransport(url, metric=metric, token=token, max_reports=FRAME)
    await transport.start()
    try:
        return await transport.upload_each(messages, concurrency=4)
    finally:
        await transport.stop()


def get(base: str, path: str, **query) -> dict:
    url = base + path + ("?" + urllib.parse.urlencode(query) if query else "")
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def wait_counted(base: str, metric: str, value: int, n: int, timeout: float) -> dict:
    """The worker's answer for ``value`` once it has counted all ``n`` reports of ``metric``."""
    deadline = time.monotonic() + timeout
    doc = None
    while time.monotonic() < deadline:
        doc = get(base, f"/metrics/{metric}/estimates/{value}", version="1", confidence=f"{CONFIDENCE:.6f}")
        if doc.get("n") == n:
            return doc
        time.sleep(0.5)
    raise SystemExit(f"{metric}: the worker counted {doc and doc.get('n')} of {n} reports within {timeout:.0f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_poisoning", description=__doc__.split("\n")[0])
    parser.add_argument("--reports", type=int, default=200_000, help="honest reports per case (default 200000)")
    parser.add_argument("--seed", type=int, default=28, help="seed of the simulated reports (default 28)")
    args = parser.parse_args(argv)
    if args.reports < 1000:
        parser.error(f"--reports {args.reports}: at least 1000")
    cases = [Case(*c) for c in CASES]
    work = Path(tempfile.mkdtemp(prefix="ocms-bench-poisoning-"))
    (work / "registry.yaml").write_text(registry_text(cases))
    tokens = tokens_file(work / "tokens.json")
    registry = load_registry(work / "registry.yaml")
    print(f"load: {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f} on {os.cpu_count()} CPUs; "
          f"{args.reports:,} honest reports per case, seed {args.seed}; logs in {work} (removed after a clean run)",
          flush=True)

    broker = worker = collector = None
    outside = 0
    try:
        broker = EmbeddedBroker(log_path=work / "broker.log").start()
        bootstrap = broker.bootstrap_servers
        broker.create_topics({TOPIC: 2})
        worker = WorkerChild(TOPIC, "--registry", str(work / "registry.yaml"), "--partitions", "2", bootstrap=bootstrap,
                             web_port=free_port(), app_id="bench-poisoning", broker="embedded",
                             log=work / "worker.log").start()
        base = worker.base_url
        collector = CollectorChild(str(work / "registry.yaml"), bootstrap, TOPIC, free_port(), log=work / "collector.log",
                                   extra=("--tokens-file", str(work / "tokens.json"), "--broker", "embedded")).start()
        worker.wait_healthy(timeout=180)
        collector.wait_ready(timeout=120)

        rng = np.random.default_rng(args.seed)
        plan, uploads = {}, []
        for case in cases:
            params = registry.metric(case.metric).latest.params
            genuine = simulate_reports(params, rng.integers(0, case.d - 1, args.reports).astype(np.uint64), rng)
            fakes = maximal_gain_reports(params, case.target, fake_count(params, args.reports), rng)
            plan[case.metric] = (params, len(fakes))
            uploads.append(upload(collector.url, case.metric, tokens["genuine"], frames(params, genuine)))
            uploads.append(upload(collector.url, case.metric, tokens["fakes"], frames(params, fakes)))

        async def everything():
            return await asyncio.gather(*uploads)  # honest and fake uploads interleaved, as a live attack would

        started = time.monotonic()
        accepted = sum(asyncio.run(everything()))
        print(f"uploaded {accepted:,} uploads through the collector (two tokens) in {time.monotonic() - started:.1f} s",
              flush=True)

        header = (f"{'mechanism':<9} {'d':>5} {'eps':>4} {'fakes':>7} {'beta':>8} {'gain':>8} {'formula':>8} "
                  f"{'measured':>9} {f'{CONFIDENCE:.2%} CI':>19} {'ratio':>6} {'in CI':>5}  {'plan: fakes for 1%':>18}")
        print(header)
        for case in cases:
            params, fakes_n = plan[case.metric]
            n = args.reports + fakes_n
            doc = wait_counted(base, case.metric, case.target, n, timeout=600)
            record = doc["estimate"]
            beta, gain = fakes_n / n, params.poisoning_gain
            formula = beta * gain
            measured, low, high = record["frequency"], record["ci_low"], record["ci_high"]
            inside = low <= formula <= high
            outside += not inside
            for_1pct = planning.poisoning_exposure(params)["fake_fraction_for_1pct"]
            assert for_1pct == theory.fake_fraction_to_reach(gain, 0.01)
            print(f"{case.mechanism:<9} {case.d:>5} {case.epsilon:>4g} {fakes_n:>7,} {beta:>8.4%} {gain:>8.4g} "
                  f"{formula:>8.4%} {measured:>9.4%} [{low:>7.3%}, {high:>7.3%}] {measured / formula:>6.3f} "
                  f"{'yes' if inside else 'NO':>5}  {for_1pct:>18.4%}", flush=True)
    finally:
        for child in (collector, worker):
            if child is not None:
                child.stop()
        if broker is not None:
            broker.stop()
    print("formula: beta * gain, gain = A + B of the estimator ((e + m' - 1)/(e - 1) for OCMS+RR, (e + d - 2)/(e - 1) "
          "for direct RR); measured: the worker's estimate of a value nobody holds; ratio = measured / formula")
    if outside:
        print(f"{outside} formula(s) outside the worker's {CONFIDENCE:.2%} interval; logs kept in {work}", file=sys.stderr)
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
