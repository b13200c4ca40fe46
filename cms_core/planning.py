"""Capacity planning: what a parameter choice costs and buys (``ocms plan``).

Pure functions over :class:`OCMSParams`; predictions use the exact estimator
variance (with m'), so they are what the sketch will report.
"""

from __future__ import annotations

import copy
import functools
import math

import numpy as np

from . import theory
from .errors import InvalidParameterError
from .params import OCMSParams, check_epsilon


def _positive(name: str, value) -> float:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidParameterError(name, value, "must be a finite number > 0")
    return float(value)


def predict(params: OCMSParams, n: int, confidence: float = 0.95, tracked_count: int | None = None) -> dict:
    """Predicted worst-case MSE, CI half-width, and l2 / l1 bounds for n reports."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidParameterError("n", n, "must be an integer >= 1")
    if not 0 < confidence < 1:
        raise InvalidParameterError("confidence", confidence, "must be in (0, 1)")
    worst = params.worst_case_mse(n)
    out = {
        "n": n,
        "confidence": confidence,
        "worst_case_mse": worst,
        "worst_case_std": math.sqrt(worst),
        "ci_half_width": theory.normal_z(confidence) * math.sqrt(worst),
        "ci_half_width_count": theory.normal_z(confidence) * math.sqrt(worst) * n,
    }
    count = tracked_count or params.tracked_count
    if count:
        l2 = params.l2_loss(n, count)
        out.update({"tracked_count": count, "l2_loss": l2, "l1_bound": theory.l1_bound_of(l2, count)})
    return out


def reports_needed(
    params: OCMSParams,
    *,
    target_mse: float | None = None,
    target_ci_half_width: float | None = None,
    target_l2: float | None = None,
    confidence: float = 0.95,
    tracked_count: int | None = None,
) -> int:
    """Smallest n meeting the one target given (all variances scale as 1/n)."""
    targets = {k: v for k, v in {"target_mse": target_mse, "target_ci_half_width": target_ci_half_width,
                                 "target_l2": target_l2}.items() if v is not None}
    if len(targets) != 1:
        raise InvalidParameterError("target", sorted(targets), "give exactly one target")
    (name, value), = targets.items()
    value = _positive(name, value)
    if name == "target_mse":
        return theory.reports_needed(params.worst_case_mse(1), value)
    if name == "target_ci_half_width":
        return theory.reports_needed(params.worst_case_mse(1), (value / theory.normal_z(confidence)) ** 2)
    count = tracked_count or params.tracked_count
    if not count:
        raise InvalidParameterError("tracked_count", None, "the l2 target needs the number of tracked values")
    return theory.reports_needed(params.l2_loss(1, count), value)


def _both_mechanisms(params: OCMSParams, tracked_count: int | None):
    """(OCMS+RR, direct RR or None, mode, f*, D, the MechanismComparison of mechanism "auto") for ``params``'
    budget, dictionary and objective: OCMS+RR is ``params`` itself when they are OCMS+RR (a fixed m stays),
    else the one the objective chooses."""
    from .params import compare_mechanisms as build_both

    count = tracked_count or params.tracked_count
    mode = "l2" if params.mode == "l2" else "mse"
    f_star = params.f_star if params.f_star is not None else 1.0
    both = params.cached(("both_mechanisms", count if mode == "l2" else None), lambda: build_both(
        params.epsilon, None if params.value_domain == "string" else params.dictionary_size,
        mode=mode, f_star=f_star, tracked_count=count if mode == "l2" else None,
        value_domain=params.value_domain, binding=params.binding))
    ocms = params if params.mechanism == "ocms" else both.ocms
    return ocms, both.direct, mode, f_star, count, both


def compare_mechanisms(params: OCMSParams, n: int = 1, tracked_count: int | None = None) -> dict:
    """Both mechanisms for ``params``' budget and dictionary, and which the exact objective picks.

    Rows: OCMS+RR (m chosen for params' objective, or params' own m if fixed) and
    direct RR (m = d), each with its worst-case MSE over [0, f*] and, when D is
    known, its l2 loss, at n reports. ``chosen`` is what ``mechanism="auto"``
    builds: the lower worst-case MSE (mode mse/fixed) or l2 (mode l2).
    """
    ocms, direct, mode, f_star, count, _ = _both_mechanisms(params, tracked_count)
    rows = {}
    for name, candidate in (("ocms", ocms), ("direct", direct)):
        if candidate is None:
            rows[name] = None
            continue
        row = {"hash_range": candidate.hash_range, "report_bytes": candidate.report_bytes,
               "worst_case_mse": candidate.worst_case_mse(n, f_star), "fingerprint": candidate.fingerprint.hex()}
        if count:
            row["l2_loss"] = candidate.l2_loss(n, count)
        rows[name] = row
    key = "l2_loss" if mode == "l2" else "worst_case_mse"
    chosen = "ocms"
    if rows["direct"] is not None and rows["direct"][key] < rows["ocms"][key]:
        chosen = "direct"
    return {"n": n, "f_star": f_star, "tracked_count": count, "objective": key, **rows, "chosen": chosen}


def comparison_lines(comparison: dict) -> list[str]:
    """``ocms plan``'s text for :func:`compare_mechanisms`."""
    lines = [f"mechanisms at n={comparison['n']} (worst-case MSE over f in [0, {comparison['f_star']:g}]"
             + (f"; l2 over D={comparison['tracked_count']}" if comparison["tracked_count"] else "") + "):"]
    for name, label in (("ocms", "OCMS+RR"), ("direct", "direct RR")):
        row = comparison[name]
        if row is None:
            lines.append(f"  {label:<10} not available (needs integer values, 2 <= d <= 2^32 - 1)")
            continue
        text = f"  {label:<10} m={row['hash_range']:<6} MSE {row['worst_case_mse']:.4g}"
        if "l2_loss" in row:
            text += f"  l2 {row['l2_loss']:.4g}"
        lines.append(text + f"  ({row['report_bytes']} B/report)")
    pick = {"ocms": "OCMS+RR", "direct": "direct RR"}[comparison["chosen"]]
    lines.append(f"  lower {comparison['objective'].replace('_', ' ')}: {pick} (--mechanism auto picks it)")
    return lines


