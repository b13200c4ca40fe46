"""Golden samples of every stored format (cms_core/formats.py): how this release writes them, and how the
current code reads them back into plain JSON fields.

``write_release(directory)`` writes one sample of each format (and negative controls: samples a reader must
refuse) plus ``manifest.json``: for each sample its format, its file and the fields this release decodes
from it, or the error it is refused with. scripts/write_golden.py RELEASE calls it once per release;
tests/golden/test_golden.py reads every release's directory with the readers below. A reader must keep
reading every sample of every earlier release: when a format changes, its reader here learns the new
version and keeps the old (never regenerate an earlier release's directory).

Everything written is deterministic (fixed reports, nonces, clocks), so a release's directory can be
compared with what its code writes (test_golden.py does for the current release).
"""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
import textwrap
from pathlib import Path
from typing import Callable

#: Fixed parameter sets of the samples (OCMSParams.build keyword arguments; the field by kind and order).
PARAMS = {
    "ocms": {"epsilon": 2.0, "dictionary_size": 16, "hash_range": 4,
             "field": {"kind": "prime", "order": 10007}, "binding": "golden@1", "mechanism": "ocms"},
    "direct": {"epsilon": 2.0, "dictionary_size": 16, "binding": "golden_direct@1", "mechanism": "direct"},
}
REPORTS = [(5, 7, 3), (10006, 0, 0), (1, 9000, 2)]
DIRECT_Z = [0, 15, 4]
LEDGER_CLOCK = 1_700_000_000.0
REGISTRY_YAML = textwrap.dedent("""\
    metrics:
      - name: golden_carrier
        description: Airline (a golden sample of the registry language)
        owner: golden
        categories: [AA, B6, DL]
        epsilon: 1
      - name: golden_count
        description: A small integer
        owner: golden
        integers: 8
        epsilon: 2
    """)


def build_params(name: str):
    from cms_core import BinaryField, OCMSParams, PrimeField

    kwargs = dict(PARAMS[name])
    field = kwargs.pop("field", None)
    if field is not None:
        kwargs["field"] = PrimeField(field["order"]) if field["kind"] == "prime" else BinaryField(field["order"])
    return OCMSParams.build(**kwargs)


def _registry() -> dict[bytes, object]:
    return {p.fingerprint: p for p in (build_params(name) for name in PARAMS)}


# ------------------------------------------------------------------ readers: bytes -> fields (current code)
def read_wire(data: bytes) -> dict:
    from cms_core import wire

    kind, fingerprint, count = wire.peek_header(data)
    _, batch = wire.decode_message(data, _registry())
    return {"kind": kind, "fingerprint": fingerprint.hex(), "count": count,
            "reports": [list(map(int, r)) for r in batch.to_reports()]}


def read_fingerprint(data: bytes) -> dict:
    doc = json.loads(data)
    return {name: build_params(name).fingerprint.hex() for name in doc["params"]}


def read_table_value(data: bytes) -> dict:
    from agents import state

    members = {}
    for fingerprint, raw in state.decode_bundle(data).items():
        counts = state.PartialCounts.from_bytes(raw)
        members[fingerprint] = {"member_version": raw[2], "count_width": raw[3], **counts.to_json()}
    return {"members": members, "offsets": state.member_offsets(data)}


def read_table_key(data: bytes) -> dict:
    from agents.state import StateKey

    return {"keys": [StateKey.decode(line)._asdict() for line in data.decode("ascii").splitlines()]}


