"""The worker's intake of discovery reports (issue 15), without Kafka: a report of a discoverable
metric's level is acked and counted by no table; a foreign fingerprint is still dead-lettered."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from agents.processor import DiscoveryMessage, MessageValidator, PendingBatch, RejectedMessage, plan_batch
from cms_core import wire
from cms_core import discovery as D
from fleet.discovery import simulate_discovery_messages
from registry import load_registry
from registry.discovery import discovery_levels, discovery_of
from tests.registry.helpers import DISCOVERY_METRICS

REGISTRY = DISCOVERY_METRICS + """\
  - name: screens
    description: Screens
    owner: app
    categories: [home, search]
    epsilon: 2
"""
NOW = 1_800_000_000.0


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    path = tmp_path_factory.mktemp("reg") / "registry.yaml"
    path.write_text(REGISTRY, encoding="utf-8")
    return load_registry(path)


def live_levels(registry):
    return [level.params for level in discovery_levels(registry).values() if level.live]


def validator(registry) -> MessageValidator:
    counted = [v.params for m in registry.metrics for v in m.live_versions]
    return MessageValidator(counted, 3600, 300, discovery_sets=live_levels(registry))


def words_frames(registry, values, seed=1):
    spec = discovery_of(registry.metric("typed_words").latest)
    return list(simulate_discovery_messages(spec.domain, spec.params_by_level, values, np.random.default_rng(seed)))


def foreign_level_frame():
    """A level beyond the declared length: a fingerprint of no registry level (the negative control)."""
    domain = D.DiscoveryDomain("strings", alphabet="abcdefghijklmnopqrstuvwxyz", max_length=5, symbols_per_level=1)
    levels = D.level_params("typed_words", 1, 4.0, domain)
    fifth = levels[4]
    frames = list(simulate_discovery_messages(domain, levels, ["zebra"] * 200, np.random.default_rng(2)))
    return next(f for f in frames if wire.peek_header(f)[1] == fifth.fingerprint)


def test_registry_lists_every_level_of_every_discoverable_version(registry):
    levels = discovery_levels(registry)
    words = discovery_of(registry.metric("typed_words").latest)
    assert len(levels) == 4 + 2 * 2  # typed_words: 4 levels; build_id versions 1 and 2: 2 levels each
    assert {levels[p.fingerprint].level for p in words.params_by_level} == {1, 2, 3, 4}
    assert {(lv.metric, lv.version, lv.live) for lv in levels.values() if lv.metric == "build_id"} == {
        ("build_id", 1, False), ("build_id", 2, True)}
    assert levels[words.params_by_level[1].fingerprint].binding == "typed_words@1/level2"
    counted = {v.fingerprint for m in registry.metrics for v in m.versions}
    assert not counted & set(levels), "a level never shares a fingerprint with a counted version"


def test_discovery_reports_are_accepted_as_discovery_and_never_counted(registry):
    check = validator(registry)
    frames = words_frames(registry, ["the"] * 300 + ["zebra"] * 100)
    assert len({wire.peek_header(f)[1] for f in frames}) == 4  # every level is present
    pending = PendingBatch(max_reports=10**6)
    for offset, message in enumerate(frames):
        params, batch = check.check(message, NOW - 10**6, NOW)  # far outside retention: not checked for levels
        assert check.is_discovery(params)
        pending.add(SimpleNamespace(partition=0, offset=offset),
                    DiscoveryMessage(0, offset, params.fingerprint, len(batch)), NOW)
    taken = pending.take()
    assert taken.accepted == [] and taken.dead == [] and len(taken.messages) == len(frames)
    assert sum(d.reports for d in taken.discovery) == 400 and pending.reports == 0
    plan = plan_batch(taken.accepted, lambda key: None, {}, {}, {})
    assert plan.writes == [] and plan.reports == 0  # nothing reaches the tables


def test_ordinary_reports_are_still_counted_and_checked_against_the_window(registry):
    check = validator(registry)
    screens = registry.metric("screens").latest
    from cms_core.privatize import simulate_reports

    batch = simulate_reports(screens.params, np.zeros(5, np.uint64), np.random.default_rng(3))
    message = wire.encode_frame(screens.params, batch)
    params, _ = check.check(message, NOW, NOW)
    assert params.fingerprint == screens.fingerprint and not check.is_discovery(params)
    with pytest.raises(RejectedMessage) as info:
        check.check(message, NOW - 7200, NOW)
    assert info.value.reason == "expired"


def test_foreign_and_retired_levels_and_malformed_level_frames_are_rejected(registry):
    check = validator(registry)
    with pytest.raises(RejectedMessage) as info:  # negative control: a level the registry does not declare
        check.check(foreign_level_frame(), NOW, NOW)
    assert info.value.reason == "unknown_fingerprint"
    retired = discovery_of(registry.metric("build_id").version(1)).params_by_level[0]
    from cms_core.privatize import simulate_reports

    batch = simulate_reports(retired, np.zeros(3, np.uint64), np.random.default_rng(4))
    with pytest.raises(RejectedMessage) as info:  # a retired version's levels are not collected
        check.check(wire.encode_frame(retired, batch), NOW, NOW)
    assert info.value.reason == "unknown_fingerprint"
    frame = words_frames(registry, ["abc"] * 50)[0]
    with pytest.raises(RejectedMessage) as info:  # a level's frame cut short is still a dead letter
        check.check(frame[:-3], NOW, NOW)
    assert info.value.reason == "truncated"


def test_without_discovery_sets_level_reports_are_unknown(registry):
    """The control for the validator itself: the same frames without the registry's levels are dead letters."""
    counted = [v.params for m in registry.metrics for v in m.live_versions]
    check = MessageValidator(counted, 3600, 300)
    with pytest.raises(RejectedMessage) as info:
        check.check(words_frames(registry, ["the"] * 20)[0], NOW, NOW)
    assert info.value.reason == "unknown_fingerprint"


