"""A hierarchical histogram over the ``k`` buckets of a numeric metric (issue 40, fine resolution).

The mechanism is Cormode, Kulkarni, Srivastava's hierarchical method ("Answering range queries under local
differential privacy", PVLDB 2019) with Hay, Rastogi, Miklau, Suciu's constrained inference ("Boosting the
accuracy of differentially private histograms through consistency", PVLDB 2010):

* **The tree.** A ``B``-ary tree over the bucket indices ``0..k-1``: ``h`` levels below the root, ``h`` the
  smallest with ``B^h >= k``; level ``l`` (1 = just below the root, ``h`` = the leaves, the buckets) has
  ``ceil(k / B^(h - l))`` nodes and bucket ``i`` is in its node ``i // B^(h - l)``.
* **The device** draws one level uniformly (``draw_below(h) + 1``, independently of its value, as a discovery
  report does: :mod:`cms_core.discovery`) and reports its node at that level through that level's frequency
  oracle at the **full** epsilon: the level's own :class:`OCMSParams` over the level's nodes, direct RR or
  OCMS+RR, whichever :func:`cms_core.params.compare_mechanisms` finds more accurate for that many nodes
  (binding ``"<binding>/level<l>"``, so levels never mix). A report is ``(level, Report)``; as one integer
  (:meth:`HierarchyParams.report_value`) it is ``offset[l] + z``, the level's reports stacked over their hash
  ranges, and OCMS+RR's public coefficients ``(a0, a1)`` travel as any OCMS+RR report's do.
* **The server** decodes each level on its own reports (unbiased node frequencies: each level's estimate is
  scaled by the number of devices that reported at it), then fits the consistent tree: the weighted least-squares
  leaf frequencies ``x`` (summing to 1) whose node sums are closest to every level's estimates, each node
  weighted by the inverse of its level's variance per node. For equal variances this is exactly what Hay et al.'s
  two passes (weighted averaging up, mean consistency down) compute; the levels here have different variances
  (different oracles and device counts), so the same projection is solved with per-level weights. The CDF at
  bucket edge ``j`` is ``x_0 + .. + x_j`` (the range ``[0, j]``, which the raw tree answers with at most ``B - 1``
  nodes per level: :func:`cms_core.theory.range_node_counts`), then made monotone by
  :class:`cms_core.numeric.Histogram` (isotonic regression with absorbing bounds:
  :func:`cms_core.numeric.monotone_cdf`).

**Privacy guarantee.** Each report is epsilon-LDP: the level is drawn independently of the value (so it is
public and costs nothing), and the node goes through one epsilon-LDP report of that level's parameters
(:mod:`cms_core.params`); ``P((l, r) | x) / P((l, r) | x') = P(r | node_l(x)) / P(r | node_l(x')) <= e^eps``.
Everything else is post-processing. Audited exactly by :func:`exact_privacy_loss`.

**Cost.** Device: one level draw and one report of that level (microseconds). Server: decoding is the levels'
decode (O(reports x nodes) for OCMS+RR levels in the compiled kernel, O(reports) for direct RR); the consistent
tree is a dense ``k x k`` solve, O(k^2 N + k^3) with ``N`` the number of nodes (milliseconds at k = 40, a
fraction of a second at k = 1,024; :data:`cms_core.numeric.MAX_BUCKETS` 4,096 takes seconds).

**Utility.** The leaf estimate is a fixed linear map ``x = L y + c`` of the levels' unbiased estimates ``y``
(the weights do not depend on the data), so it is unbiased and every linear functional ``w . x`` (a CDF value, the
mean) has the variance

    Var(w . x) = sum_l (sum_j G_lj^2 d_lj - (G_l . u_l)^2) / n_l  -  Var_f(w) / n

with ``G = w L`` split by level, ``(d_l, u_l)`` the level oracle's per-report covariance terms at the level's node
frequencies (:func:`cms_core.theory.grr_level_terms`, exact; :func:`cms_core.theory.ocms_level_terms`, for a fully
random hash), ``n_l`` the reports at level ``l`` and ``Var_f(w) = sum_i f_i w_i^2 - (f . w)^2``. The first sum is
the variance for devices drawn anew from ``f``; the answer is about these devices, and since the levels split them
at random, the split's sampling variance ``sum_l Var_f(a_l) / n_l - Var_f(sum_l a_l) / n`` (stratified sampling
without replacement, ``a_l(x) = G_l[node_l(x)]``, and ``sum_l a_l(x) = w_x`` up to a constant because the map
returns any consistent tree unchanged) leaves exactly ``Var_f(w) / n`` to take out, up to the ``n / (n - 1)``
of sampling without replacement. With one level it is :func:`cms_core.numeric.direct_rr_functional_variance`. It
is the variance after consistency, not a bound.
Prefix [0, j] before consistency: ``sum_l r_l(j) sigma_l^2`` with ``r_l(j) <= B - 1`` nodes of variance
``sigma_l^2 ~ h V_l / n`` at level ``l``; consistency lowers it (Hay et al.: by a constant factor for
equal variances). :func:`cms_core.planning.choose_numeric_mechanism` compares this with direct RR over the
buckets (the one-level tree, ``B >= k``) and picks ``B``.

**Limitations.** Uniform level weights only (the randomness contract's ``draw_below``); a tree sized by
``B^h >= k`` wastes nothing (partial nodes at the right edge), but the right-most nodes of a level may hold
fewer buckets than ``B^(h - l)``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from fractions import Fraction
from typing import Sequence

import numpy as np

from . import kernel, theory
from .errors import InvalidParameterError
from .params import OCMSParams, check_epsilon, compare_mechanisms
from .privatize import RandomBytes, draw_below, privatize, simulate_reports
from .reports import Report, ReportBatch
from .values import TrackedValues

#: Branching factors the planner tries (Cormode et al. 2019 find 4..8 best for range queries).
MIN_BRANCHING, MAX_BRANCHING = 2, 16
#: Most buckets a hierarchy covers (:data:`cms_core.numeric.MAX_BUCKETS`).
MAX_HIERARCHY_BUCKETS = 4096


def _check_count(name: str, value, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidParameterError(name, value, "must be an integer")
    value = int(value)
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"in [{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
        raise InvalidParameterError(name, value, f"must be {bound}")
    return value


def tree_height(buckets: int, branching: int) -> int:
    """``h``: the smallest number of levels below the root with ``B^h >= k`` (1 when ``B >= k``)."""
    height = 1
    while branching**height < buckets:
        height += 1
    return height


def level_sizes(buckets: int, branching: int) -> tuple[int, ...]:
    """Nodes per level, level 1 first and the ``k`` leaves last: ``ceil(k / B^(h - l))``."""
    height = tree_height(buckets, branching)
    return tuple(-(-buckets // branching ** (height - level)) for level in range(1, height + 1))


def level_oracle(epsilon: float, nodes: int, binding: str | None = None, mechanism: str = "auto") -> OCMSParams:
    """The frequency oracle of a level of ``nodes`` nodes: direct RR or OCMS+RR, whichever has the smaller
    summed variance over the level's nodes (l2 objective, D = nodes; :func:`cms_core.params.compare_mechanisms`),
    or the ``mechanism`` given."""
    if mechanism == "auto":
        return compare_mechanisms(epsilon, nodes, mode="l2", tracked_count=nodes, binding=binding).chosen
    return OCMSParams.build(epsilon, nodes, mode="l2", tracked_count=nodes, binding=binding, mechanism=mechanism)


@dataclasses.dataclass(frozen=True)
class HierarchyParams:
    """A hierarchical histogram's public parameters: ``buckets`` (k), ``branching`` (B), ``epsilon`` and one
    :class:`OCMSParams` per level (``levels[l - 1]`` over that level's nodes). Build with :meth:`build`."""

    buckets: int
    branching: int
    epsilon: float
    levels: tuple[OCMSParams, ...]

    @classmethod
    def build(cls, buckets: int, epsilon: float, branching: int, binding: str | None = None,
              mechanism: str = "auto") -> "HierarchyParams":
        """The tree of ``branching`` (2..16, or any ``B >= k``: one level, a flat oracle over the buckets) over
        ``buckets`` (2..4096) buckets at ``epsilon`` per report; each level's oracle by :func:`level_oracle`
        (``mechanism="auto"``), or every level's ``"direct"`` / ``"ocms"``."""
        if mechanism not in ("auto", "direct", "ocms"):
            raise InvalidParameterError("mechanism", mechanism, "expected 'auto', 'direct' or 'ocms'")
        buckets = _check_count("buckets", buckets, 2, MAX_HIERARCHY_BUCKETS)
        branching = _check_count("branching", branching, MIN_BRANCHING)
        if branching > MAX_BRANCHING and branching < buckets:
            raise InvalidParameterError("branching", branching, f"must be in [{MIN_BRANCHING}, {MAX_BRANCHING}], "
                                                                f"or >= buckets={buckets} (one level)")
        branching = min(branching, buckets)
        epsilon = check_epsilon(epsilon)
        levels = tuple(level_oracle(epsilon, size, None if binding is None else f"{binding}/level{level}",
                                    mechanism)
                       for level, size in enumerate(level_sizes(buckets, branching), start=1))
        return cls(buckets, branching, epsilon, levels)

    @property
    def height(self) -> int:
        return len(self.levels)

    @property
    def sizes(self) -> tuple[int, ...]:
        return level_sizes(self.buckets, self.branching)

    @property
    def name(self) -> str:
        """``direct-rr`` / ``ocms-rr`` for a one-level tree (a flat oracle over the buckets), else
        ``hierarchy-B<B>``."""
        if self.height == 1:
            return "direct-rr" if self.levels[0].is_direct else "ocms-rr"
        return f"hierarchy-B{self.branching}"

    def span(self, level: int) -> int:
        """Buckets under one node of ``level`` (the right-most node may hold fewer)."""
        return self.branching ** (self.height - level)

    def node(self, bucket, level: int):
        """The node of ``level`` holding ``bucket`` (an int or an array)."""
        return bucket // self.span(level)

    def offsets(self) -> tuple[int, ...]:
        """Where each level's reports start in :meth:`report_value`'s integers (over the levels' hash ranges)."""
        out, total = [], 0
        for params in self.levels:
            out.append(total)
            total += params.hash_range
        return tuple(out)

    def report_value(self, level: int, z: int) -> int:
        """One integer for a report's level and randomized node: ``offset[level] + z``."""
        level = _check_count("level", level, 1, self.height)
        z = _check_count("z", z, 0, self.levels[level - 1].hash_range - 1)
        return self.offsets()[level - 1] + z

    def split_value(self, value: int) -> tuple[int, int]:
        """The inverse of :meth:`report_value`."""
        value = _check_count("value", value, 0, sum(p.hash_range for p in self.levels) - 1)
        level = int(np.searchsorted(np.asarray(self.offsets()), value, side="right"))
        return level, value - self.offsets()[level - 1]

    def describe(self) -> dict:
        return {"mechanism": self.name, "buckets": self.buckets, "branching": self.branching, "epsilon": self.epsilon,
                "levels": [{"nodes": size, "mechanism": p.mechanism, "hash_range": p.hash_range}
                           for size, p in zip(self.sizes, self.levels)]}


@dataclasses.dataclass(frozen=True)
class HierarchyReport:
    """One device's report: its ``level`` (1..h, public) and that level's report of its node."""

    level: int
    report: Report


def _check_bucket(params: HierarchyParams, bucket) -> int:
    return _check_count("bucket", bucket, 0, params.buckets - 1)


def privatize_bucket(params: HierarchyParams, bucket: int, random: RandomBytes = os.urandom) -> HierarchyReport:
    """Device path: one epsilon-LDP report of ``bucket``: the level ``draw_below(h) + 1`` first, then the level's
    report of the bucket's node (:func:`cms_core.privatize.privatize`, CSPRNG randomness only)."""
    level, node = draw_node(params, bucket, random)
    return HierarchyReport(level, privatize(params.levels[level - 1], node, random))


def draw_node(params: HierarchyParams, bucket: int, random: RandomBytes = os.urandom) -> tuple[int, int]:
    """The device's first step: its level ``draw_below(h) + 1`` (independent of the value) and its bucket's node
    there; a client reports the node with ``params.levels[level - 1]`` (framed with that level's fingerprint)."""
    bucket = _check_bucket(params, bucket)
    level = draw_below(random, params.height) + 1
    return level, int(params.node(bucket, level))


def simulate(params: HierarchyParams, buckets: np.ndarray, rng: np.random.Generator) -> list[ReportBatch]:
    """Simulation path (seeded, never on a device): each device's level uniformly, then its level's reports;
    one :class:`ReportBatch` per level."""
    return simulate_levels(params, buckets, rng)[1]


def simulate_levels(params: HierarchyParams, buckets: np.ndarray,
                    rng: np.random.Generator) -> tuple[np.ndarray, list[ReportBatch]]:
    """:func:`simulate` and each device's level (1..h): level ``l``'s batch holds the devices with
    ``levels == l``, in order (a simulated fleet keys each report by its device)."""
    buckets = np.asarray(buckets, dtype=np.int64)
    if buckets.size and (buckets.min() < 0 or buckets.max() >= params.buckets):
        raise InvalidParameterError("buckets", f"[{buckets.min()}, {buckets.max()}]",
                                    f"must lie in [0, {params.buckets})")
    levels = rng.integers(1, params.height + 1, buckets.size)
    return levels, [simulate_reports(p, params.node(buckets[levels == level], level).astype(np.uint64), rng)
                    for level, p in enumerate(params.levels, start=1)]


def level_estimates(params: HierarchyParams, batches: Sequence[ReportBatch]) -> list[np.ndarray]:
    """Each level's unbiased node frequencies from its own reports (NaN for a level without reports)."""
    if len(batches) != params.height:
        raise InvalidParameterError("batches", len(batches), f"needs one batch per level ({params.height})")
    counted = []
    for p, size, batch in zip(params.levels, params.sizes, batches):
        if len(batch):
            batch.validate(p)
            counted.append((len(batch), kernel.match_counts(p, batch, TrackedValues.range(p, 0, size))))
        else:
            counted.append((0, np.zeros(size, dtype=np.int64)))
    return estimates_from_counts(params, counted)


def estimates_from_counts(params: HierarchyParams, level_counts: Sequence[tuple[int, np.ndarray]]) -> list[np.ndarray]:
    """Each level's unbiased node frequencies from its report count ``n_l`` and its nodes' match counts (what the
    worker stores per level: every node tracked); NaN for a level without reports."""
    if len(level_counts) != params.height:
        raise InvalidParameterError("level_counts", len(level_counts), f"needs one (n, counts) per level "
                                                                       f"({params.height})")
    out = []
    for p, size, (n, counts) in zip(params.levels, params.sizes, level_counts):
        counts = np.asarray(counts)
        if counts.shape != (size,):
            raise InvalidParameterError("level_counts", f"shape {counts.shape}", f"needs one count per node ({size})")
        out.append(np.full(size, np.nan) if n == 0 else theory.estimate_frequencies(p.estimator_coefficients,
                                                                                    counts, n))
    return out


# ----------------------------------------------------------------------------- consistency and its variance
def _level_matrices(params: HierarchyParams) -> list[np.ndarray]:
    """Per level, the 0/1 matrix (nodes x buckets) of which buckets a node holds."""
    leaves = np.arange(params.buckets)
    return [(params.node(leaves, level)[None, :] == np.arange(size)[:, None]).astype(np.float64)
            for level, size in enumerate(params.sizes, start=1)]


def per_report_node_variance(params: OCMSParams, nodes: int) -> float:
    """A level oracle's variance per report of one node's estimate at uniform node frequencies (the planner's
    and the consistency weights' figure; the frequencies are unknown when the weights are fixed)."""
    f = np.full(nodes, 1.0 / nodes)
    d, u = _level_terms(params, f)
    return float(np.mean(d - u * u))


def _level_terms(params: OCMSParams, f: np.ndarray):
    if params.is_direct:
        keep = params.keep_probability
        return theory.grr_level_terms(keep, (1.0 - keep) / (params.hash_range - 1), f)
    return theory.ocms_level_terms(params.estimator_coefficients, f)


@dataclasses.dataclass(frozen=True)
class ConsistentTree:
    """The linear map from the levels' estimates to consistent leaf frequencies, for given reports per level:
    ``x = sum_l L_l y_l + c`` (``L_l`` buckets x nodes of level ``l``), ``sum x = 1``."""

    params: HierarchyParams
    reports: tuple[int, ...]
    maps: tuple[np.ndarray, ...]
    constant: np.ndarray

    @classmethod
    def of(cls, params: HierarchyParams, reports: Sequence[int]) -> "ConsistentTree":
        """Weighted least squares with the total fixed at 1: minimise ``sum_l |A_l x - y_l|^2 / s_l`` over
        ``sum x = 1``, ``s_l`` = the per-node variance of level ``l`` (:func:`per_report_node_variance` / n_l);
        levels without reports are left out (with the leaves unheard, the buckets inside a node of the finest level
        heard are spread evenly: biased there, which the stated variances do not include)."""
        reports = tuple(int(r) for r in reports)
        if len(reports) != params.height or min(reports) < 0:
            raise InvalidParameterError("reports", reports, f"needs a count >= 0 per level ({params.height})")
        if sum(reports) == 0:
            raise InvalidParameterError("reports", reports, "no level has reports")
        k = params.buckets
        matrices = _level_matrices(params)
        weights = [0.0 if r == 0 else r / per_report_node_variance(p, size)
                   for p, size, r in zip(params.levels, params.sizes, reports)]
        leaves = np.arange(k)
        normal = np.zeros((k, k))
        for level, w in enumerate(weights, start=1):  # A_l^T A_l: 1 where two buckets share a node of level l
            if w:
                node = params.node(leaves, level)
                normal += w * (node[:, None] == node[None, :])
        ones = np.ones(k)
        # a level left out (no reports) may leave the normal matrix singular: then the pseudo-inverse gives the
        # least-squares solution of smallest norm (even leaves inside each node of the finest level heard)
        try:
            inverse = np.linalg.inv(normal)
            if not np.all(np.isfinite(inverse)):
                raise np.linalg.LinAlgError
        except np.linalg.LinAlgError:
            inverse = np.linalg.pinv(normal)
        s1 = inverse @ ones
        maps = []
        for w, a in zip(weights, matrices):
            unconstrained = w * (inverse @ a.T)  # S A_l^T W_l; then (I - S 1 1^T / 1^T S 1) of it
            maps.append(unconstrained - np.outer(s1, unconstrained.sum(axis=0)) / float(ones @ s1))
        maps = tuple(maps)
        constant = s1 / float(ones @ s1)
        return cls(params, reports, maps, constant)

    def leaves(self, estimates: Sequence[np.ndarray]) -> np.ndarray:
        """The consistent leaf frequencies (sum 1; possibly negative: :class:`cms_core.numeric.Histogram` makes
        the CDF monotone)."""
        x = self.constant.copy()
        for a, y, r in zip(self.maps, estimates, self.reports):
            if r:
                x += a @ np.asarray(y, dtype=np.float64)
        return x

    def functional_variances(self, f: np.ndarray, weights: np.ndarray | str | None) -> np.ndarray:
        """The variance of ``w . x`` for every row ``w`` of ``weights`` when the buckets' distribution is ``f``
        (module docstring, Utility); ``weights=None``: of the CDF at every bucket's upper edge (the prefix sums),
        ``"buckets"``: of every leaf (the identity's rows), both without a k x k product."""
        f = np.clip(np.asarray(f, dtype=np.float64), 0.0, None)
        f = f / f.sum() if f.sum() > 0 else np.full(f.size, 1.0 / f.size)
        if weights is None:
            rows_of, cdf = (lambda a: np.cumsum(a, axis=0)), np.cumsum(f)
            own = cdf * (1.0 - cdf)
        elif isinstance(weights, str) and weights == "buckets":
            rows_of, own = (lambda a: a), f * (1.0 - f)
        else:
            weights = np.atleast_2d(np.asarray(weights, dtype=np.float64))
            rows_of, own = weights.__matmul__, (weights * weights) @ f - (weights @ f) ** 2
        total = np.zeros(own.size)
        for p, a, level_matrix, r in zip(self.params.levels, self.maps, _level_matrices(self.params), self.reports):
            if not r:
                continue
            d, u = _level_terms(p, level_matrix @ f)
            g = rows_of(a)
            total += ((g * g) @ d - (g @ u) ** 2) / r
        # less the devices' own spread: the answer is about these devices (module docstring, Utility)
        return np.maximum(total - own / sum(self.reports), 0.0)


@dataclasses.dataclass(frozen=True)
class HierarchyNoise:
    """:class:`cms_core.numeric.FunctionalNoise` of a consistent tree: the exact variance of any linear functional
    of its leaves (``n`` is ignored: the tree knows its reports per level)."""

    tree: ConsistentTree

    def variance(self, f: np.ndarray, w: np.ndarray, n: int) -> float:
        return float(self.tree.functional_variances(f, w)[0])

    def cdf_variances(self, f: np.ndarray, n: int) -> np.ndarray:
        """The variance of the CDF at every bucket's upper edge (the last is 0: the total is fixed at 1)."""
        return self.tree.functional_variances(f, None)

    def bucket_variances(self, f: np.ndarray) -> np.ndarray:
        """The variance of every consistent leaf (bucket) frequency: ``w`` each bucket's indicator."""
        return self.tree.functional_variances(f, "buckets")


def estimate(params: HierarchyParams, batches: Sequence[ReportBatch]) -> tuple[np.ndarray, HierarchyNoise]:
    """The consistent bucket frequencies (sum 1) from one batch of reports per level, and their noise (for
    :meth:`cms_core.numeric.Histogram.of`: ``Histogram.of(layout, leaves, n, noise)``)."""
    return consistent_leaves(params, [len(b) for b in batches], level_estimates(params, batches))


def consistent_leaves(params: HierarchyParams, reports: Sequence[int],
                      estimates: Sequence[np.ndarray]) -> tuple[np.ndarray, HierarchyNoise]:
    """The consistent tree of the levels' ``estimates`` from ``reports`` reports per level: its leaves and noise."""
    tree = ConsistentTree.of(params, reports)
    return tree.leaves(estimates), HierarchyNoise(tree)


def estimate_counts(params: HierarchyParams,
                    level_counts: Sequence[tuple[int, np.ndarray]]) -> tuple[np.ndarray, HierarchyNoise]:
    """:func:`estimate` from what a worker stores per level: ``(n_l, match counts of the level's nodes)``."""
    return consistent_leaves(params, [int(n) for n, _ in level_counts], estimates_from_counts(params, level_counts))


def predicted_cdf_variances(params: HierarchyParams, n: int, f: np.ndarray | None = None) -> np.ndarray:
    """The variance of the consistent CDF at every bucket's upper edge but the last (which is 1), for ``n``
    devices spread evenly over the levels and bucket distribution ``f`` (uniform when omitted)."""
    n = _check_count("n", n, 1)
    k = params.buckets
    f = np.full(k, 1.0 / k) if f is None else np.asarray(f, dtype=np.float64)
    if params.height == 1:  # a flat oracle: the same figures in O(k), without the k x k solve
        return flat_cdf_variances(params.levels[0], n, f)[:-1]
    reports = [n / params.height] * params.height
    tree = ConsistentTree.of(params, [max(1, round(r)) for r in reports])
    return tree.functional_variances(f, None)[:-1]


def flat_cdf_variances(params: OCMSParams, n: int, f: np.ndarray) -> np.ndarray:
    """:meth:`ConsistentTree.functional_variances` of the CDF for a one-level tree (a flat oracle over the ``k``
    buckets, ``n`` reports) in closed form: its consistent map is ``I - 1 1^T / k``, so the CDF at edge ``j`` is the
    functional ``g = 1[i <= j] - (j + 1) / k`` of the estimates, and ``sum_i g_i^2 d_i`` and ``g . u`` are cumulative
    sums. O(k) where the solve is O(k^3) (12 s at k = 4,096): the registry's ``mechanism: auto`` of a numeric
    metric compares two of these."""
    f = np.clip(np.asarray(f, dtype=np.float64), 0.0, None)
    k = f.size
    f = f / f.sum() if f.sum() > 0 else np.full(k, 1.0 / k)
    d, u = _level_terms(params, f)
    c = np.arange(1, k + 1) / k
    below_d, below_u = np.cumsum(d), np.cumsum(u)
    squares = (1.0 - c) ** 2 * below_d + c**2 * (below_d[-1] - below_d)
    dot = (1.0 - c) * below_u - c * (below_u[-1] - below_u)
    cdf = np.cumsum(f)
    return np.maximum((squares - dot**2) / n - cdf * (1.0 - cdf) / n, 0.0)


# ----------------------------------------------------------------------------- audit
def output_distribution(params: HierarchyParams, bucket: int) -> dict[tuple[int, int, int, int], Fraction]:
    """P(report = (level, a0, a1, z) | bucket) of the device path, exactly (small fields only)."""
    from .audit import output_distribution as level_distribution

    bucket = _check_bucket(params, bucket)
    share = Fraction(1, params.height)
    out = {}
    for level, p in enumerate(params.levels, start=1):
        for key, prob in level_distribution(p, int(params.node(bucket, level))).items():
            out[(level, *key)] = share * prob
    return out


def exact_privacy_loss(params: HierarchyParams, buckets: Sequence[int] | None = None) -> Fraction:
    """max over reports and pairs of buckets of P(report | x) / P(report | x'): the realised e^eps, exactly."""
    from .audit import worst_probability_ratio

    buckets = list(range(params.buckets)) if buckets is None else list(buckets)
    return worst_probability_ratio([output_distribution(params, b) for b in buckets], params.name)