# --- What a reviewer asks of a parameter set: poisoning exposure, and the central epsilon when shuffled ---

#: The headline of the poisoning figures: a value nobody holds read as 1% of the reports.
POISONING_TARGET = 0.01


def noise_floor(params: OCMSParams, n: int, confidence: float, tracked_count: int) -> float:
    """The frequency an estimate must exceed to stand above the noise of ``tracked_count`` values at n reports:
    the noise floor the worker's answers state (:func:`cms_core.sketch.noise_test`, the exact Bonferroni
    test of f = 0), predicted for n reports; +inf when not even n matches reach the level. Cost O(sqrt(n)).
    """
    from .sketch import noise_test

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidParameterError("n", n, "must be an integer >= 1")
    if not 0 < confidence < 1:
        raise InvalidParameterError("confidence", confidence, "must be in (0, 1)")
    return noise_test(params, n, confidence, max(1, int(tracked_count)))[1]


def _exposure_row(params: OCMSParams, n: int | None, confidence: float, tracked_count: int | None) -> dict:
    gain = params.poisoning_gain
    row = {"gain": gain, "gain_per_1pct_fake": gain * 0.01,
           "fake_fraction_for_1pct": theory.fake_fraction_to_reach(gain, POISONING_TARGET),
           "noise_floor": None, "fake_fraction_for_noise_floor": None}
    if n is not None and tracked_count:
        floor = noise_floor(params, n, confidence, tracked_count)
        if math.isfinite(floor):
            row.update(noise_floor=floor, fake_fraction_for_noise_floor=theory.fake_fraction_to_reach(gain, floor))
    return row


