"""The minimal configuration a device needs to report a registry's metrics.

Per metric, its newest live version: name, version, fingerprint, ε, m, the keep
threshold T of the randomized response (decimal digits; :func:`cms_core.privatize.keep_threshold`,
so every device client keeps with the same integer as the Python device instead of
recomputing exp(ε) with its own libm), the field, the value domain, and the categories
(or d for integers); nothing else: no owner, description, tracked values or exposure
settings, which a device has no use for. ``min_client_version`` (when the registry gives one): the oldest
client release that may report the metric; clients of that release or later refuse it when older, naming
the release to upgrade to (a client of 0.2.0 does not know the key and ignores it). A numeric version
reported as a hierarchical histogram (issue 40) has ``"mechanism": "hierarchy"`` and ``hierarchy``: its
levels, each with the parameters above; its top-level parameters are its finest level's.
"""

from __future__ import annotations

from cms_core.privatize import keep_threshold
from cms_core.values import value_to_json

from .model import MetricVersion, Registry

DEVICE_CONFIG_FORMAT = 1


def field_config(version: MetricVersion) -> dict:
    return _field(version.params.field)


def _field(field) -> dict:
    if field.kind == "prime":
        return {"kind": "prime", "order": value_to_json(field.order)}
    return {"kind": "binary", "degree": field.degree, "polynomial": value_to_json(field.polynomial)}


def version_config(version: MetricVersion) -> dict:
    out = {
        "name": version.metric,
        "version": version.version,
        "fingerprint": version.fingerprint.hex(),
        "epsilon": version.params.epsilon,
        "m": version.params.hash_range,
        "keep_threshold": str(keep_threshold(version.params)),
        "field": field_config(version),
        "domain": version.domain,
    }
    if version.mechanism != "ocms":
        out["mechanism"] = version.mechanism
    if version.min_client_version is not None:  # a client of an older release refuses the metric (issue 39)
        out["min_client_version"] = version.min_client_version
    if version.domain == "categories":
        out["categories"] = list(version.value_names)
    elif version.domain == "integers":
        out["dictionary_size"] = value_to_json(version.params.dictionary_size)
    if version.numeric is not None:  # issue 40: the device clips its number and reports the bucket index
        out["numeric"] = version.numeric.device_config()
    if version.hierarchy is not None:  # issue 40: a tree; the device draws one level per report (docs/device.md)
        out["hierarchy"] = tree_config(version)
    if version.mean is not None:  # issue 40: a Hybrid mean; the device draws its part first (docs/device.md)
        from .numeric import mean_config

        carrier = version.mean.carrier  # its parameters, so a client can check the fingerprint it frames with
        out["mean"] = {**mean_config(version.mean), "m": carrier.hash_range, "field": _field(carrier.field),
                       "keep_threshold": str(keep_threshold(carrier)), "mechanism": carrier.mechanism,
                       "dictionary_size": value_to_json(carrier.dictionary_size)}
    if version.longitudinal is not None:  # issue 38: memoized two-round reports (cms_core.longitudinal)
        from cms_core.longitudinal import memo_threshold, report_threshold

        lp = version.longitudinal
        out["longitudinal"] = {"lifetime_epsilon": lp.lifetime_epsilon, "memo_threshold": str(memo_threshold(lp)),
                               "report_threshold": str(report_threshold(lp))}
    if version.discovery is not None:  # issue 15: the levels a device reports prefixes with (docs/discovery.md)
        from .discovery import discovery_of

        spec = discovery_of(version)
        out["discovery"] = {
            **spec.domain.describe(),
            "levels": [{"level": level, "fingerprint": p.fingerprint.hex(), "m": p.hash_range,
                        "keep_threshold": str(keep_threshold(p)), "field": _field(p.field),
                        "dictionary_size": value_to_json(p.dictionary_size)}
                       for level, p in enumerate(spec.params_by_level, 1)],
        }
    return out


def tree_config(version: MetricVersion) -> dict:
    """A tree version's levels as a device reports them: level ``l`` = ``draw_below(h) + 1``, the bucket's node
    ``bucket // span``, privatized with the level's parameters and framed with its fingerprint."""
    tree = version.hierarchy
    levels = []
    for level in version.tree_levels():
        p = level.params
        row = {"level": level.tree_level, "fingerprint": p.fingerprint.hex(), "span": tree.span(level.tree_level),
               "m": p.hash_range, "keep_threshold": str(keep_threshold(p)), "field": _field(p.field),
               "dictionary_size": value_to_json(p.dictionary_size)}
        if p.mechanism != "ocms":
            row["mechanism"] = p.mechanism
        levels.append(row)
    return {"buckets": tree.buckets, "branching": tree.branching, "levels": levels}


def device_config(registry: Registry, metrics: list[str] | None = None) -> dict:
    """``{"format": 1, "metrics": [...]}``: each selected metric's newest live version (metrics with none are left out)."""
    selected = [registry.metric(name) for name in metrics] if metrics else list(registry.metrics)
    return {"format": DEVICE_CONFIG_FORMAT,
            "metrics": [version_config(m.latest) for m in selected if m.live_versions]}
