"""FrameBatcher.for_metric of a numeric metric reported as a hierarchical histogram (issue 40): each level is a
parameter set of its own (binding name@N/level<l>, its fingerprint), so a tree's reports are framed per level, as
the collector (which takes any level's fingerprint as a version of the metric) and the worker count them."""

import asyncio
import os
from collections import Counter

import pytest

from cms_core.errors import InvalidParameterError, InvalidReportError
from cms_core.hierarchy import draw_node
from cms_core.privatize import privatize
from cms_core.wire import UnknownFingerprintError, decode_message, encode_report
from infra.framing import FrameBatcher, PartsFrameBatcher
from registry.loader import parse_registry
from tests.producer.test_reporter_registry import REGISTRY as FLAT_REGISTRY
from tests.vectors.make_numeric_hierarchy_vectors import REGISTRY as VECTOR_REGISTRY

REGISTRY = parse_registry(VECTOR_REGISTRY, "<numeric hierarchy vectors>")
TREE = REGISTRY.metric("size_tree").latest  # 40 buckets, branching 4: levels of 3, 10 and 40 nodes


def device_messages(n: int) -> list[tuple[int, bytes]]:
    """(level, wire message) of ``n`` devices' buckets, each level drawn and its node privatized as a device does."""
    out = []
    for i in range(n):
        level, node = draw_node(TREE.hierarchy, i % TREE.hierarchy.buckets)
        params = TREE.hierarchy.levels[level - 1]
        out.append((level, encode_report(params, privatize(params, node, os.urandom))))
    return out


def run(batcher_of, items):
    """Every item added to the batcher ``batcher_of(send)``, then closed; returns the frames sent and the batcher."""
    frames = []

    async def sink(frame):
        frames.append(frame)

    async def go():
        batcher = batcher_of(sink)
        async with batcher:
            answers = [await batcher.add(item) for item in items]
        return batcher, answers

    batcher, answers = asyncio.run(go())
    return frames, batcher, answers


def test_a_trees_reports_are_framed_with_their_own_levels_parameters():
    messages = device_messages(300)
    frames, batcher, answers = run(lambda sink: FrameBatcher.for_metric(REGISTRY, "size_tree", send=sink,
                                                                        max_records=40), [m for _, m in messages])
    assert isinstance(batcher, PartsFrameBatcher) and batcher.params.fingerprint == TREE.fingerprint
    assert answers == [level for level, _ in messages]  # add says the level each message was framed with
    levels = {level.fingerprint: level for level in TREE.tree_levels()}
    framed = Counter()
    for frame in frames:
        params, batch = decode_message(frame, {fp: level.params for fp, level in levels.items()})
        assert len(batch) <= 40
        framed[levels[params.fingerprint].tree_level] += len(batch)
    assert framed == Counter(level for level, _ in messages) and len(framed) == 3  # every level, none mixed
    assert batcher.records_sent == 300 and batcher.frames_sent == len(frames) and batcher.buffered == 0


def test_a_bare_report_of_a_tree_is_refused_for_it_carries_no_level():
    """A Report of level 1 given to one batcher of the finest level's parameters would be framed as a bucket."""
    report = privatize(TREE.hierarchy.levels[0], 2, os.urandom)
    with pytest.raises(InvalidReportError, match=r"size_tree@1 is a hierarchical histogram: a Report carries no "
                                                 r"level.*for_metric\(registry, 'size_tree@1/level<l>'\)"):
        run(lambda sink: FrameBatcher.for_metric(REGISTRY, "size_tree@1", send=sink), [report])
    frames, batcher, _ = run(lambda sink: FrameBatcher.for_metric(REGISTRY, "size_tree@1/level1", send=sink),
                             [report])
    assert batcher.metric == "size_tree@1/level1" and batcher.params == TREE.hierarchy.levels[0]
    assert decode_message(frames[0], {batcher.params.fingerprint: batcher.params})[1].to_reports() == [report]


def test_a_message_of_no_level_and_a_level_the_tree_lacks_are_refused_naming_the_levels():
    other = REGISTRY.metric("latency_tree").latest  # another tree: its levels are no levels of size_tree
    foreign = encode_report(other.hierarchy.levels[0], privatize(other.hierarchy.levels[0], 0, os.urandom))
    with pytest.raises(UnknownFingerprintError, match=r"is of no level of size_tree@1 \(its levels: "
                                                      r"size_tree@1/level1 [0-9a-f]{16}, size_tree@1/level2"):
        run(lambda sink: FrameBatcher.for_metric(REGISTRY, "size_tree", send=sink), [foreign])
    with pytest.raises(InvalidParameterError, match="size_tree@1 has the levels level1, level2, level3"):
        FrameBatcher.for_metric(REGISTRY, "size_tree@1/level4", send=print)
    with pytest.raises(InvalidParameterError, match="app_launches@1 is not a hierarchical histogram"):
        FrameBatcher.for_metric(FLAT_REGISTRY, "app_launches@1/level1", send=print)


def test_a_versions_hybrid_mean_part_is_framed_with_its_own_parameters():
    """A flat version with a Hybrid mean (numeric.mean_mechanism: hybrid): its mean's reports carry the part's
    fingerprint (name@N/mean), and one batcher of the version's own parameters refused them as unknown."""
    from cms_core.hybrid import draw_mean_message
    from tests.vectors.make_numeric_mean_vectors import REGISTRY as MEAN_REGISTRY

    registry = parse_registry(MEAN_REGISTRY, "<numeric mean vectors>")
    version = registry.metric("latency_split").latest
    (part,) = version.mean_parts()
    split = version.mean
    messages = []
    for i in range(200):
        message = draw_mean_message(split.hybrid, split.parts, part.params, float(i * 37 % 10_000), os.urandom)
        messages.append(("mean", message) if message is not None else
                        (None, encode_report(version.params, privatize(version.params, i % 11, os.urandom))))
    frames, batcher, answers = run(lambda sink: FrameBatcher.for_metric(registry, "latency_split", send=sink),
                                   [m for _, m in messages])
    assert isinstance(batcher, PartsFrameBatcher) and answers == [kind for kind, _ in messages]
    framed = Counter()
    for frame in frames:
        params, batch = decode_message(frame, {p.fingerprint: p for p in (version.params, part.params)})
        framed["mean" if params.fingerprint == part.fingerprint else None] += len(batch)
    assert framed == Counter(kind for kind, _ in messages) and framed["mean"] > 50 and framed[None] > 50
    with pytest.raises(InvalidReportError, match=r"latency_split@1/mean"):
        run(lambda sink: FrameBatcher.for_metric(registry, "latency_split", send=sink),
            [privatize(version.params, 3, os.urandom)])
    frames, batcher, _ = run(lambda sink: FrameBatcher.for_metric(registry, "latency_split@1/mean", send=sink),
                             [m for kind, m in messages if kind == "mean"])
    assert batcher.params == part.params and batcher.records_sent == framed["mean"]
    with pytest.raises(InvalidParameterError, match=r"size_tree@1 has no Hybrid mean part"):
        FrameBatcher.for_metric(REGISTRY, "size_tree@1/mean", send=None)
