"""A version's report parameters from its privacy keys: 'epsilon', 'mode', 'f_star', 'tracked_count',
'hash_range' and 'mechanism', each from the version's mapping or else the metric's (its default). Unless a
metric pins one, the mechanism with the lower exact objective is used (issue 14).
"""

from __future__ import annotations

import math

from cms_core.errors import InvalidParameterError
from cms_core.params import MAX_HASH_RANGE, MECHANISM_CHOICES, OCMSParams, check_epsilon, compare_mechanisms

from . import numeric
from .load_checks import Checker, Field, is_int, is_number, show, version_or_metric
from .load_schema import PRIVACY_KEYS
from .model import TrackedSpec


class ParamsReader:
    """Builds each version's OCMSParams; keeps what mechanism auto's pick costs (its poisoning note)."""

    def __init__(self, check: Checker):
        self.check = check
        self.mechanism_notes: dict[tuple, str] = {}  # (metric, version) -> what mechanism auto's pick costs
        #: (metric, version) -> the hierarchical histogram (cms_core.hierarchy.HierarchyParams) of a numeric version
        #: reported as a tree (issue 40); its ``params`` are the tree's finest level's
        self.hierarchies: dict[tuple, object] = {}
        #: (metric, version) -> the Hybrid mean (registry.numeric.MeanSplit) of a numeric version whose
        #: ``numeric.mean_mechanism`` asks for it (issue 40)
        self.means: dict[tuple, object] = {}

    def build(self, entry, vmap, kind, d, tracked: TrackedSpec, metric, version, vline) -> OCMSParams | None:
        before = self.check.problem_count
        f = {k: version_or_metric(entry, vmap, k, version) for k in PRIVACY_KEYS}
        epsilon = self.epsilon(f["epsilon"], metric, vline)
        mode = self.mode(f["mode"], metric)
        f_star = self.f_star(f["f_star"], mode, f["hash_range"].present, metric)
        tracked_count = self.tracked_count(f["tracked_count"], tracked, d, metric)
        hash_range = self.hash_range(f["hash_range"], metric)
        mechanism = self.mechanism(f["mechanism"], f["hash_range"], hash_range, metric, numeric.KEY in entry)
        spec = numeric.spec_for(self.check, metric) if numeric.KEY in entry else None
        if spec is not None and spec.branching is not None and mechanism != numeric.HIERARCHY:
            self.check.problem(f["mechanism"].line if f["mechanism"].present else vline,
                               f"numeric.branching shapes a hierarchical histogram: give 'mechanism: "
                               f"{numeric.HIERARCHY}' (this version's is {mechanism!r}) or drop branching", metric,
                               "mechanism", version)
        if self.check.problem_count > before:
            return None
        shared = {"mode": mode, "f_star": f_star, "tracked_count": tracked_count,
                  "value_domain": "string" if kind == "strings" else "integer", "binding": f"{metric}@{version}"}
        try:
            if mechanism in ("auto", numeric.HIERARCHY) and spec is not None:  # issue 40: by CDF accuracy
                params, tree = numeric.tree_params(spec, epsilon, mechanism, f"{metric}@{version}")
                if tree is not None:
                    self.hierarchies[(metric, version)] = tree
                return self.with_mean(spec, epsilon, params, tree, metric, version)
            if mechanism == "auto":  # no hash_range here (checked above)
                # The comparison auto picks with also says when the pick is much more exposed to poisoning.
                comparison = compare_mechanisms(epsilon, None if kind == "strings" else d, **shared)
                if comparison.poisoning_note is not None:
                    self.mechanism_notes[(metric, version)] = comparison.poisoning_note
                return comparison.chosen
            params = OCMSParams.build(epsilon, None if kind == "strings" else d, hash_range=hash_range,
                                      mechanism=mechanism, **shared)
            return params if spec is None else self.with_mean(spec, epsilon, params, None, metric, version)
        except InvalidParameterError as exc:
            self.refused(exc, f, kind, mechanism, metric, version, vline)
            return None

    def with_mean(self, spec, epsilon: float, params: OCMSParams, tree, metric, version) -> OCMSParams:
        """``params``, keeping the version's Hybrid mean when its ``numeric.mean_mechanism`` asks for one."""
        split = numeric.mean_split(spec, epsilon, params, tree, f"{metric}@{version}/mean")
        if split is not None:
            self.means[(metric, version)] = split
        return params

    def refused(self, exc: InvalidParameterError, fields: dict, kind, mechanism, metric, version, vline) -> None:
        """The parameters cannot be built: name the key (on its line) whose value they refuse."""
        field = {"dictionary_size": kind, "value_domain": kind}.get(exc.name, exc.name)
        if mechanism == "direct" and exc.name in ("dictionary_size", "value_domain"):
            field = "mechanism"  # the dictionary is fine; direct RR cannot carry it
        source = fields.get(field)
        line = source.line if source is not None and source.present else vline
        self.check.problem(line, f"{exc.reason}, got {show(exc.value)}", metric, field,
                           source.version if source is not None and source.present else version)

    def wrong(self, field: Field, key: str, metric, message: str, line=None) -> None:
        self.check.problem(field.line if line is None else line, message, metric, key, field.version)

    # ------------------------------------------------------------ one key each
    def epsilon(self, eps: Field, metric, vline) -> float | None:
        if not eps.present:
            self.wrong(eps, "epsilon", metric, "missing; the privacy budget of one report (e.g. epsilon: 2), on the "
                                               "metric or on each version", line=vline)
        elif not is_number(eps.value):
            self.wrong(eps, "epsilon", metric, f"must be a number, got {show(eps.value)}")
        else:
            try:
                return check_epsilon(eps.value)
            except InvalidParameterError as exc:
                self.wrong(eps, "epsilon", metric, f"{exc.reason}, got {show(eps.value)}")
        return None

    def mode(self, field: Field, metric) -> str:
        if not field.present:
            return "mse"
        if field.value not in ("mse", "l2"):
            self.wrong(field, "mode", metric, f"must be 'mse' or 'l2', got {show(field.value)}")
        return field.value

    def f_star(self, field: Field, mode, hash_range_given: bool, metric) -> float:
        if not field.present:
            return 1.0
        value = field.value
        if not is_number(value) or math.isnan(value) or not 0 < value <= 1:
            self.wrong(field, "f_star", metric, f"must be a number in (0, 1], got {show(value)}")
        elif mode == "l2" and not hash_range_given:
            self.wrong(field, "f_star", metric, "applies to mode 'mse' only (mode 'l2' uses the tracked count)")
        else:
            return float(value)
        return 1.0

    def tracked_count(self, field: Field, tracked: TrackedSpec, d, metric) -> int:
        tracked_count = tracked.stop - tracked.start if tracked.kind == "range" else (
            d if tracked.kind == "all" else len(tracked.values))
        if field.present:
            if not is_int(field.value) or field.value < 1:
                self.wrong(field, "tracked_count", metric, f"must be an integer >= 1, got {show(field.value)}")
            else:
                tracked_count = int(field.value)
        return tracked_count

    def hash_range(self, field: Field, metric) -> int | None:
        if not field.present:
            return None
        if not is_int(field.value) or not 2 <= field.value <= MAX_HASH_RANGE:
            self.wrong(field, "hash_range", metric, f"must be an integer in [2, {MAX_HASH_RANGE}], got {show(field.value)}")
            return None
        return int(field.value)

    def mechanism(self, field: Field, hash_range_field: Field, hash_range, metric, is_numeric: bool = False) -> str:
        # An explicit m only exists for OCMS+RR; a hierarchical histogram only for a numeric metric (issue 40).
        mechanism = "auto" if hash_range is None else "ocms"
        choices = MECHANISM_CHOICES + (numeric.HIERARCHY,) if is_numeric else MECHANISM_CHOICES
        if field.present:
            if field.value == numeric.HIERARCHY and not is_numeric:
                self.wrong(field, "mechanism", metric, "'hierarchy' (a hierarchical histogram) is for numeric "
                                                       "metrics only: give 'numeric:' or another mechanism")
            elif field.value not in choices:
                self.wrong(field, "mechanism", metric, f"must be one of {', '.join(choices)}, got {show(field.value)}")
            elif field.value == numeric.HIERARCHY and hash_range is not None:
                self.wrong(hash_range_field, "hash_range", metric, "fixes OCMS+RR's m; a tree's levels choose "
                                                                   "their own (drop hash_range)")
            elif field.value == "auto" and hash_range is not None:
                self.wrong(hash_range_field, "hash_range", metric,
                           "fixes OCMS+RR's m; give 'mechanism: ocms' (or drop hash_range)")
            else:
                mechanism = field.value
        return mechanism
