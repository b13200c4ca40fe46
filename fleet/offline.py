"""Offline estimation from capture files: audits, batch reprocessing, and the
reference the streaming worker must agree with (same decode, same counts).

Every message is decoded with the shared wire codec; a message that fails
validation is counted under its reason and never touches the sketch.

A wrong question never gets a silent answer (``ocms estimate``): rejected
messages are summarised on stderr with the parameter fingerprints they carry
(and the flags that would match them, when a nearby parameter set does); when
nothing was counted but something was rejected or damaged the exit status is
1. A capture whose last message is cut off still counts every complete message;
the damaged tail (file, byte offset) is reported, and fails the run only with
``--strict``.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, TextIO

from cms_core import OCMSParams, OCMSSketch, TrackedValues, wire
from cms_core.errors import OCMSError
from cms_core.records import estimate_records, noise_fields
from cms_core.reports import ReportBatch
from cms_core.sketch import EstimateOptions

from infra.capture import CaptureDamage, CaptureReader, read_capture

#: Exit status of ``ocms estimate`` when the answer cannot be trusted (bad flags exit 2).
EXIT_NOTHING_COUNTED = 1


@dataclass
class DecodeResult:
    """What decoding a stream of messages produced, including everything it refused."""

    sketch: OCMSSketch
    messages: int = 0
    rejected: Counter = field(default_factory=Counter)  # reason -> messages
    unknown_fingerprints: Counter = field(default_factory=Counter)  # fingerprint bytes -> messages
    unknown_reports: Counter = field(default_factory=Counter)  # fingerprint bytes -> reports they hold
    damage: list[CaptureDamage] = field(default_factory=list)

    @property
    def counted_messages(self) -> int:
        return self.messages - sum(self.rejected.values())


def decode_messages(
    params: OCMSParams, tracked: TrackedValues, messages: Iterable[bytes], *, batch_reports: int = 200_000,
) -> DecodeResult:
    """Decode messages into a sketch, keeping per-reason rejects and the unknown fingerprints seen."""
    registry = {params.fingerprint: params}
    result = DecodeResult(OCMSSketch(params, tracked))
    pending: list[ReportBatch] = []
    size = 0
    for message in messages:
        result.messages += 1
        try:
            _, batch = wire.decode_message(message, registry)
        except wire.WireFormatError as exc:
            result.rejected[exc.reason] += 1
            if isinstance(exc, wire.UnknownFingerprintError):
                _, fingerprint, count = wire.peek_header(message)
                result.unknown_fingerprints[fingerprint] += 1
                result.unknown_reports[fingerprint] += count
            continue
        pending.append(batch)
        size += len(batch)
        if size >= batch_reports:
            result.sketch.update(ReportBatch.concat(pending))
            pending, size = [], 0
    if pending:
        result.sketch.update(ReportBatch.concat(pending))
    return result


def sketch_from_messages(
    params: OCMSParams, tracked: TrackedValues, messages: Iterable[bytes], *, batch_reports: int = 200_000,
) -> tuple[OCMSSketch, Counter]:
    """Decode messages into a sketch; returns (sketch, rejected-by-reason)."""
    result = decode_messages(params, tracked, messages, batch_reports=batch_reports)
    return result.sketch, result.rejected


def decode_captures(
    params: OCMSParams, tracked: TrackedValues, paths: Iterable[str | Path], *, strict: bool = False,
) -> DecodeResult:
    """Decode capture files; a damaged tail ends its file (kept in ``damage``) unless ``strict``."""
    readers = [CaptureReader(path, strict=strict) for path in paths]

    def messages():
        for reader in readers:
            yield from reader

    result = decode_messages(params, tracked, messages())
    result.damage = [r.damage for r in readers if r.damage is not None]
    return result


def sketch_from_captures(params: OCMSParams, tracked: TrackedValues, paths: Iterable[str | Path]) -> tuple[OCMSSketch, Counter]:
    """Strict decode of capture files (a damaged tail raises CaptureFormatError)."""

    def messages():
        for path in paths:
            yield from read_capture(path)

    return sketch_from_messages(params, tracked, messages())


# ------------------------------------------------------------ wrong questions


def _rebuilt(params: OCMSParams, **changes) -> OCMSParams:
    """``params`` rebuilt with ``changes`` (how the CLI flags would build them)."""
    kwargs = dict(
        epsilon=params.epsilon,
        dictionary_size=None if params.value_domain == "string" else params.dictionary_size,
        mode=params.mode if params.mode in ("mse", "l2") else "mse",
        f_star=params.f_star if params.f_star is not None else 1.0,
        tracked_count=params.tracked_count,
        hash_range=params.hash_range if params.mode not in ("mse", "l2") else None,
        value_domain=params.value_domain,
        binding=params.binding,
    )
    kwargs.update(changes)
    return OCMSParams.build(kwargs.pop("epsilon"), kwargs.pop("dictionary_size"), **kwargs)


def _epsilon_grid() -> list[float]:
    grid = {k / 100 for k in range(1, 1001)} | {k / 4 for k in range(1, 401)}  # 0.01..10 and quarters to 100
    return sorted(grid)


def matching_flags(params: OCMSParams, fingerprints: Iterable[bytes]) -> dict[bytes, str]:
    """For each fingerprint, the flag change that would build matching parameters, when a nearby one does.

    Searched: another ``--epsilon`` (0.01 steps to 10, quarter steps to 100),
    another ``--hash-range`` (2..4096), the other ``--mode``, and the other
    value domain (``--strings``), every other flag as given. Fingerprints
    also cover d and a metric binding, which are not guessed.
    """
    wanted = set(fingerprints)
    found: dict[bytes, str] = {}
    epsilon = params.epsilon

    def attempt(description: Callable[[], str], **changes) -> None:
        try:
            fp = _rebuilt(params, **changes).fingerprint
        except OCMSError:
            return
        if fp in wanted and fp not in found:
            found[fp] = description()

    if params.value_domain == "integer":
        attempt(lambda: "--strings (without --dictionary-size)", value_domain="string", dictionary_size=None)
    for mode in ("mse", "l2"):
        if mode != params.mode:
            without = " without --hash-range" if params.mode not in ("mse", "l2") else ""
            attempt(lambda mode=mode, without=without: f"--mode {mode}{without}", mode=mode, hash_range=None,
                    tracked_count=params.tracked_count)
    for eps in _epsilon_grid():
        if len(found) == len(wanted):
            break
        if eps != epsilon:
            attempt(lambda eps=eps: f"--epsilon {eps:g}", epsilon=eps)
    for m in range(2, 4097):
        if len(found) == len(wanted):
            break
        if m != params.hash_range:
            attempt(lambda m=m: f"--hash-range {m}", hash_range=m)
    return found


def diagnose(version, registry, result: DecodeResult, *, flags: bool) -> list[str]:
    """Human lines for stderr: what was rejected or damaged, and why it matters.

    Each refused fingerprint is named: as a version of ``registry`` when it is one, else (the flags'
    metric, ``flags``) with the flag change that would match it, when a nearby one does."""
    params = version.params
    lines = []
    for damage in result.damage:
        lines.append(f"warning: {damage.describe()}")
    rejected = sum(result.rejected.values())
    if rejected:
        reasons = ", ".join(f"{reason} {count:,}" for reason, count in sorted(result.rejected.items()))
        lines.append(f"warning: {rejected:,} of {result.messages:,} messages rejected ({reasons}); "
                     f"{result.sketch.n:,} reports counted")
    if result.unknown_fingerprints:
        whose = "the flags'" if flags else f"{version.binding}'s"
        lines.append(f"warning: these messages carry other parameter fingerprints than {whose} {params.fingerprint.hex()}:")
        matches = matching_flags(params, result.unknown_fingerprints) if flags else {}
        for fp, messages in result.unknown_fingerprints.most_common():
            other = registry.by_fingerprint(fp)
            if other is not None:
                hint = f"; they are {other.binding}'s (--metric {other.metric} --metric-version {other.version})"
            elif fp in matches:
                hint = f"; matches {matches[fp]} (other flags as given)"
            elif flags:
                hint = "; no nearby flags match (check --dictionary-size/--strings, --f-star, --tracked, or the metric)"
            else:
                hint = f"; of no metric in {registry.path}"
            lines.append(f"warning:   fingerprint {fp.hex()}: {messages:,} messages, "
                         f"{result.unknown_reports[fp]:,} reports{hint}")
    return lines


def estimate_document(params: OCMSParams, result: DecodeResult, options: EstimateOptions) -> dict:
    """The JSON answer: header plus one record per tracked value (cms_core.records, as the HTTP API)."""
    sketch = result.sketch
    estimates = sketch.estimate(confidence=options.confidence, interval=options.interval,
                                postprocess_method=options.postprocess)
    return {
        "params": params.describe(),
        "n": sketch.n,
        "messages": result.messages,
        "rejected": dict(sorted(result.rejected.items())),
        "rejected_fingerprints": {fp.hex(): count for fp, count in result.unknown_fingerprints.most_common()},
        "damaged": [{"file": d.path, "offset": d.offset, "messages_before": d.message_index, "reason": d.reason,
                     "ignored_bytes": d.ignored_bytes, "ignored_bytes_exact": d.ignored_bytes_exact}
                    for d in result.damage],
        "confidence": options.confidence,
        "interval": options.interval,
        "postprocess": options.postprocess,
        **noise_fields(estimates),
        "estimates": estimate_records(estimates, sketch.counts),
    }


def noise_line(doc: dict) -> str | None:
    """One line for stderr when some values of ``doc`` (an estimate document) are under its noise
    floor (none when every value stands above it: a clean answer stays quiet)."""
    if not doc.get("n"):
        return None
    floor, values = doc.get("noise_floor"), doc["noise_values"]
    if floor is None:
        remedy = "use --interval normal or more reports" if doc["interval"] != "normal" else "it needs more reports"
        return (f"note: the {doc['interval']} bound gives no noise floor at n = {doc['n']:,}: no value can be told "
                f"from zero among {values:,} ({remedy})")
    under = sum(1 for record in doc["estimates"] if not record.get("above_noise"))
    if not under:
        return None
    return (f"note: {under:,} of {values:,} values are under the noise floor {floor:.4%} "
            f"({doc['noise_floor_count']:,.0f} of {doc['n']:,} reports): at {doc['confidence']:.0%} over all "
            f"{values:,} values they cannot be told from zero (above_noise: false in the JSON)")


def named_document(version, doc: dict) -> dict:
    """``estimate_document``'s answer with the metric, the version and value names (category names)."""
    if version.domain == "categories":
        for record in doc["estimates"]:
            record["value"] = version.value_name(int(record["value"]))
    return {"metric": version.metric, "version": version.version, **doc}


