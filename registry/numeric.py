"""A numeric metric (issue 40): a number per report, clipped to stated bounds and reported as its bucket's index.

In a registry file the value domain is a ``numeric:`` mapping::

    - name: request_latency_ms
      description: Time to first byte of an API request
      owner: web@example.com
      unit: ms
      numeric:
        lower: 0              # a value below is clipped to lower: it counts in the first bucket
        upper: 10000          # a value above is clipped to upper: it counts in the last bucket
        buckets: [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000]   # explicit upper bounds (Prometheus' le)
        # or   exponential: {scale: 2}   OpenTelemetry's base-2 exponential buckets (lower > 0)
        answers: [histogram, quantiles, mean]   # what is asked (default: all three)
        quantiles: [0.5, 0.9, 0.99]             # default; any q in (0, 1)
      epsilon: 1
      mechanism: auto

The version's parameters are an integer metric's over the ``k`` bucket indices (:class:`cms_core.numeric.BucketLayout`,
``k = len(bounds) + 1``), so the device clients, the wire format and the worker's decode path are the ones
frequencies use; every bucket is tracked. ``mechanism: auto`` picks, among the flat oracles (direct RR, OCMS+RR)
and the hierarchical histograms of :mod:`cms_core.hierarchy`, the one with the smallest predicted CDF variance
(:func:`cms_core.planning.choose_numeric_mechanism`, :func:`tree_params`); ``mechanism: hierarchy`` (with
``numeric.branching: B``, optional) pins a tree. A tree version's ``params`` are its finest level's and
``MetricVersion.tree_levels()`` its levels, each a parameter set of its own (binding ``name@version/level<l>``).
Validation names the metric, the field and the line, as the rest of the loader does.
"""

from __future__ import annotations

import dataclasses
import math

from cms_core import planning
from cms_core.errors import InvalidParameterError
from cms_core.numeric import DEFAULT_QUANTILES, BucketLayout
from cms_core.params import OCMSParams

KEY = "numeric"
#: The registry's mechanism of a numeric version reported as a hierarchical histogram (cms_core.hierarchy).
HIERARCHY = "hierarchy"
KEYS = ("lower", "upper", "buckets", "exponential", "answers", "quantiles", "branching")
ANSWERS = ("histogram", "quantiles", "mean")
#: Keys of an integer metric that a numeric one sets itself (every bucket is tracked) or does not carry yet
#: (longitudinal mode: the histogram's intervals are those of one-shot reports).
REFUSED_METRIC_KEYS = ("tracked", "watch", "discovery", "lifetime_epsilon")
MAX_QUANTILES = 32
#: ``ocms plan`` weighs hierarchical histograms up to this many buckets (their k x k solve: 15 s at 1,024 buckets,
#: growing as k^3); above, the flat oracles alone, and the plan says so.
MAX_PLANNED_HIERARCHY_BUCKETS = 1024
#: The reports ``mechanism: auto`` plans a numeric version for (issue 40's smallest benchmark n). Every candidate's
#: CDF variance scales as 1/n (n / h reports per level), so the pick does not depend on it beyond rounding n / h.
PLANNING_REPORTS = 100_000
#: ``mechanism: hierarchy`` without ``branching`` above MAX_PLANNED_HIERARCHY_BUCKETS (not planned there): Cormode
#: et al. (2019) find 4..8 best for range queries.
DEFAULT_BRANCHING = 4


@dataclasses.dataclass(frozen=True)
class NumericSpec:
    """A numeric metric's public description: its bucket layout (bounds and clipping), how the buckets were
    given (``explicit`` or ``exponential`` at ``scale``), what is asked and the quantiles every answer holds."""

    layout: BucketLayout
    scheme: str
    scale: int | None = None
    answers: tuple[str, ...] = ANSWERS
    quantiles: tuple[float, ...] = DEFAULT_QUANTILES
    #: The tree's branching of ``mechanism: hierarchy`` (None: the planner's best)
    branching: int | None = None

    @property
    def buckets(self) -> int:
        return self.layout.buckets

    def bucket(self, value) -> int:
        """A device's number -> its bucket index (clipped; :meth:`cms_core.numeric.BucketLayout.bucket`)."""
        return self.layout.bucket(value)

    def describe(self) -> dict:
        return {"lower": self.layout.lower, "upper": self.layout.upper, "bounds": list(self.layout.bounds),
                "buckets": self.buckets, "scheme": self.scheme, "scale": self.scale, "answers": list(self.answers),
                "quantiles": list(self.quantiles),
                "clipping": "a value below lower counts in the first bucket, one above upper in the last"}

    def device_config(self) -> dict:
        """What a device needs to bucketize (the device config's ``numeric``)."""
        return self.layout.to_config()