def poisoning_exposure(params: OCMSParams, n: int | None = None, confidence: float = 0.95,
                       tracked_count: int | None = None) -> dict:
    """What the maximal-gain attack (Cao, Jia, Gong, USENIX Security 2021) does to ``params``' estimates.

    Fake devices send valid reports crafted to match one target value (:func:`theory.poisoning_gain`);
    a fraction beta of them lifts a value nobody holds to beta * gain. For ``params``' own mechanism and,
    beside it, both mechanisms of the same budget and dictionary (``mechanisms``): ``gain_per_1pct_fake``
    (the estimate's rise per 1% of fake reports, a frequency), ``fake_fraction_for_1pct`` (the fraction
    of fakes that lifts the value to 1%) and, with n and D, the fraction that lifts it to the noise floor
    of :func:`noise_floor` (in expectation: above it about half the time). ``note`` is what mechanism
    "auto" would say about its pick (:attr:`cms_core.params.MechanismComparison.poisoning_note`).
    """
    ocms, direct, _, _, count, auto = _both_mechanisms(params, tracked_count)
    if params.is_direct:
        direct = params
    rows = {"ocms": _exposure_row(ocms, n, confidence, count),
            "direct": None if direct is None else _exposure_row(direct, n, confidence, count)}
    own = rows[params.mechanism]
    return {"attack": "maximal-gain attack (Cao, Jia, Gong, USENIX Security 2021)", "mechanism": params.mechanism,
            **{k: own[k] for k in ("gain_per_1pct_fake", "fake_fraction_for_1pct", "noise_floor",
                                   "fake_fraction_for_noise_floor")},
            "n": n, "tracked_count": count, "confidence": confidence, "mechanisms": rows, "note": auto.poisoning_note}


#: What the central epsilon is computed with (cms_core.shuffle).
SHUFFLE_BOUND = ("FMT21: Feldman, McMillan, Talwar, 'Hiding Among the Clones' (FOCS 2021), Theorem 3.2, "
                 "computed numerically as an upper bound")
#: delta of the central (epsilon, delta) unless given; larger batches get a smaller one (:func:`shuffle_delta`).
DEFAULT_SHUFFLE_DELTA = 1e-6


def shuffle_delta(reports: int, delta: float | None = None) -> float:
    """The delta of a shuffled batch of ``reports``: ``delta`` checked, or the default.

    DP practice wants delta well below 1/N: a delta of 1/N allows a mechanism that publishes one of the N
    reports in the clear. So a given delta must be below 1/N, and the default is 1e-6, or for batches of a
    million reports and more the largest power of ten below 1/N (1e-7 at N = 10^6).
    """
    if isinstance(reports, bool) or not isinstance(reports, int) or reports < 1:
        raise InvalidParameterError("shuffled", reports, "the number of reports in one shuffled batch must be an "
                                                         "integer >= 1")
    if delta is None:
        return min(DEFAULT_SHUFFLE_DELTA, 10.0 ** -(math.floor(math.log10(reports)) + 1))
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise InvalidParameterError("delta", delta, "must be a number in (0, 1), e.g. 1e-6")
    if delta * reports >= 1:
        raise InvalidParameterError("delta", delta, f"must be below 1/N = {1 / reports:.3g} for batches of "
                                    f"N = {reports:,} reports (a delta of 1/N allows publishing one report in the "
                                    "clear); e.g. " + f"{10.0 ** -(math.floor(math.log10(reports)) + 1):g}")
    return float(delta)


