"""The device privacy-budget ledger: boundary, persistence, memoization, periods."""

import math
import os
import threading

import pytest

from cms_core.errors import InvalidParameterError, PrivacyBudgetError
from producer.ledger import PrivacyLedger


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def path(tmp_path):
    return tmp_path / "ledger.db"


def test_ten_charges_of_a_tenth_reach_a_budget_of_one_exactly_then_refuse(path):
    ledger = PrivacyLedger(path, budget=1.0)
    for _ in range(10):
        ledger.charge("m", 0.1)  # 0.1 summed in floats would exceed 1.0 before the 10th
    assert ledger.spent("m") == 1.0
    assert ledger.remaining("m") == 0.0
    assert ledger.charges("m") == 10
    with pytest.raises(PrivacyBudgetError) as info:
        ledger.charge("m", 0.1)
    message = str(info.value)
    for part in ("'m'", "period", "spent 1.0", "requested 0.1", "budget 1.0"):
        assert part in message
    assert (info.value.metric, info.value.spent, info.value.requested, info.value.budget) == ("m", 1.0, 0.1, 1.0)
    assert ledger.spent("m") == 1.0 and ledger.charges("m") == 10  # the refusal recorded nothing


def test_boundary_three_tenths_and_tiny_overshoot(path):
    ledger = PrivacyLedger(path, budget=0.3)
    ledger.charge("m", 0.1)
    ledger.charge("m", 0.1)
    ledger.charge("m", 0.1)  # 0.1 + 0.1 + 0.1 > 0.3 in floats; exactly 0.3 here
    with pytest.raises(PrivacyBudgetError):
        ledger.charge("m", 1e-12)

    other = PrivacyLedger(path.with_name("b.db"), budget=2.0)
    other.charge("m", 1.5)
    with pytest.raises(PrivacyBudgetError):
        other.charge("m", 0.5000000001)  # just above: refused, nothing spent
    other.charge("m", 0.5)  # exactly the rest: allowed
    assert other.remaining("m") == 0.0


def test_budget_is_per_metric(path):
    ledger = PrivacyLedger(path, budget=1.0)
    ledger.charge("a", 1.0)
    ledger.charge("b", 1.0)
    with pytest.raises(PrivacyBudgetError, match="'a'"):
        ledger.charge("a", 0.5)


def test_spend_survives_restart(path):
    clock = Clock()
    first = PrivacyLedger(path, budget=1.0, clock=clock)
    first.charge("m", 0.75)
    first.close()
    second = PrivacyLedger(path, budget=1.0, clock=clock)
    assert second.spent("m") == 0.75
    with pytest.raises(PrivacyBudgetError):
        second.charge("m", 0.5)
    second.charge("m", 0.25)
    second.close()
    # Not even closing cleanly loses a committed charge (another connection sees it at once).
    third = PrivacyLedger(path, budget=1.0, clock=clock)
    fourth = PrivacyLedger(path, budget=1.0, clock=clock)
    with pytest.raises(PrivacyBudgetError):
        third.charge("m", 0.01)
    assert fourth.spent("m") == 1.0


def test_file_is_private_and_holds_no_clear_value_key(path):
    ledger = PrivacyLedger(path, budget=1.0)
    key = b"\x00secret-value-key\xff"
    ledger.charge_or_reuse("m", 0.5, key, b"report-bytes")
    ledger.close()
    assert os.stat(path).st_mode & 0o077 == 0
    blob = b"".join(p.read_bytes() for p in path.parent.iterdir() if p.name.startswith(path.name))
    assert key not in blob and b"secret-value-key" not in blob


def test_memoization_returns_identical_report_without_charging(path):
    ledger = PrivacyLedger(path, budget=1.0)
    first = ledger.charge_or_reuse("m", 0.5, b"value-7", b"report-A")
    assert (first.report, first.memoized, first.spent) == (b"report-A", False, 0.5)
    again = ledger.charge_or_reuse("m", 0.5, b"value-7", b"report-B")
    assert (again.report, again.memoized, again.spent) == (b"report-A", True, 0.5)
    assert ledger.spent("m") == 0.5 and ledger.charges("m") == 1
    assert ledger.memoized("m", b"value-7") == b"report-A"
    assert ledger.memoized("m", b"value-8") is None
    assert ledger.memoized("other", b"value-7") is None
    ledger.close()
    # Survives a restart too: still free, still the same bytes.
    reopened = PrivacyLedger(path, budget=1.0)
    assert reopened.charge_or_reuse("m", 0.5, b"value-7", b"report-C").report == b"report-A"
    assert reopened.spent("m") == 0.5


