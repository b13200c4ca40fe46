"""What a metric's answers expose, and for how long: 'bucket' (the window width), 'retention', 'rollup'
(coarser buckets kept longer), 'top_k' and 'min_reports' (a window with fewer reports is withheld).
"""

from __future__ import annotations

from cms_core.version import release_tuple

from .files import YamlMap
from .load_checks import Checker, key_line, show
from .load_schema import (DEFAULT_BUCKET_SECONDS, DEFAULT_MIN_REPORTS, DEFAULT_RETENTION_SECONDS,
                          DEFAULT_ROLLUP_RETENTION_SECONDS, DEFAULT_TOP_K, MAX_BUCKET_SECONDS, MAX_MIN_REPORTS,
                          MAX_ROLLUP_SECONDS, MAX_TOP_K, ROLLUP_KEYS)


def read_exposure(check: Checker, entry, metric) -> dict | None:
    """The MetricVersion keywords of the metric's windows and answers, or None after reporting a problem."""
    before = check.problem_count
    bucket = check.duration(entry, "bucket", metric, DEFAULT_BUCKET_SECONDS, 1, MAX_BUCKET_SECONDS)
    retention = check.duration(entry, "retention", metric, DEFAULT_RETENTION_SECONDS, 1, None)
    if bucket is not None and retention is not None and retention < bucket:
        check.problem(key_line(entry, "retention"), f"must be >= the bucket width {bucket} s, got {retention} s",
                      metric, "retention")
    rollup_seconds = rollup_retention = None
    if "rollup" in entry:
        rollup = entry["rollup"]
        rline = key_line(entry, "rollup")
        if not isinstance(rollup, YamlMap):
            check.problem(rline, f"must be a mapping with 'bucket' (and optional 'retention'), got {show(rollup)}",
                          metric, "rollup")
        else:
            check.unknown_keys(rollup, ROLLUP_KEYS, metric, prefix="rollup.")
            if "bucket" not in rollup:
                check.problem(rline, "missing; the rollup's bucket width, e.g. 1h", metric, "rollup.bucket")
            else:
                rollup_seconds = check.duration(rollup, "bucket", metric, None, 1, MAX_ROLLUP_SECONDS, "rollup.bucket")
            rollup_retention = check.duration(rollup, "retention", metric, DEFAULT_ROLLUP_RETENTION_SECONDS, 1, None,
                                              "rollup.retention")
            if rollup_seconds is not None and bucket is not None and (
                    rollup_seconds <= bucket or rollup_seconds % bucket):
                check.problem(key_line(rollup, "bucket"), f"must be a multiple of the bucket width {bucket} s and "
                              f"larger, got {rollup_seconds} s", metric, "rollup.bucket")
            if rollup_seconds is not None and rollup_retention is not None and rollup_retention < rollup_seconds:
                check.problem(key_line(rollup, "retention"), f"must be >= the rollup width {rollup_seconds} s, "
                              f"got {rollup_retention} s", metric, "rollup.retention")
    top_k = check.integer(entry, "top_k", metric, DEFAULT_TOP_K, 0, MAX_TOP_K)
    min_reports = check.integer(entry, "min_reports", metric, DEFAULT_MIN_REPORTS, 0, MAX_MIN_REPORTS)
    min_client = release(check, entry, "min_client_version", metric)
    if check.problem_count > before:
        return None
    return {"bucket_seconds": bucket, "retention_seconds": retention, "rollup_seconds": rollup_seconds,
            "rollup_retention_seconds": rollup_retention if rollup_seconds is not None else None,
            "top_k": top_k, "min_reports": min_reports, "min_client_version": min_client}


def release(check: Checker, mapping, key, metric) -> str | None:
    """A release ``X.Y.Z`` (the oldest device client release that may report the metric), or None."""
    if key not in mapping:
        return None
    value = mapping[key]
    try:
        release_tuple(value if isinstance(value, str) else "")
    except ValueError:
        check.problem(key_line(mapping, key), f"must be a release X.Y.Z in quotes (e.g. \"0.3.0\"), got "
                      f"{show(value)}", metric, key)
        return None
    return value.strip()