def shuffled_privacy(epsilon0: float, reports: int, delta: float | None = None) -> dict:
    """The central (epsilon, delta) of one shuffled batch of ``reports`` epsilon0-LDP reports
    (:func:`cms_core.shuffle.central_epsilon`): what the analyst's view of the batch costs, against whoever
    sees only shuffled batches (Kafka, the worker), not against the shuffler; per batch (a device in k
    batches composes). Milliseconds per (N, epsilon0)."""
    from .shuffle import central_epsilon

    delta = shuffle_delta(reports, delta)
    return {"reports": reports, "delta": delta, "local_epsilon": float(epsilon0),
            "central_epsilon": central_epsilon(reports, float(epsilon0), delta), "bound": SHUFFLE_BOUND}


def _percent(fraction: float | None) -> str:
    """A fraction as a percentage with three significant digits (0.00621%, 0.457%, 12.3%), never in exponent
    notation (1,570%, not 1.57e+03%)."""
    if fraction is None:
        return "n/a"
    percent = fraction * 100
    if abs(percent) >= 100 or percent == 0:
        return f"{percent:,.0f}%"
    decimals = max(0, 2 - math.floor(math.log10(abs(percent))))  # three significant digits, written out
    return f"{percent:.{decimals}f}".rstrip("0").rstrip(".") + "%"


def likelihood_factor(epsilon: float) -> str:
    """What an epsilon means in plain numbers: the most one device's value can change the likelihood of anything
    seen, e^epsilon (0.053 -> "1.05x"; 4 -> "55x")."""
    factor = math.exp(epsilon)
    return f"{factor:.3g}x" if factor < 1000 else f"{factor:,.0f}x"


def privacy_lines(poisoning: dict, shuffled: dict | None = None) -> list[str]:
    """``ocms plan``'s text for :func:`poisoning_exposure` and :func:`shuffled_privacy`."""
    lines = [f"poisoning by the {poisoning['attack']}, fake reports crafted to match one value:"]
    floor_known = poisoning["mechanisms"]["ocms"]["noise_floor"] is not None
    for name, label in (("ocms", "OCMS+RR"), ("direct", "direct RR")):
        row = poisoning["mechanisms"][name]
        if row is None:
            continue
        text = (f"  {label:<10} each 1% of fakes adds {_percent(row['gain_per_1pct_fake'])} to a value nobody holds; "
                f"{_percent(row['fake_fraction_for_1pct'])} of fakes lift it to 1%")
        if row["noise_floor"] is not None:
            text += (f", {_percent(row['fake_fraction_for_noise_floor'])} to its noise floor "
                     f"{_percent(row['noise_floor'])}")
        lines.append(text + (" (these parameters)" if name == poisoning["mechanism"] else ""))
    if floor_known:
        lines.append(f"  noise floor: what an estimate must exceed to stand above the noise of D={poisoning['tracked_count']:,} "
                     f"values at n={poisoning['n']:,} ({poisoning['confidence']:.0%}, simultaneous)")
    if poisoning["note"]:
        lines.append(f"  note: {poisoning['note']}")
    if shuffled is not None:
        lines.append(f"shuffled batches of {shuffled['reports']:,} reports: central epsilon "
                     f"{shuffled['central_epsilon']:.4g} at delta {shuffled['delta']:g} (local epsilon "
                     f"{shuffled['local_epsilon']:g}; FMT21 bound): one device's value changes the likelihood of "
                     f"anything a reader sees by at most {likelihood_factor(shuffled['central_epsilon'])}, against "
                     f"{likelihood_factor(shuffled['local_epsilon'])} for its report alone")
        lines.append("  against whoever reads Kafka and the worker, if the collector's operator does not collude; "
                     "not against the collector; per batch (k batches of one device compose)")
    return lines


def check_shuffle_flags(shuffled: int | None, delta: float | None) -> None:
    """``--shuffled N --delta D`` of ``ocms plan``, checked before any work (:func:`shuffle_delta`)."""
    if delta is not None and shuffled is None:
        raise InvalidParameterError("delta", delta, "applies to shuffled batches: give their size with --shuffled N")
    if shuffled is not None:
        shuffle_delta(shuffled, delta)