def test_memoized_resend_is_free_even_when_budget_is_exhausted(path):
    ledger = PrivacyLedger(path, budget=1.0)
    ledger.charge_or_reuse("m", 0.5, b"x", b"R-x")
    ledger.charge_or_reuse("m", 0.5, b"y", b"R-y")
    assert ledger.charge_or_reuse("m", 0.5, b"x", b"new").report == b"R-x"
    with pytest.raises(PrivacyBudgetError):
        ledger.charge_or_reuse("m", 0.5, b"z", b"R-z")
    assert ledger.memoized("m", b"z") is None  # a refused charge remembers nothing


def test_remember_and_memoized_low_level_api(path):
    ledger = PrivacyLedger(path, budget=1.0)
    ledger.charge("m", 0.5)
    ledger.remember("m", b"k", b"first")
    ledger.remember("m", b"k", b"second")  # first one wins
    assert ledger.memoized("m", b"k") == b"first"
    assert ledger.spent("m") == 0.5


def test_period_rollover_resets_budget_and_memo(path):
    clock = Clock(86400 * 100 + 86399.5)  # last half second of period 100
    ledger = PrivacyLedger(path, budget=1.0, period_seconds=86400, clock=clock)
    assert ledger.current_period() == 100
    ledger.charge_or_reuse("m", 1.0, b"v", b"old")
    with pytest.raises(PrivacyBudgetError, match="period 100"):
        ledger.charge("m", 0.1)
    clock.now += 0.5  # exactly the start of period 101
    assert ledger.current_period() == 101
    assert ledger.spent("m") == 0.0 and ledger.remaining("m") == 1.0
    fresh = ledger.charge_or_reuse("m", 1.0, b"v", b"new")
    assert (fresh.report, fresh.memoized) == (b"new", False)
    assert ledger.spent_exact("m", period=100) == 1
    assert ledger.prune(keep_periods=1) == 2  # period 100's spend and memo rows
    assert ledger.spent_exact("m", period=100) == 0
    assert ledger.spent("m") == 1.0


def test_period_seconds_cannot_change_for_a_file(path):
    PrivacyLedger(path, budget=1.0, period_seconds=3600).close()
    with pytest.raises(InvalidParameterError, match="period_seconds"):
        PrivacyLedger(path, budget=1.0, period_seconds=60)
    PrivacyLedger(path, budget=2.0, period_seconds=3600).close()  # the budget may change


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"budget": 0}, "budget"),
        ({"budget": -1.0}, "budget"),
        ({"budget": math.inf}, "budget"),
        ({"budget": math.nan}, "budget"),
        ({"budget": "1"}, "budget"),
        ({"budget": True}, "budget"),
        ({"budget": 1.0, "period_seconds": 0}, "period_seconds"),
        ({"budget": 1.0, "period_seconds": 1.5}, "period_seconds"),
    ],
)
def test_constructor_validation(path, kwargs, name):
    with pytest.raises(InvalidParameterError) as info:
        PrivacyLedger(path, **kwargs)
    assert info.value.name == name


def test_charge_validation(path):
    ledger = PrivacyLedger(path, budget=1.0)
    for metric in ("", None, 3):
        with pytest.raises(InvalidParameterError) as info:
            ledger.charge(metric, 0.1)
        assert info.value.name == "metric"
    for eps in (0, -0.1, math.nan, math.inf, "0.1"):
        with pytest.raises(InvalidParameterError) as info:
            ledger.charge("m", eps)
        assert info.value.name == "epsilon"
    with pytest.raises(InvalidParameterError):
        ledger.prune(0)
    assert ledger.spent("m") == 0.0


def test_concurrent_charges_never_overspend(path):
    ledgers = [PrivacyLedger(path, budget=1.0) for _ in range(4)]  # four connections, one file
    refused = []

    def spend(ledger):
        for _ in range(10):
            try:
                ledger.charge("m", 0.1)
            except PrivacyBudgetError:
                refused.append(1)

    threads = [threading.Thread(target=spend, args=(lg,)) for lg in ledgers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ledgers[0].spent("m") == 1.0
    assert ledgers[0].charges("m") == 10
    assert len(refused) == 30
