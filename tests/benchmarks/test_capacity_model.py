"""docs/capacity.md's worked examples are what benchmarks/capacity_model.py prints, and the model's
view bytes are the view's own accounting (CountsView.memory_bytes) for the same states."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np

from agents.state import BucketKey, PartialCounts, members_written_for
from agents.view import CountsView
from benchmarks import capacity_model

DOC = Path(__file__).resolve().parents[2] / "docs" / "capacity.md"


def test_the_worked_examples_are_what_the_model_prints():
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        capacity_model.main()
    block = re.search(r"\$ python -m benchmarks.capacity_model\n(.*?)\n```", DOC.read_text(encoding="utf-8"), re.S)
    assert block and block.group(1) == printed.getvalue().rstrip("\n")


def test_the_models_view_bytes_are_the_views_accounting():
    """The model counts 4-byte counts (member codec v1/v3, what a bucket of 65,536 reports or more holds): exact
    for those, an upper bound for the 2-byte counts of codec v4/v5 (buckets of fewer reports)."""
    tracked, buckets, partitions = 37, 5, 3
    rng = np.random.default_rng(4)
    states = [PartialCounts(100, rng.integers(0, 100, tracked), 1) for _ in range(buckets * partitions)]
    memory = {}
    for upgrade_from in ("0.2", None):
        view = CountsView()
        with members_written_for(upgrade_from):
            for i, state in enumerate(states):
                view.apply_state(BucketKey("069888932a931dd6", i % partitions, 60, 60 * (i // partitions)),
                                 state.to_bytes())
        memory[upgrade_from] = view.memory_bytes()
    assert memory["0.2"] == capacity_model.view_bytes_of(tracked, buckets, partitions)
    assert memory[None] == memory["0.2"] - 2 * tracked * buckets * partitions
    shape = capacity_model.MetricShape(3, tracked, bucket_s=60, retention_s=240, rollup_s=None)
    assert shape.buckets == buckets + 1  # + the cumulative key
    assert capacity_model.view_bytes([shape], partitions, workers=2) == \
        3 * capacity_model.view_bytes_of(tracked, buckets + 1, partitions) * 2 / 3  # ceil(3 / 2) of 3 shards
