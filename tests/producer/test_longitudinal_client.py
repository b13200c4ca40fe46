"""The Python device's longitudinal reports (issue 38): registry mode, reporter, ledger charges, plan."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from cms_core import longitudinal as L
from cms_core.errors import InvalidParameterError, PrivacyBudgetError
from cms_core.wire import decode_message
from producer import longitudinal as PL
from producer.ledger import PrivacyLedger
from producer.reporter import DeviceReporter
from registry.device import device_config
from registry.lock import compare, lock_entries

from tests.registry.helpers import load, problems, run, write

from .test_reporter import FakeProducer

REGISTRY_TEXT = """
metrics:
  - name: os_version
    description: OS version of the device
    owner: a@example.com
    categories: [a, b, c, d, e, f, g, h, i, j, k, l]
    epsilon: 1
    lifetime_epsilon: 2
    versions:
      - version: 1
  - name: screen
    description: Screen size class
    owner: a@example.com
    categories: [s, m, l]
    epsilon: 1
    versions:
      - version: 1
      - version: 2
        lifetime_epsilon: 3
        mechanism: direct
"""


def test_registry_longitudinal_mode_is_parsed_per_version(tmp_path):
    reg = load(tmp_path, REGISTRY_TEXT)
    os_v = reg.metric("os_version").latest
    assert os_v.longitudinal.lifetime_epsilon == 2.0 and os_v.params.epsilon == 1.0
    assert os_v.longitudinal.report is os_v.params  # the worker decodes the report params unchanged
    screen = reg.metric("screen")
    assert screen.version(1).longitudinal is None
    assert screen.version(2).longitudinal.report.mechanism == "direct"
    described = os_v.describe()["longitudinal"]
    assert described["lifetime_epsilon"] == 2.0 and described["epsilon_per_report"] == 1.0
    config = {m["name"]: m for m in device_config(reg)["metrics"]}
    assert config["os_version"]["longitudinal"]["report_threshold"] == str(L.report_threshold(os_v.longitudinal))
    assert "longitudinal" in config["screen"]  # its newest live version is longitudinal


@pytest.mark.parametrize("value, says", [
    (0.5, "must be above the per-report epsilon 1.0"),
    (1, "must be above the per-report epsilon 1.0"),
    ("'2'", "must be a number"),
    (200, "must be <= 100"),
])
def test_registry_refuses_a_bad_lifetime_epsilon_naming_it(tmp_path, value, says):
    text = REGISTRY_TEXT.replace("lifetime_epsilon: 2", f"lifetime_epsilon: {value}")
    found = problems(tmp_path, text)
    assert len(found) == 1 and "lifetime_epsilon" in found[0] and says in found[0] and "os_version" in found[0]


def test_lock_sees_a_lifetime_epsilon_added_to_a_published_version(tmp_path):
    reg = load(tmp_path, REGISTRY_TEXT)
    locked = lock_entries(reg)
    edited = load(tmp_path, REGISTRY_TEXT.replace("lifetime_epsilon: 2", "lifetime_epsilon: 2.5"))
    changes = compare(edited, locked).changed
    assert len(changes) == 1 and "lifetime_epsilon 2.0" in str(changes[0])


def _report_all(reg, ledger, sends, **kwargs):
    producer = FakeProducer()

    async def go():
        async with DeviceReporter(reg, bootstrap_servers="x:9092", topic="t", device_key=b"k", ledger=ledger,
                                  producer_factory=producer, **kwargs) as reporter:
            return [await reporter.report(metric, value) for metric, value in sends]

    return asyncio.run(go()), producer


def test_ledger_charges_eps_inf_per_new_hashed_value_and_nothing_for_repeats(tmp_path):
    reg = load(tmp_path, REGISTRY_TEXT)
    ledger = PrivacyLedger(tmp_path / "ledger.db", budget=100.0)
    sends = [("os_version", "c")] * 30 + [("screen", "m")] * 10
    deliveries, producer = _report_all(reg, ledger, sends)
    charged = [d.epsilon_charged for d in deliveries]
    assert charged[0] == 2.0 and set(charged[1:30]) == {0.0}  # one memoized value: eps_inf once
    assert charged[30] == 3.0 and set(charged[31:]) == {0.0}
    assert ledger.spent("os_version") == 2.0 and ledger.spent("screen") == 3.0
    # every report of one value carries the same hash (a0, a1) and is a fresh second round of one memoized response
    lp = reg.metric("os_version").latest.longitudinal
    reports = [decode_message(call[1], {lp.report.fingerprint: lp.report})[1].to_reports()[0]
               for call in producer.calls[:30]]
    assert len({(r.a0, r.a1) for r in reports}) == 1
    secret = PL.device_secret(ledger)
    assert (reports[0].a0, reports[0].a1) == L.device_hash(lp, secret)
    zs = np.bincount([r.z for r in reports], minlength=lp.g)
    assert zs.max() < 30  # the second round is fresh: not every report is the same (P = p2^29 ~ 2e-5)
    # a value changing: at most g hashed values are ever charged
    more = [("os_version", name) for name in "abcdefghijkl"] * 2
    _report_all(reg, ledger, more)
    distinct = {L.hashed_value(lp, secret, i) for i in range(12)} | {L.hashed_value(lp, secret, 2)}
    assert PL.lifetime_values(ledger, "os_version") == len(distinct) <= lp.g
    assert ledger.spent("os_version") == pytest.approx(2.0 * len(distinct))


def test_over_budget_nothing_sent_and_nothing_remembered(tmp_path):
    reg = load(tmp_path, REGISTRY_TEXT)
    ledger = PrivacyLedger(tmp_path / "ledger.db", budget=1.5)
    with pytest.raises(PrivacyBudgetError):
        _report_all(reg, ledger, [("os_version", "a")])
    assert PL.lifetime_values(ledger, "os_version") == 0 and ledger.spent("os_version") == 0


def test_without_a_ledger_a_secret_is_needed(tmp_path):
    reg = load(tmp_path, REGISTRY_TEXT)
    with pytest.raises(InvalidParameterError, match="device_secret"):
        _report_all(reg, None, [("os_version", "a")])
    deliveries, _ = _report_all(reg, None, [("os_version", "a")], device_secret=bytes(32))
    assert deliveries[0].epsilon_charged == 2.0


def test_the_secret_lives_in_the_ledger_and_survives_reopening(tmp_path):
    path = tmp_path / "ledger.db"
    first = PL.device_secret(PrivacyLedger(path, budget=10.0))
    assert len(first) == 32 and PL.device_secret(PrivacyLedger(path, budget=10.0)) == first
    raw = path.read_bytes()
    assert b"os_version" not in raw  # nothing about values yet; digests only once charged


def test_plan_prints_both_budgets_and_the_single_day_variance(tmp_path, capsys):
    path = write(tmp_path, REGISTRY_TEXT)
    status, out, _ = run(capsys, "plan", "--registry", str(path))
    assert status == 0
    assert "1 (life 2)" in out and "eps_inf = 2 for the whole life of a constant value" in out
    assert "the same as one-shot reports at eps_1 (x1.00)" in out
    status, out, _ = run(capsys, "plan", "--registry", str(path), "--json")
    record = [m for m in json.loads(out)["metrics"] if m["metric"] == "os_version"][0]
    assert record["longitudinal"]["lifetime_epsilon"] == 2.0 and record["longitudinal"]["epsilon_per_report"] == 1.0
    assert record["longitudinal"]["max_lifetime_epsilon"] == 2.0 * record["params"]["hash_range"]


def test_the_single_metric_flags_take_a_lifetime_epsilon(capsys):
    from registry.flags import metrics_from_flags

    version = metrics_from_flags(epsilon=1, dictionary_size=100, lifetime_epsilon=2, extra_epsilon=(2,)).metrics[0]
    assert version.latest.longitudinal.lifetime_epsilon == 2.0 and version.versions[0].longitudinal is None
    with pytest.raises(InvalidParameterError) as err:
        metrics_from_flags(epsilon=1, dictionary_size=100, lifetime_epsilon=1)
    assert err.value.name == "--lifetime-epsilon"
    status, out, _ = run(capsys, "plan", "-e", "1", "-d", "1000", "--lifetime-epsilon", "2", "--json")
    assert status == 0 and json.loads(out)["longitudinal"]["lifetime_epsilon"] == 2.0


def test_a_discoverable_metric_cannot_be_longitudinal(tmp_path):
    text = """
metrics:
  - name: words
    description: discoverable strings
    owner: a@example.com
    strings: true
    tracked: [the]
    epsilon: 2
    lifetime_epsilon: 4
    discovery: {alphabet: "abcdefghijklmnopqrstuvwxyz", max_length: 4}
"""
    found = problems(tmp_path, text)
    assert len(found) == 1 and "lifetime_epsilon" in found[0] and "discovery" in found[0]
