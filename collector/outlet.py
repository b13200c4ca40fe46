"""The collector's one Kafka producer: connect, availability, and ``send(unit)`` -> acknowledgements.

A lane hands each :class:`collector.lanes.Unit` to :meth:`KafkaOutlet.send` without waiting; the unit's
uploads are answered when all its frames are acknowledged (202), or 503 when one is not. Two senders:

* with exactly-once retries (``--idempotency-topic``, the default) the producer is transactional and
  :class:`collector.exactly_once.commit.Committer` sends every unit through its numbered steps;
* without (``--idempotency-topic off``, or a broker that refuses transactions) :meth:`KafkaOutlet._send_plain`
  sends a unit's frames to partitions the producer picks and waits for their acknowledgements.
"""

from __future__ import annotations

import asyncio
import logging
import time

from infra.kafka import KafkaUnavailableError, aiokafka_producer, is_retriable, producer_config

from .exactly_once.commit import Committer
from .lanes import Unit

log = logging.getLogger(__name__)

#: An upload waits at most this many Kafka timeouts for its frame's acknowledgement: one request and
#: one re-send. The idempotent producer re-sends a batch until the broker takes it, however long a
#: broker stays down, so without this bound an upload caught by an outage waited for its end.
ACK_TIMEOUTS = 2


