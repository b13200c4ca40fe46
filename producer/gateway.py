"""A gateway in front of many devices: their wire messages, of any live metric version, batched into frames.

:class:`RegistryGateway` takes the wire messages of devices reporting any live metric version of a
registry and keeps one :class:`infra.framing.FrameBatcher` per version, and per level of a tree version
(:class:`infra.framing.FrameBatchers`: a frame carries one fingerprint, so versions never mix)::

    async with KafkaFrameSink(servers, "ocms-reports") as sink:
        async with RegistryGateway(load_registry("deploy/registry.yaml"), send=sink) as gateway:
            version = await gateway.add(message_from_device)   # -> the MetricVersion it counts for

The gateway sees no values, only privatized reports; it must not attach device
identifiers to frames (the frame key is None or a gateway id). See docs/device.md.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from cms_core.errors import InvalidReportError
from cms_core.wire import UnknownFingerprintError
from infra.framing import FrameBatchers


class RegistryGateway:
    """Batch device messages of every live metric version of a registry into frames.

    ``add(message)`` reads the message's fingerprint, refuses one that no live version
    of the registry carries (``UnknownFingerprintError`` naming the fingerprint, before
    anything is buffered) and buffers the reports in that version's :class:`FrameBatcher`
    (same limits for all, ``**batcher_kwargs``); ``records_by_metric`` counts what was
    accepted per "metric@version". All frames go to the one ``send`` (the reports topic).
    """

    def __init__(self, registry, *, send: Callable[[bytes], Awaitable[Any]], metrics: list[str] | None = None,
                 **batcher_kwargs):
        selected = set(registry.reported_versions(metrics))  # UnknownMetricError for an unknown name
        self.registry = registry
        # a tree version's levels (issue 40) are its parameter versions: a frame per level
        self.versions = {level.fingerprint: level for v in registry.live_versions() if v.metric in selected
                         for level in (v.tree_levels() or (v,)) + v.mean_parts()}  # and a Hybrid mean's part
        self.frames = FrameBatchers([v.params for v in self.versions.values()], send=send, **batcher_kwargs)
        self.records_by_metric: dict[str, int] = {v.binding: 0 for v in self.versions.values()}

    async def add(self, message: bytes):
        """Buffer one device message (a report or a frame); returns its MetricVersion."""
        if not isinstance(message, (bytes, bytearray, memoryview)):
            raise InvalidReportError(f"a registry gateway takes wire messages (bytes), not a {type(message).__name__}")
        fingerprint, batcher = self.frames.batcher_for(message)  # WireFormatError for a damaged header
        version = self.versions.get(fingerprint)
        if batcher is None:
            known = self.registry.by_fingerprint(fingerprint)
            why = (f"is {known.binding}, which is retired or not served here" if known is not None
                   else f"belongs to no metric of the registry {self.registry.path}")
            raise UnknownFingerprintError(f"parameter fingerprint {fingerprint.hex()} {why}")
        before = batcher.records_sent + batcher.buffered
        try:
            await batcher.add(message)
        finally:
            self.records_by_metric[version.binding] += batcher.records_sent + batcher.buffered - before
        return version

    async def flush(self) -> int:
        """Send every version's buffered reports; returns the frames sent."""
        return await self.frames.flush()

    async def close(self) -> None:
        await self.frames.close()

    async def __aenter__(self) -> "RegistryGateway":
        await self.frames.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    @property
    def frames_sent(self) -> int:
        return self.frames.frames_sent


__all__ = ["RegistryGateway"]