def read_idempotency_log(data: bytes) -> dict:
    """Every record applied in order to a fresh :class:`ListingLog`; a record it skips is refused here."""
    from collector.exactly_once import log as idem

    listings = idem.ListingLog(window_s=10**9, max_keys=10**6, clock=lambda: 0.0)
    records = []
    for offset, value in enumerate(bytes.fromhex(h) for h in json.loads(data)["records"]):
        bad = listings.bad_records
        with _captured(idem.log) as warnings:
            listings.apply(offset, value)
        if listings.bad_records != bad:
            raise ValueError("; ".join(warnings))
        if value[:1] in (idem.LISTING, idem.BATCH_LISTING):
            listing = idem.decode_listing(value, offset, 0.0)
            records.append({"kind": value[:1].decode(), "nonce": listing.nonce.hex(), "owner": listing.owner,
                            "incarnation": listing.incarnation.hex(), "partition": listing.partition,
                            "lower": listing.lower, "time": listing.time, "keys": [k.hex() for k in listing.keys],
                            "batch": listing.batch, "redo_lower": listing.redo_lower})
        elif value[:1] == idem.LEASE:
            owner, incarnation, time_s = idem.decode_lease(value)
            records.append({"kind": "L", "owner": owner, "incarnation": incarnation.hex(), "time": time_s})
        else:
            records.append({"kind": value[:1].decode(), "nonce": value[1:].hex()})
    statuses = {nonce.hex(): listing.status for nonce, listing in listings.frames.items()}
    return {"records": records, "statuses": statuses, "clock_s": listings.clock_s}


def read_redo_record(data: bytes) -> dict:
    from cms_core import wire
    from collector.exactly_once.log import FRAME_HEADER, parse_frame_id

    doc = json.loads(data)
    value = bytes.fromhex(doc["value"])
    headers = [(name, bytes.fromhex(h)) for name, h in doc["headers"]]
    frame = dict(headers)[FRAME_HEADER]
    nonce, index, count = parse_frame_id(frame)
    decoded = read_wire(value)
    return {"message": decoded, "frame": {"nonce": nonce.hex(), "index": index, "count": count},
            "shuffled_batch": wire.shuffled_batch_size(headers, decoded["count"]), "timestamp_ms": doc["timestamp_ms"]}


def read_capture(data: bytes, path: Path) -> dict:
    from infra.capture import read_capture as read

    return {"messages": [read_wire(message) for message in read(path)]}


def read_sketch(data: bytes) -> dict:
    from cms_core import OCMSSketch, TrackedValues

    params = build_params("ocms")
    sketch = OCMSSketch.deserialize(data, params, TrackedValues.range(params, 0, params.dictionary_size))
    return {"n": sketch.n, "counts": [int(c) for c in sketch.counts]}


def read_registry(data: bytes, path: Path) -> dict:
    from registry import load_registry

    return {"versions": {v.binding: v.fingerprint.hex() for v in load_registry(path).versions()}}


def read_registry_lock(data: bytes, path: Path) -> dict:
    from registry.lock import read_lock

    return {"versions": {key: entry["fingerprint"] for key, entry in read_lock(path).items()}}


def read_device_config(data: bytes) -> dict:
    """The fields the device clients read (producer/js/src/config.ts, producer/c/example/config.c); they
    refuse any ``format`` but the one they know, as this reader does."""
    from registry.device import DEVICE_CONFIG_FORMAT

    doc = json.loads(data)
    if doc.get("format") != DEVICE_CONFIG_FORMAT:
        raise ValueError(f"device config format {doc.get('format')!r}: this release reads {DEVICE_CONFIG_FORMAT}")
    fields = {"format": doc["format"], "metrics": {f"{m['name']}@{m['version']}": m["fingerprint"]
                                                   for m in doc["metrics"]}}
    needs = {m["name"]: m["min_client_version"] for m in doc["metrics"] if "min_client_version" in m}
    return {**fields, "min_client_version": needs} if needs else fields  # the key is newer than 0.2.0


def read_ledger_python(data: bytes, path: Path) -> dict:
    """Read from a copy: opening a ledger writes to it (WAL files beside it), and a golden file never changes."""
    import tempfile

    from producer.ledger import PrivacyLedger

    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / path.name
        copy.write_bytes(data)
        with PrivacyLedger(copy, budget=4.0, clock=lambda: LEDGER_CLOCK) as ledger:
            return {"spent": str(ledger.spent_exact("golden")), "charges": ledger.charges("golden")}


JS_LEDGER_TOOL = "test/tools/golden_ledger.mjs"  # in producer/js: writes and reads with the client's PrivacyLedger


def read_ledger_js(data: bytes, path: Path) -> dict:
    """The JS client's own ledger reads the document (node; producer/js built)."""
    from producer.jsclient import ensure_built, node

    ensure_built()
    return json.loads(node(JS_LEDGER_TOOL, "read", path.resolve()).stdout)