class KafkaOutlet:
    """The collector's one aiokafka producer (``acks=all``) and what the collector knows of Kafka.

    ``available`` turns False when a frame fails with a transient error and True when a
    probe (a metadata request every ``retry_after`` seconds) or a frame succeeds.
    ``queued`` counts reports held in memory: buffered in lanes or in flight.

    With ``log`` (a :class:`collector.exactly_once.shared.SharedIdempotency`) the producer is transactional
    and units go through ``committer``; a broker that refuses transactions turns it off.
    """

    def __init__(self, settings, metrics, producer_factory=None, log=None):
        self.settings = settings
        self.metrics = metrics
        self.producer = None
        self.available = False
        self.queued = 0
        self.in_flight: set[asyncio.Task] = set()  # plain sends
        self._factory = producer_factory
        self._probe: asyncio.Task | None = None
        self._closing = False
        self._background: set[asyncio.Task] = set()
        self.last_error: str | None = "not connected yet"
        self.profile = settings.broker
        self.idempotent = {"on": True, "off": False}.get(settings.kafka_idempotence, self.profile.idempotent_producer)
        self.log = log
        self.committer = Committer(self, log) if log is not None else None

    @property
    def transactional(self) -> bool:
        return self.log is not None and self.log.enabled

    def config(self) -> dict:
        s = self.settings
        config = producer_config(s.bootstrap_servers, self.profile, idempotent=self.idempotent,
                                 client_id="ocms-collector", linger_ms=0, request_timeout_ms=s.kafka_timeout_ms,
                                 retry_backoff_ms=100, max_batch_size=1_048_576)
        if self.transactional:
            config["transactional_id"] = self.log.owner
            config["enable_idempotence"] = True
        return config

    # ------------------------------------------------------------- connect
    async def start(self) -> None:
        """Start connecting in the background; uploads get 503 until Kafka answers."""
        if self.log is not None:  # the transactional producer's InitProducerId, for the embedded broker too
            from . import kafka_internals

            kafka_internals.install()
        self._probe = asyncio.create_task(self._connect_loop(), name="ocms-collector-kafka")

    async def _connect_loop(self) -> None:
        factory = self._factory or aiokafka_producer
        while self.transactional and not self._closing:
            try:
                await self.log.start()
                break
            except Exception as exc:  # Kafka away for a moment: the loop must live on, or 503 for ever
                self.set_unavailable(f"cannot start the idempotency log on {self.settings.bootstrap_servers}: "
                                     f"{type(exc).__name__}: {exc}")
                log.warning("%s; retrying in %d s", self.last_error, self.settings.retry_after_seconds)
                await asyncio.sleep(self.settings.retry_after_seconds)
        while not self._closing:
            if self.producer is None:
                producer = factory(**self.config())
                try:
                    await producer.start()
                    partitions = await producer.partitions_for(self.settings.source_topic)
                    if self.transactional:
                        await self.committer.prepare(partitions)
                except Exception as exc:
                    self.set_unavailable(f"cannot reach Kafka at {self.settings.bootstrap_servers}: "
                                         f"{type(exc).__name__}: {exc}")
                    try:
                        await producer.stop()
                    except Exception:
                        pass
                    if self.transactional and not is_retriable(exc):
                        self.log.disable(f"Kafka at {self.settings.bootstrap_servers} refused the transactional "
                                         f"producer ({type(exc).__name__}: {exc})")
                        continue
                    if self.idempotent and self.settings.kafka_idempotence == "auto" and not is_retriable(exc):
                        # The broker answered but refused InitProducerId (no idempotence support).
                        log.warning("Kafka at %s does not support the idempotent producer (%s); producing without "
                                    "it: a frame re-sent after a lost answer may be stored twice",
                                    self.settings.bootstrap_servers, type(exc).__name__)
                        self.idempotent = False
                        continue
                else:
                    self.producer = producer
                    if self.transactional:
                        # a new epoch: every earlier producer of this transactional id is fenced from here on
                        self.committer.connected()
                    self.set_available()
            elif not self.available:
                try:
                    ok = await asyncio.wait_for(self.producer.client.force_metadata_update(),
                                                self.settings.kafka_timeout_ms / 1000)
                except Exception as exc:
                    ok = False
                    self.last_error = f"metadata probe failed: {type(exc).__name__}: {exc}"
                if ok:
                    self.set_available()
            await asyncio.sleep(self.settings.retry_after_seconds if not self.available else 1.0)

    def renew(self, producer, why: str) -> None:
        """Drop a producer that failed: the connect loop starts a new one (whose start fences this one)."""
        if self.producer is producer:
            self.producer = None
            self.set_unavailable(why)
            self.spawn(self._stop_quietly(producer))

    async def _stop_quietly(self, producer) -> None:
        try:
            await asyncio.wait_for(producer.stop(), self.settings.kafka_timeout_ms / 1000)
        except Exception:
            pass

    def spawn(self, coroutine) -> None:
        """Run in the background until done or the outlet closes."""
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --------------------------------------------------------- availability
    def set_available(self) -> None:
        if not self.available:
            log.info("Kafka at %s is available", self.settings.bootstrap_servers)
        self.available = True
        self.last_error = None
        self.metrics.kafka_available.set(1)

    def set_unavailable(self, why: str) -> None:
        if self.available:
            log.warning("Kafka unavailable: %s", why)
        self.available = False
        self.last_error = why
        self.metrics.kafka_available.set(0)

    # ----------------------------------------------------------------- send
    def send(self, unit: Unit) -> None:
        """Produce a unit; its uploads are answered when every frame of it is acknowledged."""
        if self.transactional and self.committer.running:
            self.committer.put(unit)
            return
        task = asyncio.create_task(self._send_plain(unit))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)

    async def _send_plain(self, unit: Unit) -> None:
        """A unit without exactly-once retries: its frames to partitions the producer picks (key=None: keyed
        by nobody, never by a device), answered when all are acknowledged."""
        what = f"shuffled batch of {unit.reports} reports" if unit.shuffled else f"frame of {unit.reports} reports"
        error: BaseException | None = KafkaUnavailableError(f"the collector stopped before Kafka acknowledged the "
                                                            f"{'batch' if unit.shuffled else 'frame'}")
        try:
            frames = await unit.cut()
            if self.producer is None:
                raise KafkaUnavailableError("not connected to Kafka")
            acks = [await self.producer.send(self.settings.source_topic, frame, key=None,
                                             timestamp_ms=unit.timestamp_ms, headers=unit.headers(frame) or None)
                    for frame in frames]
            bound_ms = ACK_TIMEOUTS * self.settings.kafka_timeout_ms
            try:
                await asyncio.wait_for(asyncio.shield(asyncio.gather(*acks)), bound_ms / 1000)
            except asyncio.TimeoutError:  # the producer may still deliver them: a 503 never promises absence
                raise KafkaUnavailableError(
                    f"no acknowledgement within {bound_ms} ms ({ACK_TIMEOUTS} x --kafka-timeout-ms)") from None
            unit.frames = len(frames)
            error = None
        except Exception as exc:
            if is_retriable(exc) or isinstance(exc, KafkaUnavailableError):
                self.set_unavailable(f"{type(exc).__name__}: {exc}")
            log.warning("%s for %s@%s not acknowledged: %s: %s", what, unit.version.metric, unit.version.version,
                        type(exc).__name__, exc)
            error = exc
        finally:
            self.finish(unit, error)

    def finish(self, unit: Unit, error: BaseException | None) -> None:
        """Answer a unit's uploads (None: every frame acknowledged) and release their queue places, once."""
        if unit.answered:
            return
        self.queued -= unit.queued  # ocms_collector_queue_reports reads it when scraped
        if unit.version is not None:  # not a repair (whose one member is the settle waiting for it)
            metric = unit.version.metric
            if error is None:
                if unit.frames:
                    self.set_available()
                    self.metrics.frames_produced.labels(metric).inc(unit.frames)
                    self.metrics.reports_produced.labels(metric).inc(unit.reports)
                    if unit.shuffled:
                        self.metrics.shuffled_batches.labels(metric).inc()
                        self.metrics.shuffled_batch_reports.observe(unit.reports)
            else:
                self.metrics.frames_failed.labels(metric).inc()
        unit.answer(error)

    # ---------------------------------------------------------------- close
    async def close(self, lanes) -> None:
        """Send what the lanes hold, wait for every unit in flight, stop the producer."""
        for lane in lanes:
            try:
                await lane.close()
            except Exception as exc:  # pragma: no cover - a lane's dispatch does not raise
                log.warning("closing a lane: %s", exc)
        timeout = self.settings.kafka_timeout_ms / 1000
        deadline = time.monotonic() + timeout + 1
        while self.in_flight and time.monotonic() < deadline:
            await asyncio.wait(set(self.in_flight), timeout=max(0.0, deadline - time.monotonic()))
        committer = self.committer
        while committer is not None and committer.running and committer.busy and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        self._closing = True
        if self._probe is not None:
            self._probe.cancel()
            await asyncio.gather(self._probe, return_exceptions=True)
        left = await committer.stop(timeout) if committer is not None else []
        stopped = KafkaUnavailableError("the collector stopped before Kafka acknowledged the frame")
        for unit in left:
            self.finish(unit, stopped)
        for task in [*self.in_flight, *self._background]:
            task.cancel()
        await asyncio.gather(*self.in_flight, *self._background, return_exceptions=True)
        if self.log is not None:
            await self.log.close()
        producer, self.producer = self.producer, None
        if producer is not None:
            await producer.stop()
