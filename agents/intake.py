"""Source-topic intake: hand fetched source messages straight to the worker.

Why: Faust delivers every message through ``Consumer._drain_messages`` ->
``wait_first(callback, suspend_flow)`` (four asyncio tasks per message) -> the
conductor -> a channel queue -> the agent's stream -> an ``Event``. With one
report per message that path cost ~120 us of the worker's ~170 us per message
(py-spy, see benchmarks/bench_worker.py), capping the worker near 6k messages/s.
The worker does not need any of it: it batches messages itself and acks them
only after their counts are written.

So the consumer's ``getmany`` (the fetcher's source of messages) keeps the
bookkeeping Faust does per message (read offset, offset gaps, the unacked set
that a rebalance and a clean stop wait on) and gives source-topic messages to
``app.intake`` synchronously; every other topic (the table's changelog during
recovery) still takes Faust's normal path. Partition assignment, flow control on
rebalance, commits (of acked offsets only) and table recovery are unchanged:
the agent still subscribes the source topic, it just receives nothing. Before
Faust waits for unacked messages (rebalance, clean stop) the pending batch is
flushed, so a clean stop leaves nothing to replay.

What Faust's streams skip is skipped here too: messages fetched while the flow
is held (rebalance, table recovery) or in an older consumer generation. The
seek to the committed offset that precedes every flow resume fetches them
again; the worker also drops a pending copy that such a seek re-delivers
(``OCMSWorker.receive``), so a micro-batch never counts a message twice.

How: the consumer, its thread and the app hooks use private Faust and aiokafka
names, so they live in :mod:`agents.faust_internals` (with a test that fails when
an upgrade changes them); this module names the side path for the worker. The
docs/architecture.md's "Why the intake side path" section has the measurement against Faust's
agent path for frames of 1, 100 and 1,000 reports.
"""

from __future__ import annotations

from .faust_internals import Intake, IntakeApp, IntakeConsumer, IntakeTransport

__all__ = ["Intake", "IntakeApp", "IntakeConsumer", "IntakeTransport"]