def privacy_figures(params: OCMSParams, *, n: int | None = None, confidence: float = 0.95,
                    tracked_count: int | None = None, shuffled: int | None = None,
                    delta: float | None = None) -> dict:
    """``ocms plan``'s privacy figures of one parameter set (with or without ``--registry``):
    ``poisoning`` (:func:`poisoning_exposure`) and, for batches of ``shuffled`` reports, ``shuffled``
    (:func:`shuffled_privacy`, ``delta`` as :func:`shuffle_delta` resolves it)."""
    check_shuffle_flags(shuffled, delta)
    out = {"poisoning": poisoning_exposure(params, n, confidence, tracked_count)}
    if shuffled is not None:
        out["shuffled"] = shuffled_privacy(params.epsilon, shuffled, delta)
    return out


def privacy_cells(poisoning: dict, shuffled: dict | None = None) -> list[str]:
    """``ocms plan --registry``'s table cells for a version: the fake fractions of its mechanism that lift a
    value nobody holds to 1% and to its noise floor, and the central epsilon when shuffled."""
    cells = [_percent(poisoning["fake_fraction_for_1pct"]), _percent(poisoning["fake_fraction_for_noise_floor"])]
    if shuffled is not None:
        cells.append(f"{shuffled['central_epsilon']:.4g}")
    return cells


def privacy_legend(n: int, confidence: float, shuffled: int | None, delta: float | None = None) -> str:
    """What :func:`privacy_cells` mean, under the table."""
    text = ("fakes for 1% / for floor: the fraction of maximal-gain fake reports (Cao, Jia, Gong 2021) that lifts a "
            f"value nobody holds to 1% / to the version's noise floor at n={n:,} (over its tracked values, "
            f"{confidence:.0%} simultaneous)")
    if shuffled is not None:
        text += (f"; central eps: of a batch of {shuffled:,} shuffled reports at delta {shuffle_delta(shuffled, delta):g} "
                 "(FMT21 bound), against readers of Kafka and the worker, not the collector; per batch. Scale: an "
                 "epsilon e changes the likelihood of anything seen by at most e^e (0.05: 1.05x, 0.6: 1.82x; "
                 "a report alone at epsilon 2: 7.39x)")
    return text


# --- Numeric metrics (issue 40): direct RR over the buckets, or a hierarchical histogram ---

def choose_numeric_mechanism(buckets: int, epsilon: float, n: int, f=None, flat_only: bool = False) -> dict:
    """The numeric mechanism with the smallest predicted CDF variance for ``buckets`` (k) buckets at ``epsilon``
    per report and ``n`` reports: a flat oracle over the buckets (direct RR, or OCMS+RR) or the hierarchical histogram
    of :mod:`cms_core.hierarchy` at each branching B in 2..16 (B < k).

    Objective: the mean over the k - 1 inner bucket edges of Var(CDF(edge)), the consistent estimate's exact
    variance (:func:`cms_core.hierarchy.predicted_cdf_variances`: the levels' per-report covariances
    (:func:`cms_core.theory.grr_level_terms`, :func:`cms_core.theory.ocms_level_terms`) through the consistent
    tree's linear map, with n / h reports per level, less the devices' own spread F (1 - F) / n), at the bucket
    distribution ``f`` (uniform when omitted, the figure before any data). For the flat direct RR (one level) this
    is :func:`cms_core.numeric.direct_rr_functional_variance` of the prefix, about min(j + 1, k - 1 - j) times one
    bucket's variance at edge j (the estimates sum to exactly 1): it grows with k. The tree sums at most B - 1 nodes per level over h = ceil(log_B k)
    levels, each heard by n / h devices (Cormode et al. 2019), so its variance grows with about
    h^2 (B - 1) instead: the tree wins as k grows and epsilon falls (a bucket's variance grows with k / e^eps).
    Quantiles are read where the CDF crosses q, so a smaller CDF variance is a smaller rank error; the mean over
    the edges weighs every quantile alike (a prior ``f`` moves the weight to where the mass is).

    Returns ``{"chosen": name, "branching": B of the pick (k for a flat oracle), "candidates": {name:
    {"branching", "height", "mean_cdf_variance", "median_cdf_sd"}}, "best_hierarchy": the best tree's name}``
    (names: ``direct-rr``, ``ocms-rr``, ``hierarchy-B<B>``).
    Runtime: 17 trees of a k x k solve each: milliseconds at k = 40, about 15 s at k = 1,024 (cached per
    (k, epsilon, n) when ``f`` is omitted); the flat oracles alone (``flat_only``) take O(k)
    (:func:`cms_core.hierarchy.flat_cdf_variances`).
    """
    from .hierarchy import MAX_HIERARCHY_BUCKETS

    if isinstance(buckets, bool) or not isinstance(buckets, int) or not 2 <= buckets <= MAX_HIERARCHY_BUCKETS:
        raise InvalidParameterError("buckets", buckets, f"must be an integer in [2, {MAX_HIERARCHY_BUCKETS}]")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidParameterError("n", n, "must be an integer >= 1")
    epsilon = check_epsilon(epsilon)
    if f is None:
        return copy.deepcopy(_numeric_choice_uniform(buckets, epsilon, n, bool(flat_only)))
    return _numeric_choice(buckets, epsilon, n, f, bool(flat_only))


