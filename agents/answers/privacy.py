"""What a window's answer may claim: the privacy rules every answer and the Prometheus export apply.

* **Withheld windows.** A window holding fewer than its version's ``min_reports`` reports is withheld: no
  estimate and no match counts (:func:`withheld`, :data:`WITHHELD_FIELDS`), like DAP's minimum batch size.
* **Central epsilon.** A window whose every report came through a shuffling collector states the central
  (epsilon, delta) of its smallest batch (:func:`central_privacy`); any other window claims only the local
  epsilon.
"""

from __future__ import annotations

from cms_core import OCMSParams

#: One central epsilon not computed before, in the work model of :mod:`agents.answers.service` (rough
#: nanoseconds of one CPU): cms_core.shuffle takes 5-25 ms; then it is cached.
CENTRAL_COST = 25_000_000


def withheld(n: int, min_reports: int) -> bool:
    """Whether a window of ``n`` reports is withheld (fewer than the version's ``min_reports``)."""
    return n < min_reports


#: Record fields that exist only with an estimate: a withheld window answers without them.
WITHHELD_FIELDS = (
    "match_count", "frequency", "processed", "count", "processed_count", "std",
    "ci_low", "ci_high", "count_ci_low", "count_ci_high", "processed_ci_low", "processed_ci_high",
    "processed_count_ci_low", "processed_count_ci_high", "above_noise",
)


#: The central epsilon fields a trend point carries (the answer's header carries all of them, for the whole range).
POINT_CENTRAL_FIELDS = ("central_epsilon", "central_delta", "shuffle_batch_min", "shuffled_reports")
#: (smallest batch, epsilon0, delta) -> cms_core.planning.shuffled_privacy of it (a few ms each to compute).
_CENTRAL_CACHE: dict[tuple[int, float, float], dict] = {}
_CENTRAL_CACHE_MAX = 4096


def _central_key(shuffle_min: int, shuffle_max: int, epsilon0: float) -> tuple[int, float, float]:
    """(smallest batch, epsilon0, the delta of the largest batch: below 1/N for every batch of the window)."""
    from cms_core.planning import shuffle_delta

    return shuffle_min, epsilon0, shuffle_delta(max(shuffle_min, shuffle_max))


def _shuffled_privacy(key: tuple[int, float, float]) -> dict:
    from cms_core.planning import shuffled_privacy

    found = _CENTRAL_CACHE.get(key)
    if found is None:
        if len(_CENTRAL_CACHE) >= _CENTRAL_CACHE_MAX:
            _CENTRAL_CACHE.clear()
        batch, epsilon0, delta = key
        found = _CENTRAL_CACHE[key] = shuffled_privacy(epsilon0, batch, delta)
    return found


def central_cost(snapshot, epsilon0: float) -> int:
    """Work of the central epsilons an answer over ``snapshot`` may compute: at most one per (smallest batch,
    delta) among its states and the whole (CENTRAL_COST each; cached ones are free)."""
    from ..view import shuffle_of

    keys = {_central_key(state.shuffle_min, state.shuffle_max, epsilon0)
            for _, states in snapshot for state in states if state.shuffle_min}
    _, low, high = shuffle_of(snapshot)
    if low:
        keys.add(_central_key(low, high, epsilon0))
    return CENTRAL_COST * sum(key not in _CENTRAL_CACHE for key in keys)


#: Why a window states no central epsilon (``central_reason``; null when it states one).
CENTRAL_REASONS = ("no_reports", "no_claim_key", "not_shuffled", "partly_shuffled")


def central_privacy(params: OCMSParams, n: int, shuffled: int, shuffle_min: int, shuffle_max: int = 0) -> dict:
    """The central (epsilon, delta) of a window of ``n`` reports, ``shuffled`` of which came through a
    shuffling collector in batches of ``shuffle_min`` to ``shuffle_max`` reports (agents.state), each batch's
    claim verified (agents.trust).

    Why delta of the largest batch: delta must stay below 1/N for every batch (cms_core.planning.shuffle_delta:
    a delta of 1/N allows publishing one report of N in the clear), and eps_c at that smaller delta of the
    smallest batch bounds every batch's at it.

    Why the smallest batch: each report of the window was shuffled in one batch of some n_b >= shuffle_min
    reports, and its batch is (eps_c(n_b), delta)-DP towards whoever sees only the shuffled frames
    (cms_core.shuffle, FMT21); eps_c falls as n grows, so eps_c(shuffle_min) bounds every batch. Batches are
    disjoint, so a device with one report in the window is protected at that figure whatever the other
    batches hold; a device with reports in k batches composes (k * eps_c, k * delta). A window holding
    reports that were not shuffled gets null: the figure would not hold for them (only the local epsilon
    does). The figure holds against readers of Kafka and the worker, not against the collector."""
    from ..trust import unverified_note, verifying

    epsilon0 = params.epsilon

    out = {"central_epsilon": None, "central_delta": None, "central_bound": None,
           "shuffle_batch_min": shuffle_min or None, "shuffled_reports": shuffled, "central_reason": None}
    if n == 0:
        out["central_reason"] = "no_reports"
        out["central_note"] = "no reports in this window"
    elif shuffled == 0:
        out["central_reason"] = "not_shuffled" if verifying() else "no_claim_key"
        out["central_note"] = (f"no report of this window came in a frame with a verified shuffle claim: each report "
                               f"is {epsilon0:g}-DP (the local epsilon), against everyone" + unverified_note())
    elif shuffled < n:
        out["central_reason"] = "partly_shuffled"
        out["central_note"] = (f"{n - shuffled:,} of the {n:,} reports of this window were not shuffled (or their "
                               f"shuffle claim did not verify): only the local epsilon {epsilon0:g} holds for them, so "
                               f"no central epsilon is claimed")
    else:
        central = _shuffled_privacy(_central_key(shuffle_min, shuffle_max, float(epsilon0)))
        out.update(central_epsilon=central["central_epsilon"], central_delta=central["delta"],
                   central_bound=central["bound"])
        out["central_note"] = (
            f"every report of this window was shuffled in a batch of at least {shuffle_min:,} reports: to whoever "
            f"reads Kafka or the worker (not the collector), each report is ({central['central_epsilon']:.3g}, "
            f"{central['delta']:g})-DP, not only {epsilon0:g}-DP; a device with reports in k batches: k times that")
    return out
