"""Every stored and wire format of the project, and what this release writes and reads (issue 39).

One table, the source of docs/compatibility.md's generated tables (``python -m cms_core.formats`` prints
them; tests/test_formats.py checks that the doc holds them and that each row's versions are the codecs'
own constants). tests/golden/RELEASE/ holds a sample of each format a release writes, and
tests/golden/test_golden.py reads every release's samples with the current code (pytest -m upgrade).

The rule for a change: a format that carries a version gets a new version (a new magic, version byte,
type byte or ``"format"``), never a new meaning for an old one; the release that introduces it reads the
previous version too, and writes the new one only where every reader of the previous release is gone
(docs/compatibility.md, "Changing a format"). Data only: nothing here imports the codecs.
"""

from __future__ import annotations

from dataclasses import dataclass

from .version import __version__


@dataclass(frozen=True)
class Format:
    key: str  # the name tests/golden/*/manifest.json uses
    name: str
    told_apart_by: str  # how a reader knows which format (and version) bytes are in
    writes: str  # what this release writes
    reads: str  # what this release reads
    code: str  # where the codec is
    stored_in: str  # where the bytes live
    golden: bool = True  # tests/golden/RELEASE/ holds a sample


FORMATS: tuple[Format, ...] = (
    Format("wire", "Device report message (wire format)", 'magic `OC`, version byte', "1", "1",
           "cms_core/wire.py; producer/js/src/wire.ts; producer/c/src/ocms_client.c",
           "uploads, the source topic, the dead-letter topic, the redo topic, capture files"),
    Format("fingerprint", "Parameter fingerprint (what a report names its parameters by)",
           "nothing a reader sees (a hash); its hashed description starts with a version, so a new one gives every "
           "metric version new fingerprints (binding vectors)", "1", "1",
           "cms_core/params.py (tests/vectors/binding_v1.json)",
           "every wire message, every table value member, registry.lock, device config"),
    Format("table_value", "Table value (changelog record): counts bundle", "magic `SB`, version byte", "1", "1",
           "agents/state.py (`encode_bundle`)", "the worker's changelog topic and table store"),
    Format("table_member", "Member counts inside a bundle", "magic `PC`, version byte",
           "4 (no shuffled report), 5 (some report shuffled under a verified claim): counts of 2 bytes while n < 2^16, "
           "else 4, else 8; with `--upgrade-from 0.2`: 1 and 3 (counts of 4 or 8 bytes), what 0.2.0 reads",
           "1, 2 (its shuffle claims unverified: read as not shuffled), 3, 4, 5", "agents/state.py (`PartialCounts`)",
           "inside each table value"),
    Format("table_key", "Table key (changelog record key)",
           "no version: text `GROUP:PARTITION:WIDTH:RETENTION:BUCKET_START`, group `g<N>[-FINGERPRINT]`; a new "
           "layout must fail this parse", "the one layout", "the one layout", "agents/state.py (`StateKey`)",
           "the worker's changelog topic and table store"),
    Format("idempotency_log", "Idempotency log record",
           "type byte, naming kind and layout: `F` listing, `B` batch listing, `S`/`X` outcome, `L` lease (0.2.0: "
           "a lease is an `F` with no keys); a new layout takes a new type byte", "`F`, `B`, `S`, `X`, `L`; with "
           "`--upgrade-from 0.2`: `F`, `B`, `S`, `X` (a lease as an `F` with no keys), what 0.2.0 reads",
           "`F`, `B`, `S`, `X`, `L` (others skipped, counted, logged)", "collector/exactly_once/log.py",
           "partition 0 of the collectors' idempotency topic"),
    Format("redo_record", "Redo record (a shuffled batch's frame, copied before it is produced)",
           "value: a wire message; `ocms-frame` header: 16 bytes a frame's nonce, 24 bytes a batch's "
           "(nonce, index, count)", "wire 1, 24-byte header", "wire 1, 16- and 24-byte headers",
           "collector/exactly_once/shared.py, log.py (`batch_frame_id`)", "the collectors' redo topic"),
    Format("capture", "Capture file", "no version of its own (kcat's `%R%s`: a 4-byte big-endian length per "
           "message); each message carries its wire version; a later framing starts with a magic read as a "
           "length over 64 MiB, which this release refuses", "length-prefixed wire 1",
           "length-prefixed wire 1", "infra/capture.py; producer/js/src/capture.ts",
           "files of `ocms simulate --out`, `ocms-report --out`, kcat dumps"),
    Format("sketch", "Serialized sketch (library)", "magic `OCMS`, version byte, CRC-32", "1", "1",
           "cms_core/sketch.py (`OCMSSketch.serialize`)", "wherever a library user keeps it"),
    Format("registry", "Metric registry (YAML)", "no version field: `ocms registry check` reads it",
           "(written by people)", "the language of docs/registry.md", "registry/loader.py",
           "deploy/registry.yaml and its tracked-value files"),
    Format("registry_lock", "Registry lock", '`"format"`', "1", "1", "registry/lock.py", "registry.lock"),
    Format("device_config", "Device configuration", '`"format"`', "1", "1",
           "registry/device.py; read by producer/js/src/config.ts and producer/c/example/config.c",
           "`ocms registry device-config`, the collector's `GET /v1/device-config`"),
    Format("ledger_python", "Privacy ledger (Python device)", "SQLite `meta.schema_version`", "1", "1",
           "producer/ledger.py", "the device's ledger file"),
    Format("ledger_js", "Privacy ledger (JS client)", '`"format"` of the JSON under `ocms-ledger`', "1", "1",
           "producer/js/src/ledger.ts", "the browser's localStorage or the Node file"),
    Format("ledger_c", "Privacy ledger (C example)", "first line `ocms-c-ledger 1`", "1", "1",
           "producer/c/example/ledger_file.c", "the device's ledger file", golden=False),
)