def numeric_histogram(version, result: DecodeResult, paths, options: EstimateOptions) -> dict | None:
    """A numeric version's /histogram answer from captures: its flat oracle's bucket estimates, or a tree's
    consistent histogram of every level (each level decoded with its own parameters; ``result`` is the finest's)."""
    from cms_core.numeric import tree_window_summary, window_summary

    spec, tree = version.numeric, getattr(version, "hierarchy", None)
    if tree is None:
        estimates = result.sketch.estimate(confidence=options.confidence)
        doc = window_summary(spec.layout, version.params, estimates.frequency, estimates.n, options.confidence,
                             spec.quantiles)
    else:
        paths = list(paths)
        levels = [decode_captures(level.params, level.tracked_values(), paths).sketch
                  for level in version.tree_levels()[:-1]] + [result.sketch]
        doc = tree_window_summary(spec.layout, tree, [(s.n, s.counts) for s in levels], options.confidence,
                                  spec.quantiles)
    if doc is not None:
        doc["layout"] = spec.describe()
    for part in getattr(version, "mean_parts", tuple)():  # a Hybrid mean: from its own reports (cms_core.hybrid)
        from cms_core.hybrid import with_mean

        counts = decode_captures(part.params, part.tracked_values(), paths).sketch.counts
        doc = with_mean(doc, version.mean.hybrid, counts, options.confidence, spec.mean_only_answer(options.confidence))
    return doc


