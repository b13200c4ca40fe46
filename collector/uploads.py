"""Upload bodies -> one validated ReportBatch of one metric version.

Binary form (``Content-Type: application/vnd.ocms.wire-v1``): one or more wire-v1
messages back to back (single reports and/or frames). Each message delimits
itself: its header names the parameter set (fingerprint) and the record count,
the parameters give the record size. Every message is decoded and validated with
:func:`cms_core.wire.decode_message`, so a bad report is refused with the same
reason the worker's dead-letter topic would give it.

JSON form (``Content-Type: application/json``), for web clients::

    {"fingerprint": "eee2f6ee10f1ea54",            # or "version": 2 on /v1/metrics/{name}/reports
     "reports": [{"a0": "1", "a1": "10006", "z": "3"}, ...]}    # direct-RR metrics: [{"z": "3"}, ...]

Numbers in reports are JSON strings of decimal digits (``cms_core.values`` rule: GF(2^128)
coefficients do not fit a JSON number); a JSON number there is refused (``malformed_json``), as
is a ``"version"`` that is not the fingerprint's (``version_mismatch``).
The JSON reports are written as a wire-v1 frame and decoded like binary uploads.

The fingerprint of a level of a numeric metric's hierarchical histogram (``MetricVersion.tree_levels``) is
accepted as a version of its metric: each upload carries one level, as it carries one version. So is the
fingerprint of a numeric version's Hybrid mean (``MetricVersion.mean_parts``; its reports are z alone, as direct
RR's).

The fingerprint of a discovery level of a discoverable metric (``registry.discovery``) is
accepted like a version's: its reports are produced to the source topic for discovery.

All messages of one upload must carry one parameter set (one metric version):
an upload is produced as part of exactly one Kafka frame, so it is acknowledged
(202) or refused as a whole, never half produced.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from cms_core import wire
from cms_core.reports import ReportBatch
from infra.framing import DEFAULT_MAX_FRAME_BYTES

WIRE_CONTENT_TYPE = "application/vnd.ocms.wire-v1"
#: Also accepted for the binary form (generic HTTP clients).
BINARY_CONTENT_TYPES = (WIRE_CONTENT_TYPE, "application/octet-stream")
JSON_CONTENT_TYPE = "application/json"


class UploadRejected(Exception):
    """An upload answered with a 4xx: ``status``, ``reason`` code and a human ``detail``."""

    def __init__(self, status: int, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.status = status
        self.reason = reason
        self.detail = detail


def _bad(reason: str, detail: str) -> UploadRejected:
    return UploadRejected(400, reason, detail)


@dataclass(frozen=True)
class Upload:
    version: object  # registry MetricVersion
    batch: ReportBatch


class UploadParser:
    """Decode uploads against a registry (``by_fingerprint``, ``metric``)."""

    def __init__(self, registry, max_reports: int):
        self.registry = registry
        self.max_reports = max_reports
        self.versions = {}
        for spec in registry.metrics:
            live = {v.version for v in spec.live_versions}
            for v in spec.versions:
                self.versions[v.fingerprint] = (v, v.version in live)
                # a tree version's levels (issue 40) are parameter versions of it, each a fingerprint of its own
                for level in v.tree_levels() + v.mean_parts():  # and a Hybrid mean's part: the same
                    self.versions[level.fingerprint] = (level, v.version in live)
        # Discovery levels (docs/discovery.md) are parameter versions of their metric: accepted and
        # produced to the source topic like any report (the worker leaves them to discovery).
        from registry.discovery import discovery_levels

        for fp, level in discovery_levels(registry).items():
            self.versions.setdefault(fp, (level, level.live))
        self.params = {fp: v.params for fp, (v, _) in self.versions.items()}
        self.record_sizes = {fp: wire.record_size(p) for fp, p in self.params.items()}
        # An upload must fit one frame, and a frame stays under the batcher's byte bound.
        self.limits = {fp: min(max_reports, (DEFAULT_MAX_FRAME_BYTES - wire.HEADER_SIZE) // size)
                       for fp, size in self.record_sizes.items()}

    # ----------------------------------------------------------------- binary
    def frame_binary(self, body: bytes, metric: str | None) -> tuple[object, bytes, int] | None:
        """(version, raw records, count) of a well-framed binary upload, else None.

        Checks only the framing (headers, fingerprints, counts, lengths: the cheap part); the
        records are validated by the lane, many uploads per decode call. None means "not
        well framed": :meth:`parse_binary` then gives the exact reason.
        """
        size_of = len(body)
        offset, version, total, parts = 0, None, 0, []
        header = wire.HEADER
        while offset < size_of:
            if size_of - offset < wire.HEADER_SIZE:
                return None
            magic, wire_version, kind, fingerprint, count = header.unpack_from(body, offset)
            if magic != wire.MAGIC or wire_version != wire.VERSION or kind not in (wire.KIND_REPORT, wire.KIND_FRAME):
                return None
            found = self.versions.get(fingerprint)
            if found is None or not found[1]:
                return None
            this = found[0]
            if (version is not None and this is not version) or (metric is not None and this.metric != metric):
                return None
            version = this
            if count < 1 or (kind == wire.KIND_REPORT and count != 1):
                return None
            total += count
            if total > self.limits[fingerprint]:
                return None
            end = offset + wire.HEADER_SIZE + count * self.record_sizes[fingerprint]
            if end > size_of:
                return None
            parts.append((offset + wire.HEADER_SIZE, end))
            offset = end
        if version is None:
            return None
        if len(parts) == 1:
            start, end = parts[0]
            return version, body[start:end], total
        return version, b"".join(body[start:end] for start, end in parts), total

    def parse_binary(self, body: bytes, metric: str | None) -> Upload:
        if not body:
            raise _bad("empty", "the upload has no body; send one or more wire-v1 messages")
        view = memoryview(body)
        offset, batches, version, total = 0, [], None, 0
        while offset < len(body):
            try:
                _, fingerprint, count = wire.peek_header(view[offset:offset + wire.HEADER_SIZE].tobytes())
            except wire.WireFormatError as exc:
                raise _bad(exc.reason, f"message at byte {offset}: {exc}") from None
            this = self._version(fingerprint, metric, offset)
            if version is not None and this is not version:
                raise _bad("mixed_parameter_sets", f"message at byte {offset} is for {_name(this)}, the upload began "
                           f"with {_name(version)}: send one metric version per upload")
            version = this
            size = self.record_sizes[fingerprint]
            limit = self.limits[fingerprint]
            if count > limit or total + count > limit:
                raise UploadRejected(413, "too_many_reports",
                                     f"more than {limit} reports in one upload (message at byte {offset} "
                                     f"declares {count}); split the upload")
            end = offset + wire.HEADER_SIZE + count * size
            # A message ends where its header says; an undersized tail is 'truncated', and
            # decode_message also refuses count 0 and single reports with count != 1.
            chunk = body[offset:end]
            if end < len(body) and body[end:end + 2] != wire.MAGIC:
                # Not another message: bytes past the declared records. Decode the whole tail as
                # one message so the reason is the worker's (oversized / count_mismatch).
                chunk = body[offset:]
            try:
                _, batch = wire.decode_message(chunk, self.params)
            except wire.WireFormatError as exc:
                raise _bad(exc.reason, f"message at byte {offset}: {exc}") from None
            batches.append(batch)
            total += len(batch)
            offset = end
        batch = batches[0] if len(batches) == 1 else ReportBatch.concat(batches)
        return Upload(version, batch)

    # ------------------------------------------------------------------- JSON
    def parse_json(self, body: bytes, metric: str | None) -> Upload:
        # UTF-8 only (RFC 8259, 8.1): json.loads of bytes would also guess UTF-16 and UTF-32. A NUL byte is
        # never in UTF-8 JSON (a control character in a string must be escaped): UTF-16/32 of ASCII text.
        try:
            text = body.decode("utf-8")
            if "\x00" in text:
                raise UnicodeDecodeError("utf-8", body, text.index("\x00"), text.index("\x00") + 1, "NUL")
        except UnicodeDecodeError as exc:
            raise _bad("json_not_utf8", f"the JSON body is not UTF-8 (byte {exc.start}; UTF-16 or UTF-32?): send it "
                                        "as UTF-8, without a byte order mark") from None
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError) as exc:
            # ValueError: not JSON, not UTF-8, or an integer of more than 4,300 digits (int's limit)
            raise _bad("malformed_json", f"the body is not JSON: {str(exc)[:200]}") from None
        if not isinstance(doc, dict):
            raise _bad("malformed_json", "expected a JSON object {\"fingerprint\": ..., \"reports\": [...]}")
        unknown = set(doc) - {"fingerprint", "version", "reports"}
        if unknown:
            raise _bad("malformed_json", f"unknown field(s) {sorted(unknown)}")
        version = self._json_version(doc, metric)
        reports = doc.get("reports")
        if not isinstance(reports, list) or not reports:
            raise _bad("empty" if reports == [] else "malformed_json", "\"reports\" must be a non-empty list")
        limit = self.limits[version.fingerprint]
        if len(reports) > limit:
            raise UploadRejected(413, "too_many_reports", f"{len(reports)} reports; at most {limit} per upload")
        params = version.params
        w, zw = params.coefficient_bytes, params.z_bytes
        # Direct randomized response (mechanism "direct") sends z alone; OCMS+RR sends a0, a1, z.
        keys = ("z",) if params.mechanism == "direct" else ("a0", "a1", "z")
        shape = "{" + ", ".join(f'"{k}": "..."' for k in keys) + "}"
        parts = [wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_FRAME, version.fingerprint, len(reports))]
        for i, report in enumerate(reports):
            if not isinstance(report, dict) or set(report) != set(keys):
                raise _bad("malformed_json", f"reports[{i}]: expected {shape} ({params.mechanism} reports)")
            numbers = {k: _json_int(report[k], f"reports[{i}].{k}") for k in keys}
            z = numbers["z"]
            if z >= 1 << (8 * zw):
                raise _bad("z_out_of_range", f"reports[{i}]: z={z} >= m={params.hash_range}")
            if len(keys) == 1:
                parts.append(z.to_bytes(zw, "big"))
                continue
            a0, a1 = numbers["a0"], numbers["a1"]
            if a0 >= 1 << (8 * w) or a1 >= 1 << (8 * w):
                raise _bad("coefficient_out_of_field", f"reports[{i}]: a0 or a1 outside the field {params.field}")
            parts.append(a0.to_bytes(w, "big") + a1.to_bytes(w, "big") + z.to_bytes(zw, "big"))
        try:
            _, batch = wire.decode_message(b"".join(parts), {version.fingerprint: params})
        except wire.WireFormatError as exc:
            raise _bad(exc.reason, str(exc)) from None
        return Upload(version, batch)

    def _json_version(self, doc: dict, metric: str | None):
        number = doc.get("version")
        if "version" in doc and (isinstance(number, bool) or not isinstance(number, int) or not 1 <= number < 1 << 31):
            raise _bad("malformed_json", f"\"version\" must be a metric version number (an integer >= 1), got "
                       f"{_shown(number)}")
        if "fingerprint" in doc:
            text = doc["fingerprint"]
            try:
                fingerprint = bytes.fromhex(text) if isinstance(text, str) else b""
            except ValueError:
                fingerprint = b""
            if len(fingerprint) != 8:
                raise _bad("malformed_json", f"\"fingerprint\" must be 16 hex digits, got {_shown(text)}")
            version = self._version(fingerprint, metric, None)
            if "version" in doc and number != version.version:
                raise _bad("version_mismatch", f"\"version\": {number} contradicts the fingerprint "
                           f"{fingerprint.hex()}, which is {_name(version)}: give one of them, or both agreeing")
            return version
        if "version" in doc and metric is not None:
            spec = self.metric(metric)
            for v in spec.versions:
                if v.version == number and v.hierarchy is not None:  # issue 40: which level is in the reports
                    raise _bad("level_needed", f"{v.binding} is a hierarchical histogram: give the reports' "
                                               "level's \"fingerprint\" (GET /v1/metrics lists them)")
                if v.version == number:
                    return self._version(v.fingerprint, metric, None)
            raise _bad("unknown_version", f"metric {metric!r} has no version {number}")
        if metric is not None:
            live = self.metric(metric).live_versions
            if len(live) == 1:
                return live[0]
            raise _bad("malformed_json", f"metric {metric!r} has {len(live)} live versions: give \"version\" or \"fingerprint\"")
        raise _bad("malformed_json", "give \"fingerprint\" (or post to /v1/metrics/{name}/reports)")

    # ---------------------------------------------------------------- lookups
    def metric(self, name: str):
        """The MetricSpec of ``name``; 404 when the registry has no such metric."""
        from registry import UnknownMetricError

        try:
            return self.registry.metric(name)
        except UnknownMetricError:
            raise UploadRejected(404, "unknown_metric", f"no metric named {name[:100]!r} in the registry") from None

    def _version(self, fingerprint: bytes, metric: str | None, offset: int | None):
        at = "" if offset is None else f"message at byte {offset}: "
        found = self.versions.get(fingerprint)
        if found is None:
            raise _bad("unknown_fingerprint", f"{at}unknown parameter fingerprint {fingerprint.hex()}")
        version, live = found
        if metric is not None and version.metric != metric:
            raise _bad("foreign_metric", f"{at}fingerprint {fingerprint.hex()} belongs to metric {version.metric!r}, "
                       f"not {metric!r}")
        if not live:
            raise _bad("retired_version", f"{at}{_name(version)} is no longer collected; update the client's registry")
        return version


def _name(version) -> str:
    return version.binding  # metric@version, or metric@version/levelL for a discovery or a tree's level


def _shown(value) -> str:
    """A short, safe rendering of a JSON value in an error detail."""
    if isinstance(value, str):
        return repr(value[:40]) + ("..." if len(value) > 40 else "")
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 40:
        return "an integer of more than 40 digits"
    return json.dumps(value)


def _json_int(value, where: str) -> int:
    """A report field: a JSON string of decimal digits (a JSON number is refused, as documented)."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 40:
        return int(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise _bad("malformed_json", f"{where}: a JSON number ({_shown(value)}); send numbers as JSON strings of decimal "
                   f"digits (\"12\", not 12): a GF(2^128) coefficient does not fit a JSON number")
    raise _bad("malformed_json", f"{where}: expected a string of decimal digits, got {_shown(value)}")
