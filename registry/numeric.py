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
        mean_mechanism: auto    # the mean from the histogram (default: histogram), the Hybrid mechanism (hybrid),
                                # or whichever predicts the smaller variance (auto)
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

**The mean.** Read from the histogram (each bucket at its midpoint) unless ``mean_mechanism`` says otherwise:
``hybrid`` sends Wang et al.'s Hybrid mechanism's reports of the clipped value (:mod:`cms_core.hybrid`), ``auto``
does where it predicts the smaller variance of the mean than the histogram's
(:func:`cms_core.planning.choose_mean_mechanism`, uniform buckets, at :data:`PLANNING_REPORTS`). A version with a
Hybrid mean (:class:`MeanSplit`, ``MetricVersion.mean``) splits its devices: each report first draws one of
``parts`` parts, ``draw_below(parts)``, independently of its value; part 0 is a Hybrid report, the others the
histogram's (a tree then draws its level as before). ``parts`` is the histogram's levels plus one (1 for a flat
oracle: 2 parts), or 1 when only the mean is asked (every report a Hybrid one, no draw). The default stays
``histogram`` so that a published version keeps its meaning; ``ocms plan`` says when the Hybrid one is more
accurate.
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
KEYS = ("lower", "upper", "buckets", "exponential", "answers", "quantiles", "branching", "mean_mechanism")
#: ``numeric.mean_mechanism``: where the mean comes from (module docstring, The mean); the first is the default.
MEAN_MECHANISMS = ("histogram", "hybrid", "auto")
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
    #: Where the mean comes from: one of :data:`MEAN_MECHANISMS`
    mean_mechanism: str = "histogram"

    @property
    def buckets(self) -> int:
        return self.layout.buckets

    def bucket(self, value) -> int:
        """A device's number -> its bucket index (clipped; :meth:`cms_core.numeric.BucketLayout.bucket`)."""
        return self.layout.bucket(value)

    def measure(self, value) -> "Measured":
        """:meth:`bucket`, remembering the number: a version with a Hybrid mean reports the number itself."""
        return Measured(self.layout.bucket(value), float(value))

    def describe(self) -> dict:
        return {"lower": self.layout.lower, "upper": self.layout.upper, "bounds": list(self.layout.bounds),
                "buckets": self.buckets, "scheme": self.scheme, "scale": self.scale, "answers": list(self.answers),
                "quantiles": list(self.quantiles), "mean_mechanism": self.mean_mechanism,
                "clipping": "a value below lower counts in the first bucket, one above upper in the last"}

    def mean_only_answer(self, confidence: float) -> dict:
        """The answer's fields when every report is a Hybrid mean's: no bucket, CDF or quantile
        (:func:`cms_core.hybrid.with_mean` adds the mean)."""
        return {"buckets": [], "cdf": [], "quantiles": [], "confidence": confidence, "layout": self.describe(),
                "clipped_to": [self.layout.lower, self.layout.upper], "n": 0}

    def device_config(self) -> dict:
        """What a device needs to bucketize (the device config's ``numeric``)."""
        return self.layout.to_config()


class Measured(int):
    """A number's bucket index (what the histogram's report takes) that keeps the ``number`` (what a Hybrid mean's
    report takes, :func:`cms_core.hybrid.privatize_value`)."""

    number: float

    def __new__(cls, bucket: int, number: float) -> "Measured":
        measured = super().__new__(cls, bucket)
        measured.number = number
        return measured


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
    mean_mechanism = _mean_mechanism(loader, value, metric, answers)
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
    specs[metric] = NumericSpec(layout, scheme, scale, answers, quantiles, branching, mean_mechanism)
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


def _mean_mechanism(loader, value, metric, answers) -> str:
    raw = value.get("mean_mechanism", MEAN_MECHANISMS[0])
    if not isinstance(raw, str) or raw not in MEAN_MECHANISMS:
        loader.problem(_line(value, "mean_mechanism"), f"must be one of {', '.join(MEAN_MECHANISMS)} (where the mean "
                                                       f"comes from), got {raw!r}", metric, f"{KEY}.mean_mechanism")
        return MEAN_MECHANISMS[0]
    if raw != MEAN_MECHANISMS[0] and "mean" not in answers:
        loader.problem(_line(value, "mean_mechanism"), f"{raw!r} reports a mean, which answers {list(answers)!r} "
                                                       "does not ask for: add mean to answers or drop "
                                                       "mean_mechanism", metric, f"{KEY}.mean_mechanism")
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


