"""The formats table (cms_core/formats.py): docs/compatibility.md holds it as generated, and each row's versions
are its codecs' own constants (issue 39)."""

from __future__ import annotations

import re
from pathlib import Path

from agents import state
from cms_core import params, sketch, wire
from cms_core.formats import BY_KEY, FORMATS, tables
from collector.exactly_once import log as idempotency_log
from producer import ledger
from registry import device, lock

ROOT = Path(__file__).resolve().parents[1]


def test_compatibility_doc_holds_the_generated_tables():
    doc = (ROOT / "docs" / "compatibility.md").read_text()
    assert tables() in doc, "regenerate: python -m cms_core.formats (and paste it into docs/compatibility.md)"


def test_every_format_has_a_unique_key_and_a_codec_that_exists():
    assert len(BY_KEY) == len(FORMATS)
    for fmt in FORMATS:
        for path in re.findall(r"(?:^|; )([\w/.]+\.(?:py|ts|c))", fmt.code):
            assert (ROOT / path).is_file(), f"{fmt.key}: {path}"


def _js_constant(path: str, name: str) -> int:
    found = re.search(rf"^(?:export )?const {name} = (\d+);$", (ROOT / path).read_text(), re.M)
    assert found, f"{path}: no {name}"
    return int(found.group(1))


def test_the_versions_in_the_table_are_the_codecs():
    """Each numbered version the table states is the constant its codec writes (and its readers check)."""
    code = {
        "wire": wire.VERSION,
        "fingerprint": params._FINGERPRINT_VERSION,
        "table_value": state._BUNDLE_VERSION,
        "sketch": sketch._FORMAT_VERSION,
        "registry_lock": lock.LOCK_FORMAT,
        "device_config": device.DEVICE_CONFIG_FORMAT,
        "ledger_python": ledger.SCHEMA_VERSION,
        "ledger_js": _js_constant("producer/js/src/ledger.ts", "FORMAT"),
    }
    for key, version in code.items():
        assert BY_KEY[key].writes == BY_KEY[key].reads == str(version), key
    assert (wire.MAGIC, state._BUNDLE_MAGIC, state._CODEC_MAGIC, sketch._MAGIC) == (b"OC", b"SB", b"PC", b"OCMS")
    assert (state._CODEC_VERSION, state._CODEC_VERSION_UNSIGNED, state._CODEC_VERSION_SHUFFLED) == (1, 2, 3)
    assert (state._CODEC_VERSION_NARROW, state._CODEC_VERSION_NARROW_SHUFFLED) == (4, 5)
    assert BY_KEY["table_member"].reads.startswith("1, 2 ") and BY_KEY["table_member"].reads.endswith(", 3, 4, 5")
    assert sorted(state._HEAD_SIZE) == [1, 2, 3, 4, 5]
    assert BY_KEY["table_member"].writes.startswith("4 (") and "`--upgrade-from 0.2`: 1 and 3" in BY_KEY["table_member"].writes
    assert state.UPGRADE_FROM == ("0.2",)
    kinds = (idempotency_log.LISTING, idempotency_log.BATCH_LISTING, idempotency_log.STORED, idempotency_log.FAILED,
             idempotency_log.LEASE)
    assert kinds == (b"F", b"B", b"S", b"X", b"L")
    assert BY_KEY["idempotency_log"].writes.startswith(", ".join(f"`{k.decode()}`" for k in kinds) + "; with ")
    assert BY_KEY["idempotency_log"].reads.startswith(", ".join(f"`{k.decode()}`" for k in kinds) + " (")
    assert idempotency_log.UPGRADE_FROM == state.UPGRADE_FROM
    # The device clients read the device config format the registry writes, and the C example its ledger.
    assert _js_constant("producer/js/src/config.ts", "DEVICE_CONFIG_FORMAT") == device.DEVICE_CONFIG_FORMAT
    assert "format->valuedouble != 1" in (ROOT / "producer/c/example/config.c").read_text()
    assert BY_KEY["ledger_c"].writes == "1" and '"ocms-c-ledger 1\\n"' in (
        ROOT / "producer/c/example/ledger_file.c").read_text()
