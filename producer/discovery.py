"""Device side of discovery (docs/discovery.md): one report of a value's prefix at a random level.

    device = DiscoveryDevice.for_version(registry.metric("words").latest, ledger=ledger)
    report = device.report("café")          # level drawn by the CSPRNG; one epsilon charged
    send(report.message)                     # any transport: Kafka, the collector, a capture file

Order of operations, as for :class:`producer.reporter.DeviceReporter`: the value is
validated (``InvalidValueError``, nothing charged), the level is drawn with
the CSPRNG independently of the value (the randomness contract of
:mod:`cms_core.privatize`: draw_below(levels) + 1, then the report's draws), the prefix is privatized with that level's
parameters by :func:`cms_core.privatize.privatize` (CSPRNG) and encoded, then the
ledger charges the metric's epsilon to the metric's account (``PrivacyBudgetError``
over budget: nothing to send). One report = one epsilon, whatever the level.

With ``memoize=True`` the ledger remembers this period's report per value: a repeat
of the value re-sends the same bytes (same level) for free, so repeats reveal nothing.

The simulation path (seeded numpy; never on a device) behind ``ocms simulate`` for a
discoverable metric is :mod:`fleet.discovery`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

from cms_core import discovery, wire
from cms_core.errors import InvalidParameterError
from cms_core.params import OCMSParams
from cms_core.privatize import RandomBytes, draw_below, privatize
from cms_core.values import encode_value

from .ledger import PrivacyLedger
from .reporter import value_key


@dataclass(frozen=True)
class DiscoveryReport:
    level: int
    fingerprint: bytes
    message: bytes  # a wire-v1 single-report message of the level's parameters
    memoized: bool
    epsilon_charged: float


class DiscoveryDevice:
    """Makes discovery reports of one metric version (transport-agnostic)."""

    def __init__(self, metric: str, domain: discovery.DiscoveryDomain, params_by_level: Sequence[OCMSParams], *,
                 ledger: PrivacyLedger | None = None, memoize: bool = False, random: RandomBytes = os.urandom):
        if not isinstance(metric, str) or not metric:
            raise InvalidParameterError("metric", metric, "must be a non-empty string")
        params_by_level = tuple(params_by_level)
        if len(params_by_level) != domain.levels:
            raise InvalidParameterError("params_by_level", len(params_by_level), f"expected {domain.levels} levels")
        if len({p.epsilon for p in params_by_level}) != 1:
            raise InvalidParameterError("params_by_level", "...", "every level reports at the metric's one epsilon")
        if ledger is not None and not isinstance(ledger, PrivacyLedger):
            raise InvalidParameterError("ledger", type(ledger).__name__, "must be a PrivacyLedger or None")
        self.metric = metric
        self.domain = domain
        self.params_by_level = params_by_level
        self.epsilon = params_by_level[0].epsilon
        self.ledger = ledger
        self.memoize = bool(memoize) and ledger is not None
        self._random = random  # os.urandom on a device; a recorded byte stream only to reproduce test vectors

    @classmethod
    def for_version(cls, version, **kwargs) -> "DiscoveryDevice":
        """For a registry :class:`MetricVersion` that declares ``discovery:``."""
        from registry.discovery import discovery_of

        spec = discovery_of(version)
        return cls(version.metric, spec.domain, spec.params_by_level, **kwargs)

    def choose_level(self) -> int:
        """Uniform on 1..g from the OS CSPRNG, independent of the value."""
        return draw_below(self._random, self.domain.levels) + 1

    def report(self, value, *, level: int | None = None) -> DiscoveryReport:
        """One epsilon-LDP report of ``value``'s prefix; charged to the metric's ledger account.

        ``level`` is for tests only (a device must let :meth:`choose_level` pick it).
        """
        discovery.prefix_of(self.domain, value, 1)  # validates the value before anything is drawn or charged
        level = self.choose_level() if level is None else self.domain.check_level(level)
        params = self.params_by_level[level - 1]
        prefix = discovery.prefix_value(self.domain, value, level)
        message = wire.encode_report(params, privatize(params, prefix, self._random))
        memoized, charged = False, self.epsilon
        if self.ledger is not None:
            key = None
            if self.memoize:
                # Keyed by the value as the last level describes it (the longest prefix), not the level:
                # a repeat re-sends the first report, level included.
                last = self.params_by_level[-1]
                key = value_key(last, encode_value(last, discovery.prefix_value(self.domain, value, self.domain.levels)))
            outcome = self.ledger.charge_or_reuse(self.metric, self.epsilon, key, message)
            message, memoized = outcome.report, outcome.memoized
            charged = 0.0 if memoized else self.epsilon
            if memoized:
                level = _level_of(self, message)
        return DiscoveryReport(level, wire.peek_header(message)[1], message, memoized, charged)


def _level_of(device: DiscoveryDevice, message: bytes) -> int:
    fingerprint = wire.peek_header(message)[1]
    for level, params in enumerate(device.params_by_level, 1):
        if params.fingerprint == fingerprint:
            return level
    raise InvalidParameterError("message", fingerprint.hex(), "memoized report of no level of this metric")


__all__ = ["DiscoveryDevice", "DiscoveryReport"]
