"""The collector accepts discovery reports of a discoverable metric (issue 15) like any report:
202, produced to the source topic; a level the registry does not declare is refused (negative control)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from cms_core import wire
from cms_core import discovery as D
from collector.uploads import UploadParser, UploadRejected
from fleet.discovery import simulate_discovery_messages
from infra.broker import EmbeddedBroker
from registry import load_registry
from registry.discovery import discovery_of
from tests.registry.helpers import DISCOVERY_METRICS
from tests.support.topics import consume

from .harness import CollectorProcess, request

TOPIC = "col-discovery"
REGISTRY = DISCOVERY_METRICS


@pytest.fixture(scope="module")
def registry_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("reg") / "registry.yaml"
    path.write_text(REGISTRY, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def reg(registry_path):
    return load_registry(registry_path)


def level_frames(version, values, seed=1):
    spec = discovery_of(version)
    frames = list(simulate_discovery_messages(spec.domain, spec.params_by_level, values, np.random.default_rng(seed)))
    return {wire.peek_header(f)[1]: f for f in frames}  # one frame per level


def foreign_level_frame():
    """A fifth level of typed_words (declared: 4): the fingerprint of no registry level."""
    domain = D.DiscoveryDomain("strings", alphabet="abcdefghijklmnopqrstuvwxyz", max_length=5, symbols_per_level=1)
    levels = D.level_params("typed_words", 1, 4.0, domain)
    frames = simulate_discovery_messages(domain, levels, ["zebra"] * 200, np.random.default_rng(2))
    return next(f for f in frames if wire.peek_header(f)[1] == levels[4].fingerprint)


def test_parser_takes_level_reports_as_the_metric_and_refuses_foreign_and_retired_levels(reg):
    parser = UploadParser(reg, max_reports=10_000)
    words = reg.metric("typed_words").latest
    frames = level_frames(words, ["the"] * 200)
    spec = discovery_of(words)
    for level, params in enumerate(spec.params_by_level, 1):
        upload = parser.parse_binary(frames[params.fingerprint], "typed_words")
        assert (upload.version.metric, upload.version.version, upload.version.level) == ("typed_words", 1, level)
        assert upload.version.params is params
    framed = parser.frame_binary(frames[spec.params_by_level[0].fingerprint], None)
    assert framed is not None and framed[0].level == 1  # the fast framing path knows the levels too
    with pytest.raises(UploadRejected) as info:  # negative control
        parser.parse_binary(foreign_level_frame(), None)
    assert (info.value.status, info.value.reason) == (400, "unknown_fingerprint")
    with pytest.raises(UploadRejected) as info:  # a level on another metric's path
        parser.parse_binary(frames[spec.params_by_level[0].fingerprint], "build_id")
    assert info.value.reason == "foreign_metric"
    retired = level_frames(reg.metric("build_id").version(1), list(range(100)))
    with pytest.raises(UploadRejected) as info:
        parser.parse_binary(next(iter(retired.values())), None)
    assert info.value.reason == "retired_version" and "build_id@1/level" in info.value.detail
    two = [frames[p.fingerprint] for p in spec.params_by_level[:2]]
    with pytest.raises(UploadRejected) as info:  # one parameter set per upload: levels are versions
        parser.parse_binary(two[0] + two[1], None)
    assert info.value.reason == "mixed_parameter_sets" and "typed_words@1/level2" in info.value.detail


@pytest.mark.integration
def test_level_reports_are_202_and_land_in_the_source_topic(registry_path, reg, tmp_path):
    words = reg.metric("typed_words").latest
    spec = discovery_of(words)
    frames = level_frames(words, ["the"] * 200 + ["zebra"] * 100, seed=5)
    with EmbeddedBroker() as broker:
        broker.create_topics({TOPIC: 2})
        collector = CollectorProcess(registry_path, broker.bootstrap_servers, TOPIC, tmp_path, "--reject-delay-ms", "0")
        collector.start()
        try:
            collector.wait_healthy()
            sent = {}
            for fingerprint, frame in frames.items():
                status, doc, _ = request(collector.url + "/v1/metrics/typed_words/reports", frame)
                assert status == 202, doc
                assert doc["metric"] == "typed_words" and doc["accepted"] == wire.peek_header(frame)[2]
                sent[fingerprint] = frame[wire.HEADER_SIZE:]
            # JSON form with a level's fingerprint (web clients)
            level1 = spec.params_by_level[0]
            _, batch = wire.decode_message(frames[level1.fingerprint], {level1.fingerprint: level1})
            body = {"fingerprint": level1.fingerprint.hex(),
                    "reports": [{"a0": str(int(batch.a0[i])), "a1": str(int(batch.a1[i])), "z": str(int(batch.z[i]))}
                                for i in range(2)]}
            status, doc, _ = request(collector.url + "/v1/reports", json.dumps(body).encode(),
                                     content_type="application/json")
            assert status == 202, doc
            status, doc, _ = request(collector.url + "/v1/reports", foreign_level_frame())  # negative control
            assert (status, doc["reason"]) == (400, "unknown_fingerprint")
            records = consume(broker.bootstrap_servers, TOPIC)
        finally:
            collector.stop()
    sizes = {p.fingerprint: wire.record_size(p) for p in spec.params_by_level}

    def split(fingerprint, body):
        size = sizes[fingerprint]
        return [(fingerprint, body[i:i + size]) for i in range(0, len(body), size)]

    expected = Counter(r for fp, body in sent.items() for r in split(fp, body))
    expected.update(split(level1.fingerprint, wire.encode_frame(level1, batch.slice(0, 2))[wire.HEADER_SIZE:]))
    found = Counter()
    for record in records:
        _, fingerprint, _ = wire.peek_header(record.value)
        assert fingerprint in sizes, "only declared levels reach the topic"
        found.update(split(fingerprint, record.value[wire.HEADER_SIZE:]))
    assert found == expected and sum(found.values()) == 302  # every accepted report once, nothing foreign
