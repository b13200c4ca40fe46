"""Device side of discovery (issue 15): random level, level parameters, one epsilon per report on the ledger."""

from __future__ import annotations

import numpy as np
import pytest

from cms_core import wire
from cms_core import discovery as D
from cms_core.errors import InvalidValueError, PrivacyBudgetError
from fleet.discovery import simulate_discovery_messages
from producer.discovery import DiscoveryDevice
from producer.ledger import PrivacyLedger

from ..cms_core.stats_helpers import chi2_critical, chi2_statistic

DOMAIN = D.DiscoveryDomain("strings", alphabet="utf8", max_length=6, symbols_per_level=1)
PARAMS = D.level_params("words", 2, 3.0, DOMAIN)


def test_the_level_is_uniform_and_the_report_is_the_levels_prefix(tmp_path):
    device = DiscoveryDevice("words", DOMAIN, PARAMS)
    levels = [device.report("héllo").level for _ in range(3000)]
    observed = np.bincount(levels, minlength=DOMAIN.levels + 1)[1:]
    assert chi2_statistic(observed, np.full(DOMAIN.levels, 3000 / DOMAIN.levels)) < chi2_critical(DOMAIN.levels - 1, 1e-6)
    report = device.report("héllo", level=3)
    params, batch = wire.decode_message(report.message, {p.fingerprint: p for p in PARAMS})
    assert params is PARAMS[2] and report.fingerprint == PARAMS[2].fingerprint and len(batch) == 1


def test_each_report_charges_the_metric_epsilon_once_whatever_the_level(tmp_path):
    ledger = PrivacyLedger(tmp_path / "ledger.db", budget=9.0)
    device = DiscoveryDevice("words", DOMAIN, PARAMS, ledger=ledger)
    reports = [device.report(word) for word in ("a", "bb", "ccc")]
    assert {r.epsilon_charged for r in reports} == {3.0}
    assert ledger.spent("words") == 9.0 and ledger.charges("words") == 3
    with pytest.raises(PrivacyBudgetError):
        device.report("dddd")
    assert ledger.charges("words") == 3


def test_a_bad_value_is_refused_before_anything_is_charged(tmp_path):
    ledger = PrivacyLedger(tmp_path / "ledger.db", budget=9.0)
    letters = D.DiscoveryDomain("strings", alphabet="abc", max_length=4, symbols_per_level=1)
    device = DiscoveryDevice("w", letters, D.level_params("w", 1, 3.0, letters), ledger=ledger)
    for bad in ("abz", 17, None):
        with pytest.raises(InvalidValueError):
            device.report(bad)
    with pytest.raises(InvalidValueError):
        device.report("ab", level=5)  # a level beyond the declared length
    assert ledger.charges("w") == 0


def test_memoized_repeats_resend_the_same_report_for_free(tmp_path):
    ledger = PrivacyLedger(tmp_path / "ledger.db", budget=100.0)
    device = DiscoveryDevice("words", DOMAIN, PARAMS, ledger=ledger, memoize=True)
    first = device.report("same")
    again = [device.report("same") for _ in range(5)]
    assert all(r.message == first.message and r.level == first.level and r.memoized for r in again)
    assert ledger.charges("words") == 1
    assert not device.report("other").memoized and ledger.charges("words") == 2


def test_integer_devices_report_top_bits():
    domain = D.DiscoveryDomain("integers", bits=64, bits_per_level=16)
    params = D.level_params("ids", 1, 2.0, domain)
    device = DiscoveryDevice("ids", domain, params)
    report = device.report(2**64 - 1, level=1)
    assert wire.decode_message(report.message, {params[0].fingerprint: params[0]})[0] is params[0]
    with pytest.raises(InvalidValueError):
        device.report(2**64)


def test_simulated_frames_carry_one_level_each():
    rng = np.random.default_rng(4)
    frames = list(simulate_discovery_messages(DOMAIN, PARAMS, ["abc"] * 500, rng, frame_size=50))
    known = {p.fingerprint: p for p in PARAMS}
    total = sum(len(wire.decode_message(f, known)[1]) for f in frames)
    assert total == 500 and len({wire.peek_header(f)[1] for f in frames}) == DOMAIN.levels
