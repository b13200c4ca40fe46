"""``ocms worker --registry FILE``: the registry's parameter sets, and settings that cannot go with it.

With a registry every metric version states its own epsilon, dictionary, tracked set, bucket width,
retention, rollup, watch list and top-K; the single-metric settings that describe those are refused
(naming the flag or variable that set them) rather than silently ignored. The worker-wide settings
(broker, topics, partitions, micro-batch, web, store) keep their flags.
"""

from __future__ import annotations

from typing import Mapping

from cms_core.errors import OCMSError

#: Settings (agents.settings.SETTINGS) of the one metric the flags describe: a registry replaces them.
METRIC_SETTINGS = (
    "epsilon", "mode", "f_star", "dictionary_size", "strings", "tracked", "hash_range", "mechanism", "extra_epsilon",
    "tracked_range", "tracked_file", "watch", "top_k", "bucket_seconds", "retention_seconds", "rollup_seconds",
    "rollup_retention_seconds",
)


class RegistryFlagError(OCMSError, ValueError):
    """A single-metric setting given together with --registry."""


def registry_params(flags: Mapping[str, object], environ: Mapping[str, str], path: str):
    """(primary parameters, the other live versions' parameters) of the registry at ``path``.

    The primary is the first metric's newest live version; the catalog (agents.catalog) builds
    the rest of what the worker serves from the same file."""
    from .settings import resolve

    _, labels = resolve(METRIC_SETTINGS, flags, environ)
    given = [labels[name] for name in METRIC_SETTINGS if name in labels.given]
    if given:
        raise RegistryFlagError(f"{', '.join(given)}: describe the single metric of the flags; with --registry "
                                f"{path} each metric states them in the registry (docs/registry.md)")
    from registry import load_registry

    registry = load_registry(path)
    versions = [v for m in registry.metrics for v in m.live_versions]
    if not versions:
        raise RegistryFlagError(f"--registry {path}: no live metric version to serve")
    first = registry.metrics[0].latest if registry.metrics[0].live_versions else versions[0]
    return first.params, tuple(v.params for v in versions if v is not first)
