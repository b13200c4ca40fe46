"""``ocms migrate``: copy a worker group's counts into a new table, rewritten in this release's formats (issue 39).

For a change that cannot be read in place (the state of a release whose workers must not share a group with
this one, or a table to be rewritten whole): the old group keeps serving while this command copies its
changelog topic (``OLD-ocms-counts-changelog``) into a new one (``NEW-ocms-counts-changelog``), record by record
in each partition's order, every value decoded, checked and encoded again by this code (``encode_bundle`` of
``PartialCounts.to_bytes``: member codec v4/v5, or v1/v3 with ``--upgrade-from 0.2``), key, partition and
timestamp kept. Workers started with ``--app-id NEW`` then recover that table and read the source topic from
its beginning: every report a member already holds is skipped by its stored offset (agents.state: the replay
rule that makes the counts exact), every later one is counted, so the new group answers what the old one
does once both have caught up; stop the old group then.

**Resumable and exact.** Each copied record carries an ``ocms-migrated-from`` header, the old record's offset
(8 bytes, big-endian); a partition's records are written in order, each batch acknowledged before the next.
A run that is killed and started again reads the last record of each new partition and goes on after its
offset. A value is a member's whole state, not a change to it, so a record copied twice (written, then the
kill came before the next batch) leaves the same table: compaction keeps the latest value of each key, and
every later value of a key in the old changelog is copied after it. A run copies up to each old partition's
end when it started and says so; run it again to copy what the old group wrote since (or let the new group
count those reports from the source topic).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from cms_core.errors import OCMSError, SerializationError
from infra.kafka import EMBEDDED, BrokerProfile, create_topics, make_admin, make_consumer, make_producer, stop_client

from .settings import TABLE_NAME
from .state import PartialCounts, decode_bundle, encode_bundle, write_members_for

log = logging.getLogger(__name__)

#: The header naming the old changelog offset a record was copied from.
MIGRATED_FROM = "ocms-migrated-from"
BATCH_RECORDS = 500


def changelog_topic(app_id: str) -> str:
    return f"{app_id}-{TABLE_NAME}-changelog"


def rewrite(value: bytes | None) -> bytes | None:
    """A changelog value in this code's formats (a tombstone stays one); SerializationError when it is not a
    counts bundle this code reads."""
    if value is None:
        return None
    return encode_bundle({fp: PartialCounts.from_bytes(raw).to_bytes() for fp, raw in decode_bundle(value).items()})


@dataclass
class Progress:
    copied: int = 0
    tombstones: int = 0
    refused: int = 0  # values this code does not read: left out, each logged
    resumed: dict = field(default_factory=dict)  # partition -> the old offset it went on after (resumed runs)
    ends: dict = field(default_factory=dict)  # partition -> the old partition's end when the run started


async def _last_migrated(bootstrap: str, topic: str, partitions: int, profile: BrokerProfile) -> dict[int, int]:
    """partition -> the old offset of the last record copied into ``topic`` (partitions without one left out)."""
    from aiokafka import TopicPartition

    consumer = make_consumer(bootstrap, profile=profile)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        done = {}
        for tp in tps:
            if ends[tp] == 0:
                continue
            consumer.seek(tp, ends[tp] - 1)
            records = (await consumer.getmany(tp, timeout_ms=10_000)).get(tp, [])
            if not records:
                raise OCMSError(f"{topic} partition {tp.partition}: its last record could not be read")
            headers = dict(records[-1].headers or ())
            if MIGRATED_FROM not in headers:
                raise OCMSError(f"{topic} partition {tp.partition} holds records ocms migrate did not write: "
                                "migrate into a new --to-app-id")
            done[tp.partition] = int.from_bytes(headers[MIGRATED_FROM], "big")
        return done
    finally:
        await stop_client(consumer)


async def migrate(bootstrap: str, from_app_id: str, to_app_id: str, partitions: int, *,
                  profile: BrokerProfile = EMBEDDED, rate: float = 0.0, batch: int = BATCH_RECORDS,
                  say=print) -> Progress:
    """Copy ``from_app_id``'s changelog into ``to_app_id``'s (created when missing), resuming a killed run."""
    from aiokafka import TopicPartition

    if from_app_id == to_app_id:
        raise OCMSError("--to-app-id must differ from --from-app-id (a new table beside the one that keeps serving)")
    old, new = changelog_topic(from_app_id), changelog_topic(to_app_id)
    admin = make_admin(bootstrap)
    await admin.start()
    try:
        if old not in await admin.list_topics():
            raise OCMSError(f"no topic {old}: is --from-app-id the serving workers' --app-id?")
    finally:
        await admin.close()
    await create_topics(bootstrap, {new: partitions}, profile, configs={new: {"cleanup.policy": "compact"}})
    progress = Progress(resumed=await _last_migrated(bootstrap, new, partitions, profile))
    consumer = make_consumer(bootstrap, profile=profile, max_partition_fetch_bytes=8 << 20)
    producer = make_producer(bootstrap, profile, linger_ms=5)
    await consumer.start()
    await producer.start()
    started = time.monotonic()
    try:
        tps = [TopicPartition(old, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        known = consumer.partitions_for_topic(old)
        if known is not None and len(known) != partitions:
            raise OCMSError(f"{old} has {len(known)} partitions, not --partitions {partitions}")
        progress.ends = {tp.partition: ends[tp] for tp in tps}
        total = sum(ends.values()) - sum(progress.resumed.get(p, -1) + 1 for p in range(partitions))
        for tp in tps:
            start = progress.resumed.get(tp.partition, -1) + 1
            if start >= ends[tp]:
                continue
            consumer.seek(tp, start)
            position = start
            while position < ends[tp]:
                records = [r for r in (await consumer.getmany(tp, timeout_ms=5_000, max_records=batch)).get(tp, [])
                           if r.offset < ends[tp]]
                if not records:
                    # Past the last record below the end already (the offsets left are control records, which a
                    # fetch skips: a changelog written by a transactional producer), or nothing came yet.
                    if await consumer.position(tp) >= ends[tp]:
                        break
                    continue
                sent = []
                for record in records:
                    try:
                        value = rewrite(record.value)
                    except SerializationError as exc:
                        progress.refused += 1
                        log.warning("%s partition %d offset %d: not a counts value this release reads (%s): left out",
                                    old, tp.partition, record.offset, exc)
                        continue
                    sent.append(await producer.send(
                        new, value=value, key=record.key, partition=tp.partition, timestamp_ms=record.timestamp,
                        headers=[(MIGRATED_FROM, record.offset.to_bytes(8, "big"))]))
                    progress.tombstones += value is None
                await asyncio.gather(*sent)  # this batch acknowledged before the next: the resume point holds
                progress.copied += len(sent)
                position = records[-1].offset + 1
                say(f"migrated {progress.copied:,} of {total:,} records (partition {tp.partition} at offset {position:,} "
                    f"of {ends[tp]:,})")
                if rate > 0:
                    await asyncio.sleep(max(0.0, progress.copied / rate - (time.monotonic() - started)))
    finally:
        await stop_client(producer)
        await stop_client(consumer)
    return progress


def cmd_migrate(args) -> int:
    from infra.kafka import broker_profile

    write_members_for(args.upgrade_from)
    profile = broker_profile(args.broker)
    progress = asyncio.run(migrate(args.bootstrap_servers, args.from_app_id, args.to_app_id, args.partitions,
                                   profile=profile, rate=args.rate, batch=args.batch_records,
                                   say=lambda line: print(line, flush=True)))
    resumed = f", resumed after old offsets {progress.resumed}" if progress.resumed else ""
    print(f"copied {progress.copied:,} records ({progress.tombstones:,} tombstones, {progress.refused:,} refused) from "
          f"{changelog_topic(args.from_app_id)} to {changelog_topic(args.to_app_id)} up to the ends {progress.ends}"
          f"{resumed}; start the new workers with --app-id {args.to_app_id}", flush=True)
    return 0


def add_migrate_parser(sub) -> None:
    from infra.settings import int_at_least

    from .state import UPGRADE_FROM

    parser = sub.add_parser("migrate", help="copy a worker group's counts into a new table in this release's formats "
                            "(resumable; the old group keeps serving)", description=__doc__.split("\n\n")[1])
    parser.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT", help="the Kafka the workers use")
    parser.add_argument("--broker", default="kafka", choices=("kafka", "embedded", "mock"),
                        help="broker profile (as ocms worker's)")
    parser.add_argument("--from-app-id", required=True, metavar="ID", help="the serving group's --app-id")
    parser.add_argument("--to-app-id", required=True, metavar="ID", help="the new group's --app-id (a new table)")
    parser.add_argument("--partitions", type=int_at_least(1), default=4, metavar="N",
                        help="the changelog's partitions (the workers' --partitions; default 4)")
    parser.add_argument("--upgrade-from", choices=UPGRADE_FROM, default=None, metavar="RELEASE",
                        help="write member codecs this earlier release reads (as ocms worker --upgrade-from)")
    parser.add_argument("--rate", type=float, default=0.0, metavar="RECORDS/S",
                        help="copy at most this many records a second (0: as fast as the broker takes them)")
    parser.add_argument("--batch-records", type=int_at_least(1), default=BATCH_RECORDS, metavar="N",
                        help=f"records a batch, each acknowledged before the next (default {BATCH_RECORDS})")
    parser.set_defaults(func=cmd_migrate, parser=parser)