def of(version) -> NumericSpec | None:
    """The version's numeric description, None for a frequency metric."""
    return getattr(version, "numeric", None)


def _line(mapping, key):
    lines = getattr(mapping, "key_lines", None) or {}
    return lines.get(key, getattr(mapping, "line", None))


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse(loader, entry, metric, line):
    """The hook of the loader's value domain: ``("integers", None, k)`` for a valid ``numeric:`` mapping (its
    :class:`NumericSpec` kept for :func:`spec_for`), None after reporting every problem. The specs live on the
    loader object under ``numeric_specs``, set here, so the loader itself needs no change beyond its hooks."""
    specs = loader.__dict__.setdefault("numeric_specs", {})
    value, vline = entry[KEY], _line(entry, KEY)
    before = loader.problem_count
    for key in REFUSED_METRIC_KEYS:
        places = [(entry, None)] + [(v, v.get("version")) for v in entry.get("versions") or () if isinstance(v, dict)]
        for mapping, version in places:
            if key in mapping:
                why = ("reports a numeric metric one-shot" if key == "lifetime_epsilon"
                       else "tracks every bucket of a numeric metric")
                loader.problem(_line(mapping, key), f"the pipeline {why}; drop {key!r}", metric, key,
                               version if isinstance(version, int) else None)
    if not isinstance(value, dict):
        loader.problem(vline, "must be a mapping with lower, upper and buckets (or exponential)", metric, KEY)
        return None
    loader.unknown_keys(value, KEYS, metric, prefix=f"{KEY}.")
    for key in ("lower", "upper"):
        if key not in value:
            loader.problem(vline, f"missing; the {'smallest' if key == 'lower' else 'largest'} value kept (values "
                                  f"{'below' if key == 'lower' else 'above'} it are clipped to it)", metric,
                           f"{KEY}.{key}")
        elif not _number(value[key]):
            loader.problem(_line(value, key), f"must be a finite number, got {value[key]!r}", metric, f"{KEY}.{key}")
    given = [key for key in ("buckets", "exponential") if key in value]
    if len(given) != 1:
        loader.problem(vline, "give the buckets once: 'buckets: [BOUND, ...]' (explicit upper bounds) or "
                              "'exponential: {scale: S}' (OpenTelemetry's base-2 buckets)", metric, f"{KEY}.buckets")
    answers = _answers(loader, value, metric)
    quantiles = _quantiles(loader, value, metric)
    branching = _branching(loader, value, metric)
    if loader.problem_count > before:
        return None
    lower, upper = value["lower"], value["upper"]
    scheme, scale = given[0], None
    try:
        if scheme == "buckets":
            bounds = value["buckets"]
            if not isinstance(bounds, list) or not all(_number(b) for b in bounds):
                raise InvalidParameterError("buckets", bounds, "must be a list of finite numbers")
            layout = BucketLayout.explicit(list(bounds), lower, upper)
            scheme = "explicit"
        else:
            block = value["exponential"]
            if not isinstance(block, dict) or set(block) != {"scale"}:
                raise InvalidParameterError("exponential", block, "must be {scale: S}, S an integer")
            scale = block["scale"]
            layout = BucketLayout.exponential(scale, lower, upper)
    except InvalidParameterError as exc:
        key = {"bounds": "buckets"}.get(exc.name, exc.name)  # BucketLayout's names -> the registry's keys
        where = value["exponential"] if key == "scale" else value
        field = f"{KEY}.exponential.scale" if key == "scale" else f"{KEY}.{key}"
        loader.problem(_line(where, key), f"{exc.reason}, got {exc.value!r}", metric, field)
        return None
    if branching is not None and branching >= layout.buckets:
        loader.problem(_line(value, "branching"), f"must be below the {layout.buckets} buckets (a tree of one level "
                                                  "is a flat oracle: mechanism direct or ocms)", metric,
                       f"{KEY}.branching")
        return None
    specs[metric] = NumericSpec(layout, scheme, scale, answers, quantiles, branching)
    return "integers", None, layout.buckets