#: format key -> reader(bytes) or reader(bytes, path) (those that read a file by its path).
READERS: dict[str, Callable] = {
    "wire": read_wire, "fingerprint": read_fingerprint, "table_value": read_table_value,
    "table_key": read_table_key, "idempotency_log": read_idempotency_log, "redo_record": read_redo_record,
    "capture": read_capture, "sketch": read_sketch, "registry": read_registry, "registry_lock": read_registry_lock,
    "device_config": read_device_config, "ledger_python": read_ledger_python, "ledger_js": read_ledger_js,
}
#: Members are read inside their table value (tests/golden/*/table_value.bin holds versions 1 and 2).
READS_AS = {"table_member": "table_value"}
PATH_READERS = {"capture", "registry", "registry_lock", "ledger_python", "ledger_js"}
#: Formats whose reader runs node (tests mark those samples integration).
NEEDS_NODE = {"ledger_js"}


def read_sample(fmt: str, path: Path) -> dict:
    reader = READERS[READS_AS.get(fmt, fmt)]
    data = path.read_bytes()
    return reader(data, path) if fmt in PATH_READERS else reader(data)


class _captured:
    """The warnings a logger emits inside the block, as text."""

    def __init__(self, logger: logging.Logger):
        self.logger, self.lines = logger, []
        self.handler = logging.Handler(logging.WARNING)
        self.handler.emit = lambda record: self.lines.append(record.getMessage())

    def __enter__(self) -> list[str]:
        self.logger.addHandler(self.handler)
        return self.lines

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self.handler)