@functools.lru_cache(maxsize=64)
def _numeric_choice_uniform(buckets: int, epsilon: float, n: int, flat_only: bool = False) -> dict:
    return _numeric_choice(buckets, epsilon, n, None, flat_only)


def _numeric_choice(buckets: int, epsilon: float, n: int, f, flat_only: bool = False) -> dict:
    from .hierarchy import MAX_BRANCHING, MIN_BRANCHING, HierarchyParams, predicted_cdf_variances

    candidates = {}
    options = [] if flat_only else [(b, "auto") for b in range(MIN_BRANCHING, min(MAX_BRANCHING, buckets - 1) + 1)]
    for branching, mechanism in options + [(buckets, "direct"), (buckets, "ocms")]:
        params = HierarchyParams.build(buckets, epsilon, branching, mechanism=mechanism)
        variances = predicted_cdf_variances(params, n, f)
        candidates[params.name] = {"branching": params.branching, "height": params.height,
                                   "mean_cdf_variance": float(np.mean(variances)),
                                   "median_cdf_sd": math.sqrt(float(variances[(buckets - 1) // 2]))}
    chosen = min(candidates, key=lambda name: (candidates[name]["mean_cdf_variance"], candidates[name]["branching"]))
    trees = [name for name in candidates if candidates[name]["height"] > 1]
    best_tree = min(trees, key=lambda name: candidates[name]["mean_cdf_variance"]) if trees else None
    return {"buckets": buckets, "epsilon": float(epsilon), "n": n, "chosen": chosen,
            "branching": candidates[chosen]["branching"], "candidates": candidates, "best_hierarchy": best_tree}


#: The flat oracles over a numeric metric's bucket index, as :func:`choose_numeric_mechanism` names them.
FLAT_NUMERIC_MECHANISMS = {"direct-rr": "direct", "ocms-rr": "ocms"}


@functools.lru_cache(maxsize=256)
def choose_numeric_oracle(buckets: int, epsilon: float) -> str:
    """The better flat oracle of a numeric metric (what ``mechanism: auto`` picked before it weighed trees, and
    picks above :data:`registry.numeric.MAX_PLANNED_HIERARCHY_BUCKETS`): ``"direct"`` or ``"ocms"``, the flat
    frequency oracle over the ``buckets`` bucket indices with the smaller mean CDF variance (the objective of
    :func:`choose_numeric_mechanism`, restricted to one-level trees; both variances scale as 1/n, so the pick
    does not depend on n). Its parameters: ``OCMSParams.build(epsilon, buckets, mode="l2",
    tracked_count=buckets, mechanism=...)`` (:func:`cms_core.hierarchy.level_oracle`'s)."""
    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 2:
        raise InvalidParameterError("buckets", buckets, "must be an integer >= 2")
    choice = _numeric_choice(buckets, check_epsilon(epsilon), 1_000_000, None, flat_only=True)
    return FLAT_NUMERIC_MECHANISMS[choice["chosen"]]


# --- A numeric metric's mean (issue 40): read from the histogram, or the Hybrid mechanism's own reports ---

def histogram_mean_variance(layout, params: OCMSParams, tree, n: int, f=None) -> float:
    """The variance, in the metric's units squared, of the mean read from the histogram (each bucket at its midpoint,
    :meth:`cms_core.numeric.Histogram.mean`) of ``n`` reports of the flat oracle ``params`` or of the hierarchical
    histogram ``tree`` (``n / h`` reports a level), at the bucket distribution ``f`` (uniform when omitted): the
    functional variance of the bucket midpoints, :func:`cms_core.numeric.oracle_noise`'s or
    :meth:`cms_core.hierarchy.ConsistentTree.functional_variances`'. Its bucketization bias (up to half the widest
    bucket) is not in it."""
    from .hierarchy import ConsistentTree
    from .numeric import oracle_noise

    k = layout.buckets
    f = np.full(k, 1.0 / k) if f is None else np.asarray(f, dtype=np.float64)
    if tree is None:
        return float(oracle_noise(params).variance(f, layout.points, n))
    reports = [max(1, round(n / tree.height))] * tree.height
    return float(ConsistentTree.of(tree, reports).functional_variances(f, layout.points)[0])


def hybrid_mean_variance(layout, hybrid, n: int, f=None) -> float:
    """The variance, in the metric's units squared, of the Hybrid mechanism's mean of ``n`` reports
    (:meth:`cms_core.hybrid.HybridParams.variance`, exact) when the values sit at the bucket midpoints with the
    bucket distribution ``f`` (uniform when omitted), the figure :func:`histogram_mean_variance` is compared with."""
    k = layout.buckets
    f = np.full(k, 1.0 / k) if f is None else np.asarray(f, dtype=np.float64)
    f = f / f.sum()
    return float(f @ hybrid.variance(layout.points)) / n * hybrid.unit_scale ** 2


def choose_mean_mechanism(layout, hybrid, params: OCMSParams, tree, n: int, parts: int, f=None) -> dict:
    """Which of the two gives the more accurate mean of ``n`` devices: the histogram's mean from all of them
    (:func:`histogram_mean_variance`), or the Hybrid mechanism's from the ``n / parts`` devices that draw a mean
    report (:func:`hybrid_mean_variance`; ``parts`` = 1 when only the mean is asked, else the histogram's levels
    plus one, each device drawing one part: the histogram then hears ``n (parts - 1) / parts``, its CDF variances
    times ``parts / (parts - 1)``, the ``cdf_variance_factor``). Returns both standard deviations (metric's units),
    the pick (``"hybrid"`` or ``"histogram"``) and the factor."""
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise InvalidParameterError("parts", parts, "must be an integer >= 1")
    if isinstance(n, bool) or not isinstance(n, int) or n < parts:
        raise InvalidParameterError("n", n, f"must be an integer >= parts ({parts})")
    histogram_sd = math.sqrt(histogram_mean_variance(layout, params, tree, n, f))
    hybrid_sd = math.sqrt(hybrid_mean_variance(layout, hybrid, n // parts, f))
    return {"n": n, "parts": parts, "histogram_sd": histogram_sd, "hybrid_sd": hybrid_sd,
            "chosen": "hybrid" if hybrid_sd < histogram_sd else "histogram",
            "cdf_variance_factor": parts / (parts - 1) if parts > 1 else None}