def run_estimate(version, registry, paths: Iterable[str | Path], options: EstimateOptions, *, strict: bool = False,
                 err: TextIO | None = None, prog: str = "ocms estimate") -> int:
    """``ocms estimate`` of one metric version (the flags' metric or a registry's): JSON on stdout, warnings on
    ``err``; returns the exit status.

    0: an answer (warnings, if any, on stderr). 1: nothing was counted while
    messages were rejected or a capture was damaged, or ``strict`` and a
    capture was damaged (the JSON is still written, for inspection).
    """
    from infra.output import write_stdout
    from registry.flags import FLAGS_PATH

    err = sys.stderr if err is None else err
    paths = list(paths)
    result = decode_captures(version.params, version.tracked_values(), paths)
    parts = getattr(version, "tree_levels", tuple)()[:-1] + getattr(version, "mean_parts", tuple)()
    for level in parts:  # a tree's coarser levels and a Hybrid mean's part: counted, not refused
        refused = result.unknown_fingerprints.pop(level.fingerprint, 0)
        result.unknown_reports.pop(level.fingerprint, None)
        result.rejected[wire.UnknownFingerprintError.reason] -= refused
        result.rejected += Counter()  # drops a reason left at zero
    doc = named_document(version, estimate_document(version.params, result, options))
    if getattr(version, "numeric", None) is not None:  # issue 40: the quantiles and the mean, as /histogram
        doc["histogram"] = numeric_histogram(version, result, paths, options)
    write_stdout(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    flags = registry.path == FLAGS_PATH
    for line in diagnose(version, registry, result, flags=flags) + [noise_line(doc)]:
        if line:
            print(f"{prog}: {line}", file=err)
    problems = bool(result.rejected) or bool(result.damage)
    if result.sketch.n == 0 and problems:
        why = (f"every readable message was rejected (none is {'of the flags' if flags else version.binding}); "
               "see above") if result.rejected else "the captures hold no complete message"
        print(f"{prog}: error: nothing counted: {why} (exit {EXIT_NOTHING_COUNTED})", file=err)
        return EXIT_NOTHING_COUNTED
    if strict and result.damage:
        print(f"{prog}: error: --strict: {len(result.damage)} capture file(s) damaged (exit {EXIT_NOTHING_COUNTED})",
              file=err)
        return EXIT_NOTHING_COUNTED
    if result.sketch.n == 0:
        print(f"{prog}: warning: the captures hold no reports", file=err)
    return 0