# ------------------------------------------------------------------ the writer: this release's samples
def _samples(upgrade_from: str | None) -> list[tuple[str, str, bytes, dict | None]]:
    """(format, file name, bytes, refused) of every sample; refused: None, or the error a reader raises. Table
    members are written as a worker started with ``--upgrade-from upgrade_from`` writes them (None: without)."""
    from agents import state
    from cms_core import OCMSSketch, Report, ReportBatch, TrackedValues, wire
    from collector.exactly_once import log as idem

    ocms, direct = build_params("ocms"), build_params("direct")
    batch = ReportBatch.from_reports(ocms, [Report(*r) for r in REPORTS])
    direct_batch = ReportBatch.from_reports(direct, [Report(0, 1, z) for z in DIRECT_Z])
    report = wire.encode_report(ocms, Report(*REPORTS[0]))
    frame = wire.encode_frame(ocms, batch)
    direct_frame = wire.encode_frame(direct, direct_batch)
    out = [("wire", "wire_report.bin", report, None), ("wire", "wire_frame.bin", frame, None),
           ("wire", "wire_direct_frame.bin", direct_frame, None),
           ("wire", "wire_version2_refused.bin", report[:2] + b"\x02" + report[3:],
            {"error": "UnsupportedVersionError", "match": "version 2"})]
    out.append(("fingerprint", "fingerprint.json", json.dumps({"params": PARAMS}, indent=1).encode(), None))

    members = {
        ocms.fingerprint.hex(): state.PartialCounts(3, [1, 0, 2, 0], last_offset=41).to_bytes(),
        direct.fingerprint.hex(): state.PartialCounts(5, [2, 3], last_offset=7, shuffled=5, shuffle_min=3).to_bytes(),
        "00" * 8: state.PartialCounts(2**32 + 5, [2**32, 5], last_offset=2**40).to_bytes(),
    }
    bundle = state.encode_bundle(members)
    out.append(("table_value", "table_value.bin", bundle, None))
    member = members[ocms.fingerprint.hex()]
    out.append(("table_value", "table_value_version2_refused.bin", bundle[:2] + b"\x02" + bundle[3:],
                {"error": "SerializationError", "match": "not a counts bundle v1"}))
    unknown = 4 if upgrade_from == "0.2" else 6  # 0.2.0's control named version 4, which later code reads (LEARNED)
    bad_member = state.encode_bundle({ocms.fingerprint.hex(): member[:2] + bytes([unknown]) + member[3:]})
    out.append(("table_member", f"table_member_version{unknown}_refused.bin", bad_member,
                {"error": "SerializationError", "match": "not a PartialCounts v1/v2/v3"}))
    keys = [state.StateKey(f"g3-{ocms.fingerprint.hex()}", 2, 60, 3600, 1_700_000_040),
            state.StateKey("g1", 0, state.TOTAL_WIDTH, 0, 0)]
    out.append(("table_key", "table_key.txt", b"".join(k.encode() + b"\n" for k in keys), None))

    nonce_a, nonce_b, nonce_c = bytes(range(16)), bytes(range(16, 32)), bytes(range(32, 48))
    incarnation = b"\x01" * 8
    key_a = idem.key_hash(b"s" * 32, "golden", "upload-1")
    key_b = idem.key_hash(b"s" * 32, "golden", "upload-2")
    records = [idem.encode_listing(nonce_a, "collector-1", incarnation, 3, 100, 1_700_000_000, [key_a]),
               idem.encode_batch_listing(nonce_b, "collector-1", incarnation, 1, 50, 7, 1_700_000_001, [key_b]),
               idem.encode_listing(nonce_c, "collector-2", incarnation, 0, 9, 1_700_000_002, []),  # a 0.2.0 lease
               idem.encode_outcome(nonce_a, True), idem.encode_outcome(nonce_b, False)]
    if upgrade_from is None:  # a lease record of its own (L) since 0.2.0
        records.append(idem.encode_lease_record("collector-2", incarnation, 1_700_000_003))
    out.append(("idempotency_log", "idempotency_log.json",
                json.dumps({"records": [r.hex() for r in records]}, indent=1).encode(), None))
    out.append(("idempotency_log", "idempotency_log_unknown_kind_refused.json",
                json.dumps({"records": [(b"Z" + records[3][1:]).hex()]}, indent=1).encode(),
                {"error": "ValueError", "match": "unknown record kind b'Z'"}))

    redo = {"value": frame.hex(), "timestamp_ms": 1_700_000_000_123,
            "headers": [[idem.FRAME_HEADER, idem.batch_frame_id(nonce_b, 0, 2).hex()],
                        [wire.SHUFFLE_HEADER, b"6".hex()]]}
    out.append(("redo_record", "redo_record.json", json.dumps(redo, indent=1).encode(), None))

    capture = b"".join(len(m).to_bytes(4, "big") + m for m in (report, frame, direct_frame))
    out.append(("capture", "capture.ocap", capture, None))
    out.append(("capture", "capture_bad_length_refused.ocap", b"OCAP" + capture,
                {"error": "CaptureFormatError", "match": "exceeds"}))

    sketch = OCMSSketch(ocms, TrackedValues.range(ocms, 0, ocms.dictionary_size))
    sketch.update(batch)
    raw = sketch.serialize()
    out.append(("sketch", "sketch.bin", raw, None))
    out.append(("sketch", "sketch_version2_refused.bin", raw[:4] + b"\x02" + raw[5:],
                {"error": "SerializationError", "match": "unsupported sketch format version 2"}))
    out.append(("sketch", "sketch_corrupt_refused.bin", raw[:-5] + bytes([raw[-5] ^ 1]) + raw[-4:],
                {"error": "SerializationError", "match": "checksum mismatch"}))
    return out


#: What the registry language has said since 0.2.0 (the unreleased samples' registry says it too).
MIN_CLIENT_YAML = '    min_client_version: "0.2.0"\n'


def _registry_samples(directory: Path, upgrade_from: str | None) -> list[tuple[str, str, dict | None]]:
    """registry.yaml, its lock and device config, written by this release's code in ``directory`` (in the
    language of release ``upgrade_from``: without ``min_client_version`` for 0.2)."""
    from registry import load_registry
    from registry.device import device_config
    from registry.lock import write_lock

    path = directory / "registry.yaml"
    path.write_text(REGISTRY_YAML + (MIN_CLIENT_YAML if upgrade_from is None else ""), encoding="utf-8")
    registry = load_registry(path)
    write_lock(registry, directory / "registry.lock")
    (directory / "device_config.json").write_text(json.dumps(device_config(registry), indent=1) + "\n")
    lock = json.loads((directory / "registry.lock").read_text())
    (directory / "registry_lock_format2_refused.lock").write_text(json.dumps({**lock, "format": 2}, indent=1))
    config = json.loads((directory / "device_config.json").read_text())
    (directory / "device_config_format2_refused.json").write_text(json.dumps({**config, "format": 2}, indent=1))
    return [("registry", "registry.yaml", None), ("registry_lock", "registry.lock", None),
            ("registry_lock", "registry_lock_format2_refused.lock", {"error": "LockFileError", "match": "format"}),
            ("device_config", "device_config.json", None),
            ("device_config", "device_config_format2_refused.json",
             {"error": "ValueError", "match": "device config format 2"})]


