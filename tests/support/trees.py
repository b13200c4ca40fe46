"""How far a hierarchical histogram's answer (issue 40) lies from the truth, in standard deviations of the tree's
own noise: the raw CDF at every inner bucket edge against the true CDF, each scaled by its exact variance
(cms_core.hierarchy.ConsistentTree.functional_variances, at the true distribution and the reports each level got),
and the mean scaled by its stated interval. For clients that draw from a CSPRNG (no seed), where a 95% interval
misses one time in twenty: a bound of 4.5 sd misses about once in 10^5 per value."""

from __future__ import annotations

import numpy as np

from cms_core.hierarchy import ConsistentTree
from cms_core.theory import normal_z


def cdf_z(histogram: dict, tree, f) -> np.ndarray:
    """(raw CDF - true CDF) / sd at every inner edge, ``f`` the true bucket frequencies."""
    f = np.asarray(f, dtype=np.float64) / np.sum(f)
    reports = [level["reports"] for level in histogram["levels"]]
    sd = np.sqrt(ConsistentTree.of(tree, reports).functional_variances(f, None))
    raw = np.array([row["raw"] for row in histogram["cdf"]])
    return ((raw - np.cumsum(f)) / np.where(sd > 0, sd, np.inf))[:-1]


def mean_z(histogram: dict, true_mean: float) -> float:
    """(estimated mean - true mean) / the sd its interval states."""
    mean = histogram["mean"]
    sd = (mean["ci_high"] - mean["estimate"]) / normal_z(histogram["confidence"])
    return (mean["estimate"] - true_mean) / sd


def check_capture_of_size_tree(capsys, tmp_path, capture, values) -> None:
    """A device client's capture of ``values`` reported to size_tree (tests/vectors/numeric_hierarchy_v1.json: 40
    buckets, three levels) read back by ``ocms estimate``: every level decoded (each about a third of the reports),
    the raw CDF at every edge and the mean within 4.5 sd of the truth; the negative control, the fleet's values twice
    as large, more than 6 sd away (expected: 11 sd at the worst edge, 10 at the mean, for 6,000 log-normal values)."""
    import json

    from registry.loader import parse_registry
    from tests.registry.helpers import run, write
    from tests.vectors.make_numeric_hierarchy_vectors import REGISTRY

    path = write(tmp_path, REGISTRY)
    code, text, err = run(capsys, "estimate", "--registry", str(path), "--metric", "size_tree", str(capture))
    assert code == 0 and "fingerprint" not in err, err
    h = json.loads(text)["histogram"]
    n = len(values)
    assert all(abs(level["reports"] - n / 3) < 4.5 * (n * 2 / 9) ** 0.5 for level in h["levels"]), h["levels"]
    version = parse_registry(REGISTRY).metric("size_tree").latest
    layout = version.numeric.layout
    f = np.bincount(layout.index(values), minlength=40)
    assert np.abs(cdf_z(h, version.hierarchy, f)).max() < 4.5
    assert abs(mean_z(h, float(f @ layout.points) / f.sum())) < 4.5
    twice = np.bincount(layout.index(2 * np.asarray(values)), minlength=40)
    assert np.abs(cdf_z(h, version.hierarchy, twice)).max() > 6
    assert abs(mean_z(h, float(twice @ layout.points) / twice.sum())) > 6