def _answers(loader, value, metric) -> tuple[str, ...]:
    if "answers" not in value:
        return ANSWERS
    raw = value["answers"]
    if not isinstance(raw, list) or not raw or any(a not in ANSWERS for a in raw) or len(set(raw)) != len(raw):
        loader.problem(_line(value, "answers"), f"must be a list of distinct answers among {', '.join(ANSWERS)}, "
                                                f"got {raw!r}", metric, f"{KEY}.answers")
        return ANSWERS
    return tuple(raw)


def _quantiles(loader, value, metric) -> tuple[float, ...]:
    if "quantiles" not in value:
        return DEFAULT_QUANTILES
    raw = value["quantiles"]
    if (not isinstance(raw, list) or not raw or len(raw) > MAX_QUANTILES
            or not all(_number(q) and 0 < q < 1 for q in raw)):
        loader.problem(_line(value, "quantiles"), f"must be a list of 1 to {MAX_QUANTILES} numbers in (0, 1), "
                                                  f"got {raw!r}", metric, f"{KEY}.quantiles")
        return DEFAULT_QUANTILES
    return tuple(sorted(set(float(q) for q in raw)))


def _branching(loader, value, metric) -> int | None:
    from cms_core.hierarchy import MAX_BRANCHING, MIN_BRANCHING

    if "branching" not in value:
        return None
    raw = value["branching"]
    if isinstance(raw, bool) or not isinstance(raw, int) or not MIN_BRANCHING <= raw <= MAX_BRANCHING:
        loader.problem(_line(value, "branching"), f"must be an integer in [{MIN_BRANCHING}, {MAX_BRANCHING}] (the "
                                                  f"hierarchical histogram's fan-out), got {raw!r}", metric,
                       f"{KEY}.branching")
        return None
    return raw


def spec_for(loader, metric) -> NumericSpec | None:
    """The numeric description :func:`parse` kept for ``metric`` (None: a frequency metric)."""
    return loader.__dict__.get("numeric_specs", {}).get(metric)


def tree_params(spec: NumericSpec, epsilon: float, mechanism: str, binding: str):
    """The parameters of a numeric version whose mechanism is ``auto`` or ``hierarchy``: ``(params, tree)``, the
    flat oracle over the buckets and no tree, or a hierarchical histogram (:class:`cms_core.hierarchy.HierarchyParams`,
    binding ``<binding>/level<l>`` per level) and its finest level's parameters. ``auto``: the mechanism with the
    smallest predicted mean CDF variance (:func:`cms_core.planning.choose_numeric_mechanism` at
    :data:`PLANNING_REPORTS`; above :data:`MAX_PLANNED_HIERARCHY_BUCKETS` buckets the flat oracles alone);
    ``hierarchy``: the tree of the spec's ``branching``, else the planner's best tree (else
    :data:`DEFAULT_BRANCHING` above the planned size)."""
    from cms_core.hierarchy import HierarchyParams

    k = spec.buckets
    planned = k <= MAX_PLANNED_HIERARCHY_BUCKETS
    branching = spec.branching if mechanism == "hierarchy" else None
    if branching is None and (planned or mechanism == "auto"):
        choice = planning.choose_numeric_mechanism(k, epsilon, PLANNING_REPORTS, flat_only=not planned)
        best = choice["chosen"] if mechanism == "auto" else choice["best_hierarchy"]
        if best is None:
            raise InvalidParameterError("mechanism", mechanism, f"needs at least 3 buckets for a tree (got {k}: a "
                                                                "tree over 2 is a flat oracle, direct or ocms)")
        if best in planning.FLAT_NUMERIC_MECHANISMS:
            flat = planning.FLAT_NUMERIC_MECHANISMS[best]
            return OCMSParams.build(epsilon, k, mode="l2", tracked_count=k, binding=binding, mechanism=flat), None
        branching = choice["candidates"][best]["branching"]
    tree = HierarchyParams.build(k, epsilon, branching or DEFAULT_BRANCHING, binding=binding)
    return tree.levels[-1], tree