BY_KEY = {f.key: f for f in FORMATS}

#: The releases and what each part of one speaks (docs/compatibility.md, "Releases").
RELEASES: tuple[tuple[str, str], ...] = (
    ("unreleased", "member codec versions 4 and 5 (2-byte counts while a member holds fewer than 65,536 reports), "
                   "which 0.2.0 refuses, and the collectors' `L` lease record, which 0.2.0 skips: written only "
                   "without `--upgrade-from 0.2` (CHANGELOG.md, Unreleased: two rolling bounces); a device configuration may name a metric's `min_client_version` (still format "
                   "1: 0.2.0's clients ignore the key, later ones refuse the metric when older); golden "
                   "`tests/golden/unreleased/`"),
    (__version__, "first versioned release: every format above at the version in the table"),
    ("0.1.0", "never tagged: the package said 0.1.0 at every commit before 0.2.0. The last (06baef7) writes every "
              "format above at the same version, so 0.2.0 reads its state; commits before issue 30's bundled "
              "changelog wrote per-key table values that neither reads (CHANGELOG.md, Upgrading)"),
)

COMPONENTS: tuple[tuple[str, str, str], ...] = (
    ("Python package `ocms-pipeline` (`ocms`, worker, collector)", __version__,
     "accepts wire 1; reads and writes the table, idempotency log and redo formats above"),
    ("JS client `ocms-client` (`VERSION`)", __version__, "writes wire 1; reads device config 1"),
    ("C library `libocms_client` (`ocms_version()`, soname `libocms_client.so.0`)", __version__,
     "writes wire 1; its example reads device config 1"),
)


def _row(cells) -> str:
    return "| " + " | ".join(cells) + " |"


def formats_table() -> str:
    """The formats table of docs/compatibility.md (markdown)."""
    lines = [_row(("format", "told apart by", f"this code ({__version__} + Unreleased) writes", "this code reads",
                   "code", "stored in", "golden")),
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for f in FORMATS:
        lines.append(_row((f.name, f.told_apart_by, f.writes, f.reads, f.code, f.stored_in,
                           f"`{f.key}`" if f.golden else "not yet")))
    return "\n".join(lines)


def components_table() -> str:
    """The components table of docs/compatibility.md (markdown)."""
    lines = [_row(("component", "version", "speaks")), "| --- | --- | --- |"]
    lines += [_row(row) for row in COMPONENTS]
    lines += ["", _row(("release", "formats")), "| --- | --- |"]
    lines += [_row(row) for row in RELEASES]
    return "\n".join(lines)


def tables() -> str:
    return components_table() + "\n\n" + formats_table()


if __name__ == "__main__":  # python -m cms_core.formats: the generated tables of docs/compatibility.md
    print(tables())
