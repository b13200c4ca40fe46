"""The device's privacy-budget ledger: epsilon spent per metric per period, on disk.

Every report a device sends costs ``params.epsilon``; k reports about the same
metric cost k * epsilon by sequential composition. The ledger bounds that sum
per metric over aligned time windows (periods) of ``period_seconds``: period
index = floor(now / period_seconds). A charge that would take a metric's
spend in the current period above ``budget`` is refused with
:class:`~cms_core.errors.PrivacyBudgetError` *before* anything is sent.

Exactness: epsilons are accounted as exact rationals of their shortest decimal
spelling (``Fraction(repr(0.1)) == 1/10``), so ten charges of 0.1 reach a
budget of 1.0 exactly and the charge that reaches the budget is allowed; the
next one is refused. No float tolerance is involved.

Durability: SQLite (stdlib ``sqlite3``), WAL journal with ``synchronous=FULL``,
one ``BEGIN IMMEDIATE`` transaction per charge. A charge is committed to disk
before the reporter enqueues its report, so a crash can lose a report (the
epsilon stays spent: conservative) but never lose a charge or double-spend;
several processes sharing one ledger file serialize on the write lock.

Memoization: the ledger can remember the report it sent for (metric, period,
value). Re-sending the same report bytes reveals nothing beyond the first send
(post-processing), so a memoized re-send is free. Value keys are never stored
in the clear: the table holds a keyed BLAKE2b digest (a random 32-byte key
created with the file). The file is still as sensitive as the values it
memoizes (small dictionaries can be brute-forced with the key in the same
file), so it is created with mode 0600. See docs/device.md.
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Callable

from cms_core.errors import InvalidParameterError, PrivacyBudgetError

SCHEMA_VERSION = 1
_DIGEST_PERSON = b"ocms-memo-v1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS spend (
    metric TEXT NOT NULL,
    period INTEGER NOT NULL,
    spent TEXT NOT NULL,          -- exact rational "num/den"
    charges INTEGER NOT NULL,
    PRIMARY KEY (metric, period)
);
CREATE TABLE IF NOT EXISTS memo (
    metric TEXT NOT NULL,
    period INTEGER NOT NULL,
    value_digest BLOB NOT NULL,   -- keyed BLAKE2b of the value key, never the value
    report BLOB NOT NULL,
    PRIMARY KEY (metric, period, value_digest)
);
"""