def audited_epsilon(version) -> float:
    """The realised epsilon of one report of a numeric version, exactly (the largest probability ratio of any output
    over every pair of buckets, from the integer keep thresholds the device path uses): a tree's through
    :func:`cms_core.hierarchy.exact_privacy_loss` (the level is drawn apart from the value), a flat oracle's through
    :func:`cms_core.audit.exact_privacy_loss`. Small fields only (InvalidParameterError above
    :data:`cms_core.audit.MAX_EXACT_OUTPUTS` outputs a level); O(k^2 x outputs) with exact rationals."""
    from cms_core import audit, hierarchy

    tree = getattr(version, "hierarchy", None)
    ratio = hierarchy.exact_privacy_loss(tree) if tree is not None else audit.exact_privacy_loss(version.params)
    return math.log(ratio)


def plan_fields(version, n: int, confidence: float = 0.95) -> dict:
    """What ``ocms plan`` prints of a numeric version at n reports: every candidate's predicted CDF error (the
    standard deviation of the CDF at the median edge, uniform buckets), the version's own mechanism (a flat oracle
    or its tree) and the most accurate one."""
    from cms_core.theory import normal_z

    spec = of(version)
    flat_only = spec.buckets > MAX_PLANNED_HIERARCHY_BUCKETS
    choice = planning.choose_numeric_mechanism(spec.buckets, version.params.epsilon, n, flat_only=flat_only)
    tree = getattr(version, "hierarchy", None)
    own = tree.name if tree is not None else ("direct-rr" if version.params.is_direct else "ocms-rr")
    z = normal_z(confidence)
    rows = {name: {"median_cdf_sd": c["median_cdf_sd"], "mean_cdf_variance": c["mean_cdf_variance"],
                   "median_rank_error_ci": z * c["median_cdf_sd"], "branching": c["branching"],
                   "height": c["height"]} for name, c in choice["candidates"].items()}
    best_tree = choice["best_hierarchy"]
    return {"buckets": spec.buckets, "n": n, "confidence": confidence, "mechanism": own, "candidates": rows,
            "most_accurate": choice["chosen"], "best_hierarchy": best_tree, "hierarchies_weighed": not flat_only,
            "predicted_median_rank_error_ci": rows[own]["median_rank_error_ci"] if own in rows else None}


def plan_lines(fields: dict) -> list[str]:
    """Human lines of :func:`plan_fields`."""
    own = fields["candidates"].get(fields["mechanism"])
    error = ("its CDF error is not predicted above "  # a tree the registry pins above the planned size
             f"{MAX_PLANNED_HIERARCHY_BUCKETS:,} buckets" if own is None else
             f"the CDF at the median +-{own['median_rank_error_ci']:.3%} in rank ({fields['confidence']:.0%}, "
             f"uniform buckets, n={fields['n']:,})")
    lines = [f"numeric: {fields['buckets']} buckets, reported with {fields['mechanism']}: {error}"]
    for name in ("direct-rr", "ocms-rr", fields["best_hierarchy"]):
        if name is None or name == fields["mechanism"]:
            continue
        row = fields["candidates"][name]
        lines.append(f"  {name:<15} +-{row['median_rank_error_ci']:.3%}")
    best = fields["most_accurate"]
    if not fields["hierarchies_weighed"]:
        lines.append(f"  hierarchical histograms not weighed above {MAX_PLANNED_HIERARCHY_BUCKETS:,} buckets "
                     "(their k x k solve grows as k^3)")
    elif best != fields["mechanism"]:
        how = ("'mechanism: auto' picks it" if best in planning.FLAT_NUMERIC_MECHANISMS else
               f"'mechanism: auto' (or '{HIERARCHY}', numeric.branching {fields['candidates'][best]['branching']}) "
               "reports it")
        lines.append(f"  {best} would be more accurate at this resolution: {how} in a new version")
    return lines


__all__ = ["HIERARCHY", "KEY", "NumericSpec", "audited_epsilon", "tree_params", "of", "parse", "plan_fields", "plan_lines", "spec_for"]