def test_redelivery_drops_pending_discovery_copies(registry):
    check = validator(registry)
    frames = words_frames(registry, ["the"] * 40)
    pending = PendingBatch(max_reports=10**6)

    def add(offset):
        params, batch = check.check(frames[offset], NOW, NOW)
        return pending.add(SimpleNamespace(partition=1, offset=offset),
                           DiscoveryMessage(1, offset, params.fingerprint, len(batch)), NOW)

    for offset in range(3):
        add(offset)
    superseded = add(1)  # the consumer went back to offset 1
    assert [m.offset for m in superseded] == [1, 2]
    assert [d.offset for d in pending.take().discovery] == [0, 1]



@pytest.mark.parametrize("name, raw", [("discovery_interval_seconds", "-1"), ("discovery_interval_seconds", "nan"),
                                       ("discovery_window_seconds", "0"), ("discovery_window_seconds", "1h")])
def test_bad_discovery_settings_name_the_flag(registry, name, raw):
    from agents.settings import WorkerSettings
    from cms_core.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError) as info:
        WorkerSettings.build({}, bootstrap_servers="k:1", **{name: raw})
    assert "--" + name.replace("_", "-") in str(info.value)


def test_interval_zero_turns_passes_off_and_says_so(registry):
    from agents.discovery import DiscoveryService

    service = DiscoveryService([registry.metric("typed_words").latest], bootstrap_servers="k:1", topic="t",
                               interval_seconds=0)
    status, doc = service.answer("typed_words")
    assert status == 503 and "--discovery-interval-seconds 0" in doc["error"]


@pytest.mark.integration
def test_a_pass_in_a_child_that_overruns_its_time_is_stopped_with_a_clear_error(registry):
    """The bound on a worker's pass: a child that has not answered in time is killed (here: at once)."""
    import asyncio

    from agents.discovery_pass import pass_in_child
    from cms_core.errors import OCMSError

    arguments = ([registry.metric("typed_words").latest], "127.0.0.1:1", "t", 0.0, 1.0)
    with pytest.raises(OCMSError, match="took longer than 0.001 s and was stopped"):
        asyncio.run(pass_in_child(arguments, dict(alpha=0.05, confidence=0.95, max_candidates=1000), 0.001))


@pytest.mark.integration
def test_a_failing_pass_in_a_child_reports_its_error(registry):
    """Kafka unreachable: the child's error comes back as an OCMSError (the worker keeps the previous result)."""
    import asyncio

    from agents.discovery_pass import pass_in_child
    from cms_core.errors import OCMSError

    arguments = ([registry.metric("typed_words").latest], "127.0.0.1:1", "t", 0.0, 1.0)
    with pytest.raises(OCMSError, match="KafkaConnectionError|Unable to bootstrap"):
        asyncio.run(pass_in_child(arguments, dict(alpha=0.05, confidence=0.95, max_candidates=1000), 120))


def test_after_a_failed_pass_the_previous_result_is_served_marked_stale(registry):
    import asyncio

    from agents.discovery import DiscoveryService

    service = DiscoveryService([registry.metric("typed_words").latest], bootstrap_servers="127.0.0.1:1", topic="t")
    service.latest["typed_words"] = {"metric": "typed_words", "discovered": [], "reports": 5}
    assert service.answer("typed_words") == (200, service.latest["typed_words"])

    async def one_pass():  # run() logs the failure, records it, then waits for the next interval
        task = asyncio.ensure_future(service.run())
        while "typed_words" not in service.errors:
            await asyncio.sleep(0.05)
        task.cancel()

    asyncio.run(asyncio.wait_for(one_pass(), 120))
    status, doc = service.answer("typed_words")
    assert status == 200 and doc["stale"] is True and "discovery pass failed" in doc["error"] and doc["reports"] == 5