def _ledger_sample(directory: Path) -> list[tuple[str, str, dict | None]]:
    from producer.ledger import PrivacyLedger

    path = directory / "ledger.sqlite"
    with PrivacyLedger(path, budget=4.0, clock=lambda: LEDGER_CLOCK) as ledger:
        ledger.charge("golden", 1.0)
        ledger.charge("golden", 0.5)
    db = sqlite3.connect(path)  # one file, no journal beside it (the ledger turns WAL on again when it opens it)
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("VACUUM")
    db.close()
    return [("ledger_python", "ledger.sqlite", None)]


def _ledger_js_sample(directory: Path) -> list[tuple[str, str, dict | None]]:
    from producer.jsclient import ensure_built, node

    ensure_built()
    text = node(JS_LEDGER_TOOL, "write").stdout.decode()
    (directory / "ledger_js.json").write_text(text)
    (directory / "ledger_js_format2_refused.json").write_text(json.dumps({**json.loads(text), "format": 2}) + "\n")
    return [("ledger_js", "ledger_js.json", None),
            ("ledger_js", "ledger_js_format2_refused.json", {"error": "OCMSError", "match": "has format 2, not 1"})]


#: Samples whose bytes are not a function of their content alone (SQLite pages, a random memo key): compared
#: by their fields.
NOT_BYTE_EXACT = {"ledger.sqlite", "ledger_js.json", "ledger_js_format2_refused.json"}


#: The directory of what this code writes beyond the last release (no --upgrade-from): the next release renames
#: it to its version (scripts/write_golden.py; docs/compatibility.md, Golden files).
UNRELEASED = "unreleased"
#: The --upgrade-from with which this code writes a release's samples byte for byte (the first rolling bounce
#: writes exactly what the previous release wrote); the unreleased directory is written without one.
UPGRADE_FROM = {"0.2.0": "0.2", UNRELEASED: None}
#: Negative controls of an earlier release that this code reads, and why: each names a version that release did
#: not know and a later one defined (test_golden reads them as samples: they must decode).
LEARNED = {("0.2.0", "table_member_version4_refused.bin"):
           "member codec v4 (2-byte counts) is read since the release after 0.2.0 (CHANGELOG.md, Unreleased)"}


def write_release(directory: Path, release: str, with_node: bool = True) -> dict:
    """Write this code's samples of every format and ``manifest.json`` into ``directory`` (replaced whole: written
    beside it first, so a failed run leaves no half directory), as it writes them for ``release``
    (``UPGRADE_FROM``). ``with_node=False`` leaves out the samples that node writes (the JS ledger's)."""
    from agents.state import members_written_for

    final, directory = directory, directory.with_name(directory.name + ".partial")
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    entries = []
    with members_written_for(UPGRADE_FROM[release]):
        written = _samples(UPGRADE_FROM[release])
    for fmt, name, data, refused in written:
        (directory / name).write_bytes(data)
        entries.append((fmt, name, refused))
    entries += _registry_samples(directory, UPGRADE_FROM[release])
    entries += _ledger_sample(directory)
    if with_node:
        entries += _ledger_js_sample(directory)
    samples = []
    for fmt, name, refused in entries:
        sample = {"format": fmt, "file": name}
        if refused is None:
            sample["expect"] = read_sample(fmt, directory / name)
        else:
            sample["refused"] = refused
        samples.append(sample)
    manifest = {"release": release, "written_by": "scripts/write_golden.py", "samples": samples}
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    if final.exists():
        shutil.rmtree(final)
    directory.rename(final)
    return manifest