def exact_epsilon(epsilon, name: str = "epsilon") -> Fraction:
    """An epsilon as an exact rational (floats by their shortest decimal spelling)."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, Fraction, Decimal)):
        raise InvalidParameterError(name, epsilon, "must be a real number")
    if isinstance(epsilon, float):
        if math.isnan(epsilon) or math.isinf(epsilon):
            raise InvalidParameterError(name, epsilon, "must be finite")
        value = Fraction(repr(epsilon))
    else:
        if isinstance(epsilon, Decimal) and not epsilon.is_finite():
            raise InvalidParameterError(name, epsilon, "must be finite")
        value = Fraction(epsilon)
    if value <= 0:
        raise InvalidParameterError(name, epsilon, "must be > 0")
    return value


def _check_metric(metric) -> str:
    if not isinstance(metric, str) or not metric:
        raise InvalidParameterError("metric", metric, "must be a non-empty string")
    return metric


def _fmt(value: Fraction) -> str:
    """Shortest readable spelling of an exact spend (decimal when it terminates)."""
    f = float(value)
    return repr(f) if Fraction(repr(f)) == value else f"{value} (~{f:.6g})"


@dataclass(frozen=True)
class Charge:
    """Outcome of :meth:`PrivacyLedger.charge_or_reuse`."""

    report: bytes
    memoized: bool
    period: int
    spent: float


class PrivacyLedger:
    """Epsilon spent per metric per period, persisted in a SQLite file.

    Args:
        path: the ledger file (created with mode 0600 if missing).
        budget: the most epsilon one metric may spend in one period (> 0, finite).
        period_seconds: period length; periods are the aligned windows
            floor(now / period_seconds). Fixed for the life of the file.
        clock: returns the current time in seconds (tests inject one).

    Thread-safe (one connection behind a lock); several processes may share the file.
    """

    def __init__(self, path, budget: float, period_seconds: int = 86400, clock: Callable[[], float] = time.time):
        self.budget_exact = exact_epsilon(budget, "budget")
        self.budget = float(self.budget_exact)
        if isinstance(period_seconds, bool) or not isinstance(period_seconds, int) or period_seconds < 1:
            raise InvalidParameterError("period_seconds", period_seconds, "must be an integer >= 1")
        if not callable(clock):
            raise InvalidParameterError("clock", clock, "must be callable")
        self.period_seconds = period_seconds
        self.clock = clock
        self.path = Path(path)
        if not self.path.exists():
            os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False, timeout=30.0)
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._init_schema()
        except BaseException:
            self._conn.close()
            raise

    # ----------------------------------------------------------------- setup
    def _init_schema(self) -> None:
        with self._transaction() as cur:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    cur.execute(statement)
            rows = dict(cur.execute("SELECT key, value FROM meta").fetchall())
            if not rows:
                cur.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                cur.execute("INSERT INTO meta VALUES ('period_seconds', ?)", (str(self.period_seconds),))
                cur.execute("INSERT INTO meta VALUES ('memo_key', ?)", (secrets.token_bytes(32),))
                rows = dict(cur.execute("SELECT key, value FROM meta").fetchall())
        if str(rows.get("schema_version")) != str(SCHEMA_VERSION):
            raise InvalidParameterError("path", str(self.path), f"ledger schema {rows.get('schema_version')!r} is not {SCHEMA_VERSION}")
        stored = int(rows["period_seconds"])
        if stored != self.period_seconds:
            # Re-aligning periods would let spend recorded in one layout escape the other.
            raise InvalidParameterError(
                "period_seconds", self.period_seconds, f"this ledger file was created with period_seconds={stored}"
            )
        self._memo_key = bytes(rows["memo_key"])

    class _Tx:
        def __init__(self, ledger: "PrivacyLedger"):
            self.ledger = ledger

        def __enter__(self):
            self.ledger._lock.acquire()
            try:
                self.cur = self.ledger._conn.cursor()
                self.cur.execute("BEGIN IMMEDIATE")
            except BaseException:
                self.ledger._lock.release()
                raise
            return self.cur

        def __exit__(self, exc_type, exc, tb):
            try:
                self.ledger._conn.execute("ROLLBACK" if exc_type else "COMMIT")
            finally:
                self.ledger._lock.release()
            return False

    def _transaction(self) -> "PrivacyLedger._Tx":
        if self._conn is None:
            raise InvalidParameterError("ledger", str(self.path), "is closed")
        return PrivacyLedger._Tx(self)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "PrivacyLedger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --------------------------------------------------------------- periods
    def current_period(self) -> int:
        return math.floor(self.clock() / self.period_seconds)

    def period_bounds(self, period: int) -> tuple[datetime, datetime]:
        start = period * self.period_seconds
        return (
            datetime.fromtimestamp(start, timezone.utc),
            datetime.fromtimestamp(start + self.period_seconds, timezone.utc),
        )

    def _period_text(self, period: int) -> str:
        start, end = self.period_bounds(period)
        return f"{period} [{start.isoformat()} .. {end.isoformat()})"

    # ---------------------------------------------------------------- spend
    @staticmethod
    def _spent_in(cur, metric: str, period: int) -> tuple[Fraction, int]:
        row = cur.execute("SELECT spent, charges FROM spend WHERE metric = ? AND period = ?", (metric, period)).fetchone()
        return (Fraction(row[0]), int(row[1])) if row else (Fraction(0), 0)

    def _charge_locked(self, cur, metric: str, epsilon: Fraction, requested, period: int) -> Fraction:
        spent, charges = self._spent_in(cur, metric, period)
        total = spent + epsilon
        if total > self.budget_exact:
            err = PrivacyBudgetError(
                f"privacy budget exhausted for metric {metric!r} in period {self._period_text(period)}: "
                f"spent {_fmt(spent)}, requested {requested!r}, budget {self.budget!r} "
                f"(remaining {_fmt(self.budget_exact - spent)})"
            )
            err.metric, err.period, err.spent = metric, period, float(spent)
            err.requested, err.budget = float(epsilon), self.budget
            raise err
        cur.execute(
            "INSERT INTO spend (metric, period, spent, charges) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (metric, period) DO UPDATE SET spent = excluded.spent, charges = excluded.charges",
            (metric, period, str(total), charges + 1),
        )
        return total

    def charge(self, metric: str, epsilon: float) -> None:
        """Spend ``epsilon`` on ``metric`` in the current period, or raise PrivacyBudgetError.

        Spend + epsilon == budget is allowed; anything above is refused and
        nothing is recorded. Committed durably before returning.
        """
        _check_metric(metric)
        exact = exact_epsilon(epsilon)
        with self._transaction() as cur:
            self._charge_locked(cur, metric, exact, epsilon, self.current_period())

    def charge_or_reuse(self, metric: str, epsilon: float, value_key: bytes | None, report: bytes) -> Charge:
        """Atomically: the memoized report for ``value_key`` (free), or charge and remember ``report``.

        With ``value_key=None`` this is :meth:`charge` returning ``report``.
        One transaction: a crash either records charge and memo together or neither.
        """
        _check_metric(metric)
        exact = exact_epsilon(epsilon)
        report = bytes(report)
        digest = self._digest(value_key) if value_key is not None else None
        with self._transaction() as cur:
            period = self.current_period()
            if digest is not None:
                row = cur.execute(
                    "SELECT report FROM memo WHERE metric = ? AND period = ? AND value_digest = ?",
                    (metric, period, digest),
                ).fetchone()
                if row is not None:
                    spent, _ = self._spent_in(cur, metric, period)
                    return Charge(bytes(row[0]), True, period, float(spent))
            total = self._charge_locked(cur, metric, exact, epsilon, period)
            if digest is not None:
                cur.execute("INSERT INTO memo VALUES (?, ?, ?, ?)", (metric, period, digest, report))
            return Charge(report, False, period, float(total))

    def spent(self, metric: str) -> float:
        """Epsilon spent on ``metric`` in the current period."""
        return float(self.spent_exact(metric))

    def spent_exact(self, metric: str, period: int | None = None) -> Fraction:
        _check_metric(metric)
        with self._transaction() as cur:
            return self._spent_in(cur, metric, self.current_period() if period is None else period)[0]

    def remaining(self, metric: str) -> float:
        """Epsilon ``metric`` may still spend in the current period."""
        return float(self.budget_exact - self.spent_exact(metric))

    def charges(self, metric: str) -> int:
        """Number of charged (non-memoized) reports for ``metric`` in the current period."""
        _check_metric(metric)
        with self._transaction() as cur:
            return self._spent_in(cur, metric, self.current_period())[1]

    # ----------------------------------------------------------- memoization
    def _digest(self, value_key: bytes) -> bytes:
        if not isinstance(value_key, (bytes, bytearray, memoryview)):
            raise InvalidParameterError("value_key", type(value_key).__name__, "must be bytes")
        return hashlib.blake2b(bytes(value_key), digest_size=32, key=self._memo_key, person=_DIGEST_PERSON).digest()

    def memoized(self, metric: str, value_key: bytes) -> bytes | None:
        """The report remembered for this value in the current period, if any."""
        _check_metric(metric)
        digest = self._digest(value_key)
        with self._transaction() as cur:
            row = cur.execute(
                "SELECT report FROM memo WHERE metric = ? AND period = ? AND value_digest = ?",
                (metric, self.current_period(), digest),
            ).fetchone()
        return bytes(row[0]) if row else None

    def remember(self, metric: str, value_key: bytes, report_bytes: bytes) -> None:
        """Remember ``report_bytes`` for this value in the current period (first one wins).

        Does not charge: call :meth:`charge` first, or use :meth:`charge_or_reuse`.
        """
        _check_metric(metric)
        digest = self._digest(value_key)
        with self._transaction() as cur:
            cur.execute(
                "INSERT OR IGNORE INTO memo VALUES (?, ?, ?, ?)",
                (metric, self.current_period(), digest, bytes(report_bytes)),
            )

    # ---------------------------------------------------------------- pruning
    def prune(self, keep_periods: int = 1) -> int:
        """Delete spend and memo rows older than the last ``keep_periods`` periods; returns rows deleted.

        The current period is always kept (keep_periods >= 1).
        """
        if isinstance(keep_periods, bool) or not isinstance(keep_periods, int) or keep_periods < 1:
            raise InvalidParameterError("keep_periods", keep_periods, "must be an integer >= 1")
        with self._transaction() as cur:
            oldest = self.current_period() - keep_periods + 1
            deleted = cur.execute("DELETE FROM memo WHERE period < ?", (oldest,)).rowcount
            deleted += cur.execute("DELETE FROM spend WHERE period < ?", (oldest,)).rowcount
        return deleted


__all__ = ["Charge", "PrivacyLedger", "exact_epsilon"]
