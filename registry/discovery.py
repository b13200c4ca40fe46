"""The optional ``discovery:`` block of a strings or integers metric (docs/discovery.md).

    - name: typed_words
      strings: true
      epsilon: 4
      discovery:
        alphabet: "abcdefghijklmnopqrstuvwxyz'"   # or utf8 (the default): any string, as UTF-8 bytes
        max_length: 12                            # symbols described; longer values are found truncated
        symbols_per_level: 1                      # default 1

    - name: build_id
      integers: 2^64
      epsilon: 4
      discovery:
        bits_per_level: 8                         # bits defaults to the dictionary's (64 here)

Each version of the metric gets one parameter set per level at its epsilon
(:func:`cms_core.discovery.level_params`, binding ``name@version/levelL``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cms_core import discovery
from cms_core.errors import InvalidParameterError
from cms_core.params import OCMSParams

STRING_KEYS = ("alphabet", "max_length", "symbols_per_level")
INTEGER_KEYS = ("bits", "bits_per_level")


@dataclass(frozen=True)
class DiscoverySpec:
    """A version's discovery set-up: its domain and one parameter set per level."""

    metric: str
    version: int
    domain: discovery.DiscoveryDomain
    params_by_level: tuple[OCMSParams, ...]

    def level_of(self, fingerprint: bytes) -> int | None:
        """The level whose reports carry ``fingerprint``, or None."""
        for level, params in enumerate(self.params_by_level, 1):
            if params.fingerprint == fingerprint:
                return level
        return None

    def describe(self) -> dict:
        """The domain's settings and every level: binding, fingerprint, m and its parameters (JSON-ready)."""
        return {
            **self.domain.describe(),
            "levels": [{"level": level, "binding": p.binding, "fingerprint": p.fingerprint.hex(),
                        "hash_range": p.hash_range, "params": p.describe()}
                       for level, p in enumerate(self.params_by_level, 1)],
        }


@dataclass(frozen=True)
class DiscoveryLevel:
    """One discovery level of a metric version, as the transports see it: a parameter version of the
    metric (``params``/``fingerprint`` of the level) whose reports are carried like any report but
    counted by no streaming table: discovery reads them from the source topic's window."""

    metric: str
    version: int
    level: int
    params: OCMSParams
    bucket_seconds: int
    live: bool

    @property
    def fingerprint(self) -> bytes:
        return self.params.fingerprint

    @property
    def binding(self) -> str:
        return self.params.binding


def discovery_levels(registry) -> dict[bytes, DiscoveryLevel]:
    """Level fingerprint -> :class:`DiscoveryLevel` for every version (live or retired) with a
    ``discovery:`` block; ``live`` is the version's. Empty for a registry without discovery."""
    out: dict[bytes, DiscoveryLevel] = {}
    for spec in registry.metrics:
        for version in spec.versions:
            if getattr(version, "discovery", None) is None:
                continue
            for level, params in enumerate(discovery_of(version).params_by_level, 1):
                out[params.fingerprint] = DiscoveryLevel(version.metric, version.version, level, params,
                                                         int(version.bucket_seconds), bool(version.live))
    return out


def discovery_of(version) -> DiscoverySpec:
    """The discovery set-up of a registry :class:`MetricVersion`; OCMSError when it declares none."""
    from .errors import Problem, RegistryValidationError

    domain = getattr(version, "discovery", None)
    if domain is None:
        raise RegistryValidationError(Problem("", version.line, "declares no 'discovery:' block, so its values "
                                              "cannot be discovered", version.metric, "discovery", version.version))
    spec = version._cache.get("discovery")
    if spec is None:
        params = discovery.level_params(version.metric, version.version, version.params.epsilon, domain)
        spec = version._cache.setdefault("discovery", DiscoverySpec(version.metric, version.version, domain, params))
    return spec


def parse_discovery_block(loader, entry, kind: str, size: int | None, metric: str, key_line, show):
    """Validate ``entry['discovery']``; returns a DiscoveryDomain, None when absent, or False after a problem.

    ``loader.problem(line, message, metric, field)`` records a located problem.
    """
    if "discovery" not in entry:
        return None
    block, line = entry["discovery"], key_line(entry, "discovery")
    if kind == "categories":
        loader.problem(line, "only 'strings' and 'integers' metrics can be discovered (categories are all "
                             "known: every one is tracked)", metric, "discovery")
        return False
    if not isinstance(block, dict):
        loader.problem(line, f"must be a mapping ({', '.join(STRING_KEYS if kind == 'strings' else INTEGER_KEYS)}), "
                             f"got {show(block)}", metric, "discovery")
        return False
    allowed = STRING_KEYS if kind == "strings" else INTEGER_KEYS
    bad = False
    for k in block:
        if k not in allowed:
            other = "integers" if kind == "strings" else "strings"
            why = f"belongs to {other} metrics" if k in (INTEGER_KEYS if kind == "strings" else STRING_KEYS) else "unknown key"
            loader.problem(key_line(block, k), f"{why}; a {kind} metric takes {', '.join(allowed)}", metric,
                           f"discovery.{k}")
            bad = True
    if bad:
        return False

    def integer(name, default):
        value = block.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int):
            loader.problem(key_line(block, name) if name in block else line,
                           f"must be a positive integer, got {show(value)}", metric, f"discovery.{name}")
            return None
        return value

    if kind == "strings":
        alphabet = block.get("alphabet", discovery.UTF8)
        if not isinstance(alphabet, str):
            loader.problem(key_line(block, "alphabet"), f"must be 'utf8' or a string of characters, got {show(alphabet)}",
                           metric, "discovery.alphabet")
            return False
        if "max_length" not in block:
            loader.problem(line, "missing 'max_length' (symbols of a value to describe, e.g. 16)", metric,
                           "discovery.max_length")
            return False
        max_length, step = integer("max_length", None), integer("symbols_per_level", 1)
        if max_length is None or step is None:
            return False
        fields = dict(kind="strings", alphabet=str(alphabet), max_length=max_length, symbols_per_level=step)
    else:
        needed = max(1, math.ceil(math.log2(size))) if size and size > 1 else 1
        bits, step = integer("bits", needed), integer("bits_per_level", 8)
        if bits is None or step is None:
            return False
        if bits < needed:
            loader.problem(key_line(block, "bits"), f"{bits} bits cannot hold the dictionary [0, {size}) "
                                                    f"(needs {needed})", metric, "discovery.bits")
            return False
        fields = dict(kind="integers", bits=bits, bits_per_level=min(step, bits) if "bits_per_level" not in block
                      else step)
    try:
        return discovery.DiscoveryDomain(**fields)
    except InvalidParameterError as exc:
        name = exc.name
        loader.problem(key_line(block, name) if name in block else line, f"{exc.reason}, got {show(exc.value)}",
                       metric, f"discovery.{name}")
        return False
