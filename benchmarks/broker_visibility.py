"""Does the broker hand a reader a record batch before an earlier one of the same partition is readable?

Several producers write bursts of records to one partition at once while a consumer tails it; then a
second consumer reads the partition again from the start. Every record the second read has and the tail
skipped (at offsets below ones the tail had already read) was made readable late: a reader that takes the
skipped offsets loses those records for good. This is the evidence for ``BrokerProfile.late_batches``
(docs/operating.md); ``--hole-check`` tails with ``infra.kafka.wait_for_late_batches`` on (what the worker
and the collector do on such a broker), which should skip none.

    python -m benchmarks.broker_visibility [--broker embedded|mock] [--runs 4] [--producers 6] [--records 4000]
                                           [--hole-check]

Prints one line per run (records, late batches, records read late) and, with ``--json``, one object.
Not a test: how often it happens depends on timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random

from aiokafka import TopicPartition

from infra.kafka import PROFILES, make_consumer, make_producer

TOPIC = "visibility"


async def _produce(bootstrap: str, profile, name: str, records: int, seed: int) -> None:
    rng = random.Random(seed)
    producer = make_producer(bootstrap, profile, linger_ms=0, max_batch_size=1_048_576, client_id=name)
    await producer.start()
    try:
        futures = []
        for i in range(records):
            value = f"{name}-{i}".encode().ljust(rng.randint(16, 4000), b"\0")
            futures.append(await producer.send(TOPIC, value=value, partition=0))
            if rng.random() < 0.2:  # bursts: several sends pending at once make batches of several records
                await asyncio.sleep(rng.random() * 0.01)
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def _read(bootstrap: str, profile, tailing: asyncio.Event | None) -> list[tuple[int, bytes]]:
    consumer = make_consumer(bootstrap, profile=profile, auto_offset_reset="earliest")
    await consumer.start()
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    await consumer.seek_to_beginning(tp)
    out: list[tuple[int, bytes]] = []
    idle = 0
    try:
        while idle < 4:
            got = await consumer.getmany(timeout_ms=250)
            for records in got.values():
                out.extend((r.offset, r.value.split(b"\0")[0]) for r in records)
            if tailing is None or tailing.is_set():
                idle = 0 if got else idle + 1
    finally:
        await consumer.stop()
    return out


async def one_run(bootstrap: str, profile, producers: int, records: int, seed: int) -> dict:
    done = asyncio.Event()
    tail = asyncio.create_task(_read(bootstrap, profile, done))
    await asyncio.gather(*(_produce(bootstrap, profile, f"p{k}", records, seed * 100 + k) for k in range(producers)))
    done.set()
    tailed = await tail
    full = await _read(bootstrap, profile, None)
    seen = {offset for offset, _ in tailed}
    skipped = [offset for offset, _ in full if offset not in seen]
    runs = sum(1 for i, offset in enumerate(skipped) if i == 0 or skipped[i - 1] != offset - 1)
    return {"written": producers * records, "tail_read": len(tailed), "second_read": len(full),
            "late_batches": runs, "records_read_late": len(skipped), "first_skipped": skipped[:8]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", default="embedded", choices=["embedded", "mock"])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--producers", type=int, default=6)
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--hole-check", action="store_true",
                        help="tail with infra.kafka.wait_for_late_batches (the worker's and collector's reading)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    holes: list = []
    if args.hole_check:
        from infra.kafka import wait_for_late_batches

        wait_for_late_batches(TOPIC, on_late=lambda *hole: holes.append(hole))
    results = []
    for run in range(args.runs):
        if args.broker == "embedded":
            from infra.broker import EmbeddedBroker as Broker
        else:
            from infra.mock_cluster import MockCluster as Broker
        with Broker() as broker:
            profile = PROFILES[args.broker]
            broker.create_topics({TOPIC: 1})
            result = asyncio.run(one_run(broker.bootstrap_servers, profile, args.producers, args.records, run))
        results.append(result)
        if not args.json:
            print(f"run {run + 1}: {result['written']:,} written, the tail read {result['tail_read']:,}, a second "
                  f"read {result['second_read']:,}; {result['late_batches']} batch(es) readable late, "
                  f"{result['records_read_late']} record(s) the tail skipped {result['first_skipped']}")
    late = sum(r["late_batches"] > 0 for r in results)
    waited = sum(1 for hole in holes if not hole[3])
    if args.json:
        print(json.dumps({"broker": args.broker, "runs": results, "runs_with_late_batches": late,
                          "hole_check": args.hole_check, "holes_waited_for": waited}))
    else:
        print(f"{args.broker}: records skipped by the tail in {late} of {len(results)} runs"
              + (f"; the hole check waited for {waited} late batch(es)" if args.hole_check else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
