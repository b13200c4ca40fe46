"""A metric version's longitudinal mode (issue 38): ``lifetime_epsilon`` beside ``epsilon``.

In a registry file (on the metric, as a default, or on a version)::

    - name: os_version
      categories: [...]
      epsilon: 1              # eps_1: what one report reveals (as for every metric)
      lifetime_epsilon: 2     # eps_inf: what every report of one memoized value reveals together
      versions:
        - version: 1

A version with ``lifetime_epsilon`` is reported with memoized two-round reports
(:mod:`cms_core.longitudinal`): its ``params`` are the report parameters at eps_1 (the hash range
the one-shot optimum at eps_1, mechanism "auto" comparing both mechanisms at eps_1), so the
worker decodes it unchanged; the device's ledger charges eps_inf once per hashed value and
nothing for later reports of it. Validation names the metric, the field and the line, as the rest
of the loader does. Discoverable metrics (discovery levels) stay one-shot.
"""

from __future__ import annotations

import math

from cms_core import theory
from cms_core.errors import InvalidParameterError
from cms_core.longitudinal import (LongitudinalParams, loloha_hash_range, loloha_second_round_probabilities,
                                   first_round_probabilities, long_pure_variance)

from .load_checks import version_or_metric

KEY = "lifetime_epsilon"
#: ``ocms plan``'s multi-day figure: the window of this many daily reports per device.
PLAN_DAYS = 30


def parse(check, entry, vmap, params, metric, version, vline, discoverable) -> LongitudinalParams | None | bool:
    """The version's LongitudinalParams, None when it is one-shot, False after reporting a problem to ``check``
    (the loader's :class:`~registry.load_checks.Checker`)."""
    raw = version_or_metric(entry, vmap, KEY, version)
    if not raw.present:
        return None
    value = raw.value
    where = raw.version if raw.present else version
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        check.problem(raw.line, f"must be a number (the lifetime epsilon of one memoized value), got {value!r}",
                      metric, KEY, where)
        return False
    if discoverable is not None:
        check.problem(raw.line, "a discoverable metric's levels are reported one-shot; drop 'discovery' or "
                                f"'{KEY}'", metric, KEY, where)
        return False
    try:
        return LongitudinalParams(value, params)
    except InvalidParameterError as exc:
        check.problem(raw.line, f"{exc.reason}, got {value!r}", metric, KEY, where)
        return False


def of(version) -> LongitudinalParams | None:
    """The version's longitudinal mode, None for one-shot reports."""
    return getattr(version, "longitudinal", None)


def plan_fields(lp: LongitudinalParams, n: int, confidence: float = 0.95) -> dict:
    """What ``ocms plan`` prints of a longitudinal version at n devices reporting once a day."""
    worst = lp.report.worst_case_mse(n)  # one day: one report per device, the one-shot law at (eps_1, g)
    f_star = lp.report.f_star if lp.report.f_star is not None else 1.0
    grid = [0.0, f_star]
    window = max(float(lp.window_variance(f, n * PLAN_DAYS, PLAN_DAYS)) for f in grid)
    floor = max(float(lp.memoized_variance(f, n)) for f in grid)
    out = {
        "mode": "longitudinal",
        "lifetime_epsilon": lp.lifetime_epsilon,
        "epsilon_per_report": lp.epsilon,
        "hash_range": lp.g,
        "lifetime_epsilon_constant_value": lp.lifetime_epsilon,
        "lifetime_epsilon_k_changes": f"min(k + 1, {lp.g}) x {lp.lifetime_epsilon:g}",
        "max_lifetime_epsilon": lp.max_lifetime_epsilon,
        "single_day_worst_case_mse": worst,
        "one_shot_worst_case_mse_same_epsilon": worst,
        "single_day_variance_ratio": 1.0,
        f"window_{PLAN_DAYS}_days_worst_case_mse": window,
        "memoized_floor_mse": floor,
        "ci_half_width_single_day": theory.normal_z(confidence) * math.sqrt(worst),
    }
    if not lp.report.is_direct:  # LOLOHA's published parameters, for comparison (cms_core.longitudinal)
        g = loloha_hash_range(lp.lifetime_epsilon, lp.epsilon)
        p1, q1 = first_round_probabilities(lp.lifetime_epsilon, g)
        p2, q2 = loloha_second_round_probabilities(lp.lifetime_epsilon, lp.epsilon, g)
        out["loloha_published_hash_range"] = g
        # the same objective as the metric's (worst case over [0, f*]), LONG_PURE without its sampling term
        loloha = max(float(long_pure_variance(p1, q1, p2, q2, f, 1, g=g)) - f * (1 - f) for f in grid)
        out["loloha_published_variance_ratio"] = loloha / lp.report.worst_case_mse(1)
    return out


def plan_lines(fields: dict) -> list[str]:
    """Human lines of :func:`plan_fields` (``ocms plan``)."""
    lines = [f"longitudinal     eps_1 = {fields['epsilon_per_report']:g} per report; eps_inf = "
             f"{fields['lifetime_epsilon']:g} for the whole life of a constant value; a value that changes k times: "
             f"{fields['lifetime_epsilon_k_changes']} (at most {fields['max_lifetime_epsilon']:g}, g = "
             f"{fields['hash_range']})",
             f"  single day       worst-case MSE {fields['single_day_worst_case_mse']:.4g}, the same as one-shot "
             f"reports at eps_1 (x{fields['single_day_variance_ratio']:.2f})",
             f"  {PLAN_DAYS} days          worst-case MSE {fields[f'window_{PLAN_DAYS}_days_worst_case_mse']:.4g} "
             f"(a device's reports are correlated); never below {fields['memoized_floor_mse']:.4g} "
             "(the memoized responses' noise)"]
    if fields.get("loloha_published_variance_ratio"):
        lines.append(f"  LOLOHA's published p2 and g = {fields['loloha_published_hash_range']} would cost "
                     f"x{fields['loloha_published_variance_ratio']:.2f} the worst-case variance of a day")
    return lines


def describe(lp: LongitudinalParams) -> dict:
    return lp.describe()


__all__ = ["KEY", "PLAN_DAYS", "describe", "of", "parse", "plan_fields", "plan_lines"]
