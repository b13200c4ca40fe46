"""The Python device's longitudinal reports (issue 38): memoized two-round reports and their ledger charges.

A metric version with ``lifetime_epsilon`` (registry/longitudinal.py) is reported with
:func:`cms_core.longitudinal.privatize_longitudinal`: the hash of (device, metric version) and the
first-round (memoized) response of each hashed value are derived from the device secret
(keyed BLAKE2b, as RAPPOR derives its permanent response from HMAC(secret, value)), so the device
stores no response; the second round is fresh from ``os.urandom`` for every report.

The ledger (:class:`producer.ledger.PrivacyLedger`) charges what is spent:

* the first report of a hashed value y of a metric version charges ``lifetime_epsilon`` to the
  metric's account in the current period (refused, and nothing sent, over the period's budget);
* every later report of y is free: whatever they reveal together is the memoized response,
  already paid for. A device's lifetime spend on one version is at most g * eps_inf.

What the ledger file holds for this (table ``lifetime``): a keyed BLAKE2b digest (the ledger's
memo key) of (version fingerprint, y) for each hashed value seen, never the value, never the
memoized response; y takes only g values, so the digest says little even with the key. The device
secret sits in the ledger's ``meta`` table (key ``longitudinal_secret``, 32 random bytes, created on
first use): the file is created with mode 0600 and, with the secret, the hashed values seen can be
recomputed -- treat the file as sensitive as the values (docs/device.md). Deleting the ledger gives
the device a new secret: new hashes, new memoized responses, and a lifetime spent again from zero
(the old reports stay what they were; nothing links them to the new ones but the device key).
"""

from __future__ import annotations

import os
import secrets

from cms_core.errors import InvalidParameterError
from cms_core.longitudinal import LongitudinalParams, check_secret, privatize_longitudinal, seen_key
from cms_core.wire import encode_report

from .ledger import PrivacyLedger, exact_epsilon

SECRET_KEY = "longitudinal_secret"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS lifetime (
    metric TEXT NOT NULL,
    value_digest BLOB NOT NULL,   -- keyed BLAKE2b of (version fingerprint, hashed value), never the value
    period INTEGER NOT NULL,      -- the period the lifetime epsilon was charged in
    PRIMARY KEY (metric, value_digest)
)
"""


def device_secret(ledger: PrivacyLedger) -> bytes:
    """The device's secret for longitudinal metrics, kept in the ledger file (created once, 32 random bytes)."""
    with ledger._transaction() as cur:
        cur.execute(_SCHEMA)
        row = cur.execute("SELECT value FROM meta WHERE key = ?", (SECRET_KEY,)).fetchone()
        if row is None:
            secret = secrets.token_bytes(32)
            cur.execute("INSERT INTO meta VALUES (?, ?)", (SECRET_KEY, secret))
            return secret
        return check_secret(bytes(row[0]))


def charge_lifetime(ledger: PrivacyLedger, metric: str, lp: LongitudinalParams, hashed: int) -> float:
    """Charge eps_inf for the first report of hashed value ``hashed`` of this version; 0.0 for later ones.

    One transaction: the digest is recorded with the charge, or neither (PrivacyBudgetError over budget).
    """
    digest = ledger._digest(seen_key(lp, hashed))
    exact = exact_epsilon(lp.lifetime_epsilon, "lifetime_epsilon")
    with ledger._transaction() as cur:
        cur.execute(_SCHEMA)
        seen = cur.execute("SELECT 1 FROM lifetime WHERE metric = ? AND value_digest = ?", (metric, digest)).fetchone()
        if seen is not None:
            return 0.0
        period = ledger.current_period()
        ledger._charge_locked(cur, metric, exact, lp.lifetime_epsilon, period)
        cur.execute("INSERT INTO lifetime VALUES (?, ?, ?)", (metric, digest, period))
        return lp.lifetime_epsilon


def lifetime_values(ledger: PrivacyLedger, metric: str) -> int:
    """How many (version, hashed value) pairs of ``metric`` this device has been charged eps_inf for."""
    with ledger._transaction() as cur:
        cur.execute(_SCHEMA)
        return int(cur.execute("SELECT COUNT(*) FROM lifetime WHERE metric = ?", (metric,)).fetchone()[0])


def prepare_report(lp: LongitudinalParams, value, *, account: str, ledger: PrivacyLedger | None,
                   secret: bytes | None, random=os.urandom) -> tuple[bytes, float]:
    """(wire message, epsilon charged) of one longitudinal report; charges before anything is sent.

    The secret is the ledger's unless one is given; with neither there is nothing to derive the
    memoized responses from, and the report is refused (InvalidParameterError).
    """
    if secret is None:
        if ledger is None:
            raise InvalidParameterError("device_secret", None, f"metric {account!r} is longitudinal: its memoized "
                                        "responses are derived from a device secret; give a ledger (which keeps one) "
                                        "or device_secret=")
        secret = device_secret(ledger)
    made = privatize_longitudinal(lp, secret, value, random)
    message = encode_report(lp.report, made.report)
    charged = charge_lifetime(ledger, account, lp, made.hashed) if ledger is not None else lp.lifetime_epsilon
    return message, charged


__all__ = ["charge_lifetime", "device_secret", "lifetime_values", "prepare_report"]
