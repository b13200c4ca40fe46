"""The Python client's reports of a numeric metric reported as a hierarchical histogram (issue 40): each report draws
its level first (``draw_below(h) + 1`` from the client's randomness source), then reports its bucket's node with that
level's parameters, framed with that level's fingerprint, byte for byte as tests/vectors/numeric_hierarchy_v1.json
says (which producer/js and producer/c are to replay too); over many reports the levels are uniform."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import numpy as np
import pytest

from cms_core.errors import InvalidParameterError
from cms_core.numeric import BucketLayout
from cms_core.wire import decode_message, peek_header
from producer.ledger import PrivacyLedger
from producer.reporter import DeviceReporter
from registry.loader import parse_registry
from tests.vectors.make_numeric_hierarchy_vectors import REGISTRY as VECTOR_REGISTRY, build

from .test_reporter import FakeProducer

VECTORS = json.loads((Path(__file__).resolve().parents[1] / "vectors" / "numeric_hierarchy_v1.json")
                     .read_text("utf-8"))
REGISTRY = parse_registry(VECTOR_REGISTRY, "<numeric hierarchy vectors>")


class Replay:
    """A randomness source that gives exactly the recorded bytes (and says when more are asked for)."""

    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def __call__(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise AssertionError(f"drew {self.at + n} bytes, the vector holds {len(self.data)}")
        out, self.at = self.data[self.at:self.at + n], self.at + n
        return out


def reports_of(cases, tmp_path, random=None) -> tuple[list[bytes], PrivacyLedger]:
    """The messages DeviceReporter sends for ``cases`` ((metric, value), a Replay each or the CSPRNG)."""
    fake, ledger = FakeProducer(), PrivacyLedger(tmp_path / "ledger.db", budget=10**6)

    async def go():
        async with DeviceReporter(REGISTRY, bootstrap_servers="fake:9092", topic="t", device_key=b"d",
                                  ledger=ledger, producer_factory=fake) as reporter:
            for i, (metric, value) in enumerate(cases):
                if random is not None:
                    reporter._random = random[i]
                await reporter.report(metric, value)

    asyncio.run(go())
    return fake.delivered, ledger


def test_the_vectors_file_is_what_the_generator_writes():
    assert build() == VECTORS


def test_the_reporter_reproduces_every_vector_byte_for_byte(tmp_path):
    cases = VECTORS["cases"]
    sources = [Replay(bytes.fromhex(c["random_hex"])) for c in cases]
    delivered, ledger = reports_of([(c["metric"], float(c["value"])) for c in cases], tmp_path, sources)
    assert [m.hex() for m in delivered] == [c["message_hex"] for c in cases]
    assert all(s.at == len(s.data) for s in sources)  # every recorded byte drawn, none more
    for name in VECTORS["cases"][0]["metric"], "size_tree":  # one epsilon charged per report, whatever the level
        epsilon = REGISTRY.metric(name).latest.params.epsilon
        assert ledger.spent(name) == pytest.approx(epsilon * sum(c["metric"] == name for c in cases))


def test_each_vector_follows_from_the_device_config_alone():
    """What the JS and C clients get: the bucket from ``numeric``, the node from the level's ``span``, the
    fingerprint from the level's entry; every level of every metric is some case's."""
    configs = {m["name"]: m for m in VECTORS["device_config"]["metrics"]}
    seen = set()
    for c in VECTORS["cases"]:
        entry = configs[c["metric"]]
        layout = BucketLayout.explicit(entry["numeric"]["bounds"], entry["numeric"]["lower"],
                                       entry["numeric"]["upper"])
        assert layout.bucket(float(c["value"])) == c["bucket"]
        level = entry["hierarchy"]["levels"][c["level"] - 1]
        assert c["node"] == c["bucket"] // level["span"] and c["fingerprint"] == level["fingerprint"]
        assert peek_header(bytes.fromhex(c["message_hex"]))[1].hex() == level["fingerprint"]
        # the level is the first draw: draw_below(h), the first byte's low bit_length(h - 1) bits unless rejected
        h = len(entry["hierarchy"]["levels"])
        first = bytes.fromhex(c["random_hex"])[0] & ((1 << (h - 1).bit_length()) - 1)
        if first < h:
            assert first == c["level"] - 1, c
        seen.add((c["metric"], c["level"]))
    assert seen == {(name, level) for name, m in configs.items()
                    for level in range(1, len(m["hierarchy"]["levels"]) + 1)}


def test_levels_are_drawn_uniformly_and_each_report_decodes_with_its_level(tmp_path):
    """600 reports of one number (bucket 4 of latency_tree, two levels): about 300 per level (binomial sd 12.2),
    each decoding with its level's parameters, the finest keeping bucket 4 with direct RR's p."""
    version = REGISTRY.metric("latency_tree").latest
    delivered, _ = reports_of([("latency_tree", 60.0)] * 600, tmp_path)
    levels = {lv.fingerprint: lv for lv in version.tree_levels()}
    by_level = {lv.tree_level: [] for lv in levels.values()}
    for message in delivered:
        level = levels[peek_header(message)[1]]  # KeyError: a fingerprint of no level
        by_level[level.tree_level] += [int(z) for z in decode_message(message, {level.fingerprint: level.params})[1].z]
    assert abs(len(by_level[1]) - 300) < 4.5 * math.sqrt(600 * 0.25)
    finest = version.tree_levels()[-1].params
    keep = math.exp(2) / (math.exp(2) + finest.hash_range - 1)
    kept = by_level[2].count(4)
    assert abs(kept - len(by_level[2]) * keep) < 4.5 * math.sqrt(len(by_level[2]) * keep * (1 - keep))
    # negative control: level 1 reports node 4 // 4 = 1, never bucket 4's index (it has 3 nodes)
    assert max(by_level[1]) <= 2 and np.bincount(by_level[1]).argmax() == 1


def test_a_bad_number_is_refused_before_any_draw_or_charge(tmp_path):
    fake, ledger = FakeProducer(), PrivacyLedger(tmp_path / "ledger.db", budget=100.0)
    drawn = Replay(b"")

    async def go():
        async with DeviceReporter(REGISTRY, bootstrap_servers="fake:9092", topic="t", device_key=b"d",
                                  ledger=ledger, producer_factory=fake) as reporter:
            reporter._random = drawn
            with pytest.raises(InvalidParameterError) as info:
                await reporter.report("latency_tree", math.nan)
            assert info.value.name == "value"

    asyncio.run(go())
    assert drawn.at == 0 and ledger.spent("latency_tree") == 0.0 and fake.delivered == []


def through_gateway(registry, delivered, parts):
    """Device messages through a RegistryGateway (16 records a frame): the version each was taken as, and the
    reports framed per part binding (``parts``: fingerprint -> the part's version; a frame of any other fails)."""
    from collections import Counter

    from producer.gateway import RegistryGateway

    frames = []

    async def sink(frame):
        frames.append(frame)

    async def go():
        async with RegistryGateway(registry, send=sink, max_records=16) as gateway:
            return [await gateway.add(m) for m in delivered]

    versions = asyncio.run(go())
    framed = Counter()
    for frame in frames:
        part = parts[peek_header(frame)[1]]
        framed[part.binding] += len(decode_message(frame, {part.fingerprint: part.params})[1])
    return versions, framed


def test_a_gateway_frames_each_level_apart(tmp_path):
    """RegistryGateway takes every level of a tree version (a version each) and never mixes levels in a frame."""
    from collections import Counter

    delivered, _ = reports_of([("size_tree", float(x)) for x in range(0, 40, 2)] * 6, tmp_path)
    levels = {lv.fingerprint: lv for lv in REGISTRY.metric("size_tree").latest.tree_levels()}
    versions, framed = through_gateway(REGISTRY, delivered, levels)
    assert {v.binding for v in versions} == {lv.binding for lv in levels.values()}  # every level drawn
    assert framed == Counter(v.binding for v in versions)  # nothing lost, nothing mixed


def test_memoization_reuses_a_trees_report_of_the_same_bucket_whatever_its_level(tmp_path):
    """memoize=True: the same bucket again in the period is the same message (its level included), free; another
    bucket is a new report, charged (the key is the bucket, not the level drawn)."""
    fake, ledger = FakeProducer(), PrivacyLedger(tmp_path / "ledger.db", budget=100.0)

    async def go():
        async with DeviceReporter(REGISTRY, bootstrap_servers="fake:9092", topic="t", device_key=b"d",
                                  ledger=ledger, memoize=True, producer_factory=fake) as reporter:
            first = [await reporter.report("latency_tree", 42.0) for _ in range(8)]
            other = await reporter.report("latency_tree", 4000.0)
            return first, other

    first, other = asyncio.run(go())
    assert len({d.message for d in first}) == 1 and [d.memoized for d in first] == [False] + [True] * 7
    assert not other.memoized  # a report of its own (its bytes may equal the first's by chance: same level and z)
    assert ledger.spent("latency_tree") == pytest.approx(2 * 2.0)
