"""A numeric metric's window (issue 40): its bucket estimates as a histogram, CDFs, quantiles and the mean."""

from __future__ import annotations

import dataclasses

from cms_core import OCMSParams
from cms_core import hybrid as hybrid_core
from cms_core import numeric as numeric_core
from cms_core.sketch import Estimates

from ..view import sum_states
from .encode import records


def numeric_answer(spec, params: OCMSParams, est: Estimates, counts, quantiles, tree=None, levels=(),
                   mean_part=None) -> dict | None:
    """:func:`histogram_answer`, its ``mean`` the Hybrid mechanism's when the version has one (``mean_part``: its
    cms_core.hybrid.HybridParams and the window's summed (n, counts of each report value)): the histogram's own is
    kept as ``histogram_mean``. A version asking only for the mean (no histogram reports) answers the mean alone
    (no bucket, CDF or quantile). None without reports."""
    doc = histogram_answer(spec, params, est, counts, quantiles, tree, levels)
    if mean_part is None:
        return doc
    hybrid, (_, mean_counts) = mean_part
    return hybrid_core.with_mean(doc, hybrid, mean_counts, est.confidence, spec.mean_only_answer(est.confidence))


def histogram_answer(spec, params: OCMSParams, est: Estimates, counts, quantiles, tree=None, levels=()) -> dict | None:
    """A numeric metric's window (issue 40) from its bucket estimates (the frequency answer of the bucket
    indices, so the noise floor and each bucket's interval are the frequencies'): the histogram, the raw and the
    monotone CDF, the quantiles and the mean with their intervals (:func:`cms_core.numeric.summary`); None
    without reports. Each bucket's record also holds its frequency estimate, as /estimates gives it.

    A tree version (``tree``: its cms_core.hierarchy.HierarchyParams, ``levels``: each level's summed (n, node
    counts)) answers from the consistent tree of every level (:func:`cms_core.numeric.tree_window_summary`): each
    bucket's estimate and interval are the tree's; ``n`` is every level's reports."""
    if tree is not None:
        doc = numeric_core.tree_window_summary(spec.layout, tree, levels, est.confidence, quantiles)
        if doc is not None:
            doc.update(layout=spec.describe(), n=sum(n for n, _ in levels), mechanism=tree.name)
        return doc
    doc = numeric_core.window_summary(spec.layout, params, est.frequency, est.n, est.confidence, quantiles)
    if doc is None:
        return None
    for bucket, record in zip(doc["buckets"], records(est, counts)):
        bucket.update(record, bucket=int(record.pop("value")))
    doc["layout"] = spec.describe()
    return doc


@dataclasses.dataclass(frozen=True)
class MeanPart:
    """Where a version's Hybrid mean (issue 40) is counted: its part is a parameter version of its own (the
    carrier's fingerprint, every report value tracked), read with the version's histogram."""

    hybrid: object  # cms_core.hybrid.HybridParams
    fingerprint: str
    view: object  # agents.view.CountsView

    @classmethod
    def of(cls, version, view) -> "MeanPart | None":
        parts = version.mean_parts() if hasattr(version, "mean_parts") else ()
        return cls(version.mean.hybrid, parts[0].fingerprint.hex(), view) if parts else None

    def snapshot(self, window):
        """The part's states in ``window`` (references, taken where the view is: the event loop)."""
        start, stop = window.bounds()
        return self.view.snapshot(self.fingerprint, window.width, start, stop)

    def job_fields(self, snapshot) -> dict:
        """The summed (n, counts) of the part (any thread), for the answer's job."""
        return {"mean_part": (self.hybrid, sum_states(snapshot, self.hybrid.outputs))}


@dataclasses.dataclass(frozen=True)
class TreeLevels:
    """Where a tree version's levels are counted (issue 40): each level is a parameter version of its own (its
    fingerprint; the finest is the version's), every node tracked; its histogram reads every level's window."""

    tree: object  # cms_core.hierarchy.HierarchyParams
    fingerprints: tuple[str, ...]
    view: object  # agents.view.CountsView

    @classmethod
    def of(cls, version, view) -> "TreeLevels | None":
        tree = getattr(version, "hierarchy", None)
        if tree is None:
            return None
        return cls(tree, tuple(level.fingerprint.hex() for level in version.tree_levels()), view)

    @property
    def work(self) -> int:
        """The consistent tree's k x k solve, in the work model's nanoseconds (agents.answers.service)."""
        return self.tree.buckets ** 3

    def snapshots(self, window) -> tuple:
        """Every level's states in ``window`` (references, taken where the view is: the event loop)."""
        start, stop = window.bounds()
        return tuple(self.view.snapshot(fp, window.width, start, stop) for fp in self.fingerprints)

    def job_fields(self, snapshots) -> dict:
        """The summed (n, counts) of every level (any thread), for the answer's job."""
        return {"tree": self.tree, "levels": tuple(sum_states(snapshot, size)
                                                   for snapshot, size in zip(snapshots, self.tree.sizes))}
