"""The collector accepts each level of a numeric metric's hierarchical histogram (issue 40) as a version of the
metric: a frame of any level's fingerprint on the metric's path, one level per upload; a level of no registry
tree, another metric's path and a JSON upload naming the tree's version but no level are refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cms_core import wire
from cms_core.hierarchy import HierarchyParams, simulate
from collector.uploads import UploadParser, UploadRejected
from tests.agents.test_numeric_tree_answers import TEXT
from tests.registry.helpers import load

REGISTRY = TEXT + """\
  - name: screen
    description: a frequency metric
    owner: a@example.com
    categories: [home, search]
    epsilon: 1
"""


@pytest.fixture(scope="module")
def reg(tmp_path_factory):
    return load(tmp_path_factory.mktemp("reg"), REGISTRY)


def level_frames(tree, buckets, seed=1):
    batches = simulate(tree, np.asarray(buckets), np.random.default_rng(seed))
    return [wire.encode_frame(params, batch) for params, batch in zip(tree.levels, batches)]


def test_every_level_is_taken_as_the_metric_and_foreign_levels_are_refused(reg):
    parser = UploadParser(reg, max_reports=10_000)
    version = reg.metric("latency_tree").latest
    frames = level_frames(version.hierarchy, np.arange(400) % 11)
    for level, frame in zip(version.tree_levels(), frames):
        upload = parser.parse_binary(frame, "latency_tree")
        assert upload.version is level and upload.version.tree_level == level.tree_level
        assert (upload.version.metric, upload.version.version) == ("latency_tree", 1)
        assert upload.version.params is level.params and len(upload.batch) == wire.peek_header(frame)[2]
        framed = parser.frame_binary(frame, None)  # the lanes' fast framing path knows the levels too
        assert framed is not None and framed[0] is level
    with pytest.raises(UploadRejected) as info:  # one parameter set per upload: levels are versions
        parser.parse_binary(frames[0] + frames[1], None)
    assert info.value.reason == "mixed_parameter_sets" and "latency_tree@1/level2" in info.value.detail
    with pytest.raises(UploadRejected) as info:  # a level on another metric's path
        parser.parse_binary(frames[0], "screen")
    assert info.value.reason == "foreign_metric"
    foreign = HierarchyParams.build(11, 1.0, version.hierarchy.branching, binding="latency_tree@2")  # no such version
    with pytest.raises(UploadRejected) as info:  # negative control: a tree the registry does not hold
        parser.parse_binary(level_frames(foreign, [1, 2, 3] * 50)[0], None)
    assert info.value.reason == "unknown_fingerprint"


def test_a_json_upload_names_its_level_by_fingerprint(reg):
    parser = UploadParser(reg, max_reports=10_000)
    version = reg.metric("latency_tree").latest
    level = version.tree_levels()[0]
    _, batch = wire.decode_message(level_frames(version.hierarchy, [0, 5, 10] * 20)[0], {level.fingerprint: level.params})
    reports = [{"z": str(int(z))} for z in batch.z[:3]]
    upload = parser.parse_json(json.dumps({"fingerprint": level.fingerprint.hex(), "reports": reports}).encode(),
                               "latency_tree")
    assert upload.version is level and len(upload.batch) == 3
    with pytest.raises(UploadRejected) as info:
        parser.parse_json(json.dumps({"version": 1, "reports": reports}).encode(), "latency_tree")
    assert info.value.reason == "level_needed" and "fingerprint" in info.value.detail