@dataclasses.dataclass(frozen=True)
class MeanSplit:
    """A version's Hybrid mean (module docstring, The mean): the mechanism's parameters, how many parts a device
    draws from (part 0: a Hybrid report) and the planner's comparison that chose it
    (:func:`cms_core.planning.choose_mean_mechanism` at :data:`PLANNING_REPORTS`)."""

    hybrid: object  # cms_core.hybrid.HybridParams
    parts: int
    choice: dict
    #: How the reports travel: direct RR's parameters over the ``M + 2`` report values (binding
    #: ``name@version/mean``), so the wire format, the collector and the worker's counts are the integer path's
    #: (a record is z alone; the worker counts each z, and the mean is a fold of those counts,
    #: :func:`cms_core.hybrid.fold_counts`). Its keep threshold is never used: the device runs
    #: :func:`cms_core.hybrid.privatize_value`.
    carrier: object = None

    @property
    def fingerprint(self) -> bytes:
        """What a frame of this version's Hybrid reports carries (the carrier's)."""
        return self.carrier.fingerprint

    def describe(self) -> dict:
        return {"mechanism": "hybrid", "parts": self.parts, "fingerprint": self.fingerprint.hex(),
                "hybrid_fingerprint": self.hybrid.fingerprint.hex(),
                "params": {"epsilon": self.hybrid.epsilon, **self.hybrid.to_config()},
                "predicted_sd": {"hybrid": self.choice["hybrid_sd"], "histogram": self.choice["histogram_sd"]}}


def mean_config(split: MeanSplit) -> dict:
    """What a device needs of a Hybrid mean (the device config's ``mean``, docs/device.md "Numeric means"): the
    carrier's ``fingerprint`` its reports are framed with, ``parts`` and the mechanism's integer thresholds."""
    return {"fingerprint": split.fingerprint.hex(), "parts": split.parts, **split.hybrid.to_config()}


def mean_parts(spec: NumericSpec, tree) -> int:
    """The parts a device of a version with a Hybrid mean draws from: 1 when only the mean is asked, else the
    histogram's levels (1 for a flat oracle) plus the mean's."""
    return 1 if spec.answers == ("mean",) else (tree.height if tree is not None else 1) + 1


def mean_split(spec: NumericSpec, epsilon: float, params, tree, binding: str) -> MeanSplit | None:
    """The version's Hybrid mean, or None when its mean is read from the histogram: ``mean_mechanism: hybrid``
    always, ``auto`` when :func:`cms_core.planning.choose_mean_mechanism` predicts the smaller variance (uniform
    buckets, :data:`PLANNING_REPORTS` devices, the histogram from all of them against the Hybrid mechanism from
    ``1 / parts`` of them); ``binding`` is the carrier's (``name@version/mean``). InvalidParameterError (naming
    epsilon) when the Hybrid mechanism cannot be built."""
    from cms_core.hybrid import HybridParams

    if spec.mean_mechanism == "histogram" or "mean" not in spec.answers:
        return None
    hybrid = HybridParams.build(epsilon, spec.layout.lower, spec.layout.upper)
    parts = mean_parts(spec, tree)
    choice = planning.choose_mean_mechanism(spec.layout, hybrid, params, tree, PLANNING_REPORTS, parts)
    if spec.mean_mechanism == "auto" and choice["chosen"] != "hybrid":
        return None
    carrier = OCMSParams.build(epsilon, hybrid.outputs, mode="l2", tracked_count=hybrid.outputs, mechanism="direct",
                               binding=binding)
    return MeanSplit(hybrid, parts, choice, carrier)


def audited_epsilon(version) -> float:
    """The realised epsilon of one report of a numeric version, exactly (the largest probability ratio of any output
    over every pair of buckets, from the integer keep thresholds the device path uses): a tree's through
    :func:`cms_core.hierarchy.exact_privacy_loss` (the level is drawn apart from the value), a flat oracle's through
    :func:`cms_core.audit.exact_privacy_loss`; a Hybrid mean's (the larger of the two) through
    :func:`cms_core.hybrid.exact_privacy_loss`. Small fields only (InvalidParameterError above
    :data:`cms_core.audit.MAX_EXACT_OUTPUTS` outputs a level); O(k^2 x outputs) with exact rationals."""
    from cms_core import audit, hierarchy, hybrid

    tree = getattr(version, "hierarchy", None)
    ratio = hierarchy.exact_privacy_loss(tree) if tree is not None else audit.exact_privacy_loss(version.params)
    mean = getattr(version, "mean", None)
    if mean is not None:  # a report is one part's, the part drawn apart from the value: the larger loss of the two
        ratio = max(ratio, hybrid.exact_privacy_loss(mean.hybrid))
    return math.log(ratio)


