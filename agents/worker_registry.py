"""``ocms worker --registry FILE``: the registry's parameter sets, and flags that cannot go with it.

With a registry every metric version states its own epsilon, dictionary, tracked set, bucket width,
retention, rollup, watch list and top-K; the single-metric flags that describe those are refused
(naming the flag) rather than silently ignored. The worker-wide settings (broker, topics,
partitions, micro-batch, web, store) keep their flags.
"""

from __future__ import annotations

from cms_core.errors import OCMSError

#: argparse destination -> the flag a user typed: single-metric flags that a registry replaces.
METRIC_FLAGS = {
    "epsilon": "--epsilon", "mode": "--mode", "extra_epsilon": "--extra-epsilon", "dictionary_size": "--dictionary-size",
    "strings": "--strings", "tracked": "--tracked", "hash_range": "--hash-range", "mechanism": "--mechanism",
    "f_star": "--f-star", "tracked_range": "--tracked-range", "tracked_file": "--tracked-file", "watch": "--watch",
    "top_k": "--top-k", "bucket_seconds": "--bucket-seconds", "retention_seconds": "--retention-seconds",
    "rollup_seconds": "--rollup-seconds", "rollup_retention_seconds": "--rollup-retention-seconds",
}


class RegistryFlagError(OCMSError, ValueError):
    """A single-metric flag given together with --registry."""


def registry_params(args, path: str):
    """(primary parameters, the other live versions' parameters) of the registry at ``path``.

    The primary is the first metric's newest live version; the catalog (agents.catalog) builds
    the rest of what the worker serves from the same file."""
    given = [flag for dest, flag in METRIC_FLAGS.items()
             if getattr(args, dest, None) not in (None, False, [], ())]
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