def plan_fields(version, n: int, confidence: float = 0.95) -> dict:
    """What ``ocms plan`` prints of a numeric version at n reports: every candidate's predicted CDF error (the
    standard deviation of the CDF at the median edge, uniform buckets), the version's own mechanism (a flat oracle
    or its tree) and the most accurate one."""
    from cms_core.theory import normal_z

    spec = of(version)
    flat_only = spec.buckets > MAX_PLANNED_HIERARCHY_BUCKETS
    mean = getattr(version, "mean", None)
    heard = n * (mean.parts - 1) // mean.parts if mean is not None and mean.parts > 1 else n  # the histogram's share
    choice = planning.choose_numeric_mechanism(spec.buckets, version.params.epsilon, max(heard, 1), flat_only=flat_only)
    tree = getattr(version, "hierarchy", None)
    own = tree.name if tree is not None else ("direct-rr" if version.params.is_direct else "ocms-rr")
    z = normal_z(confidence)
    rows = {name: {"median_cdf_sd": c["median_cdf_sd"], "mean_cdf_variance": c["mean_cdf_variance"],
                   "median_rank_error_ci": z * c["median_cdf_sd"], "branching": c["branching"],
                   "height": c["height"]} for name, c in choice["candidates"].items()}
    best_tree = choice["best_hierarchy"]
    return {"buckets": spec.buckets, "n": n, "confidence": confidence, "mechanism": own, "candidates": rows,
            "most_accurate": choice["chosen"], "best_hierarchy": best_tree, "hierarchies_weighed": not flat_only,
            "predicted_median_rank_error_ci": rows[own]["median_rank_error_ci"] if own in rows else None,
            "histogram_reports": heard, **({"mean": _mean_plan(version, n, z)} if "mean" in spec.answers else {})}


def _mean_plan(version, n: int, z: float) -> dict | None:
    """The mean's two predicted errors at ``n`` devices (:func:`cms_core.planning.choose_mean_mechanism`), which
    one the version uses and which is more accurate; None when ``n`` is below the parts."""
    from cms_core.hybrid import HybridParams

    spec, tree, mean = of(version), getattr(version, "hierarchy", None), getattr(version, "mean", None)
    parts = mean.parts if mean is not None else mean_parts(spec, tree)
    if n < parts:
        return None
    hybrid = mean.hybrid if mean is not None else HybridParams.build(version.params.epsilon, spec.layout.lower,
                                                                     spec.layout.upper)
    choice = planning.choose_mean_mechanism(spec.layout, hybrid, version.params, tree, n, parts)
    return {"mechanism": "hybrid" if mean is not None else "histogram", "setting": spec.mean_mechanism,
            "parts": parts, "more_accurate": choice["chosen"], "histogram_sd": choice["histogram_sd"],
            "hybrid_sd": choice["hybrid_sd"], "histogram_ci": z * choice["histogram_sd"],
            "hybrid_ci": z * choice["hybrid_sd"], "cdf_variance_factor": choice["cdf_variance_factor"]}


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
    return lines + _mean_lines(fields)


def _mean_lines(fields: dict) -> list[str]:
    mean = fields.get("mean")
    if mean is None:
        return []
    how = (f"1 device in {mean['parts']} draws a Hybrid report" if mean["parts"] > 1 else "every report a Hybrid one")
    hybrid = f"Hybrid mechanism +-{mean['hybrid_ci']:.4g} ({how})"
    histogram = f"from the histogram +-{mean['histogram_ci']:.4g}"
    used, other = (hybrid, histogram) if mean["mechanism"] == "hybrid" else (histogram, hybrid)
    lines = [f"  mean: {used} ({fields['confidence']:.0%}, metric's units, uniform buckets, n={fields['n']:,}); "
             f"{other}"]
    if mean["mechanism"] == "hybrid" and mean["cdf_variance_factor"]:
        lines.append(f"    the histogram hears {fields['histogram_reports']:,} of them (CDF variances x"
                     f"{mean['cdf_variance_factor']:.3g})")
    if mean["more_accurate"] != mean["mechanism"]:
        setting = "hybrid' or 'auto" if mean["more_accurate"] == "hybrid" else "histogram"
        lines.append(f"    the {mean['more_accurate']} mean would be more accurate: 'numeric.mean_mechanism: "
                     f"{setting}' in a new version")
    return lines


__all__ = ["HIERARCHY", "KEY", "MEAN_MECHANISMS", "MeanSplit", "NumericSpec", "audited_epsilon", "mean_parts",
           "mean_split", "tree_params", "of", "parse", "plan_fields", "plan_lines", "spec_for"]
