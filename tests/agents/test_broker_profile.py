"""What the worker's Kafka clients get under each broker profile (--broker), and its background jobs
failing loudly; no broker needed."""

import asyncio
import logging

import pytest

from agents.app import OCMSWorker, faust_settings
from agents.settings import WorkerSettings
from registry.flags import metrics_from_flags

METRICS = metrics_from_flags(epsilon=2, dictionary_size=1000, tracked_range="0:10")


def settings(broker: str, **overrides) -> WorkerSettings:
    return WorkerSettings.build(bootstrap_servers="k1:9092,k2:9092", broker=broker, app_id="unit-profile", **overrides)


@pytest.mark.parametrize("broker, declare, batch, session", [
    ("kafka", True, None, 30.0), ("mock", False, None, 30.0), ("embedded", True, 1, 3.0),
])
def test_what_faust_gets_under_each_profile(broker, declare, batch, session):
    conf = faust_settings(settings(broker))
    assert conf["broker"] == "kafka://k1:9092;kafka://k2:9092"
    assert conf["topic_allow_declare"] is declare  # the mock: topics exist before the worker starts
    assert conf["topic_disable_leader"] is True  # no on_leader job: no leader-election topic to create
    assert conf.get("producer_max_batch_size") == batch  # Tansu: one record per changelog batch
    assert (conf["broker_session_timeout"], conf["broker_heartbeat_interval"]) == (session, min(3.0, session / 3))
    assert conf["producer_acks"] == -1


def test_the_session_timeout_setting_overrides_the_profile():
    conf = faust_settings(settings("kafka", session_timeout_seconds="6"))
    assert (conf["broker_session_timeout"], conf["broker_heartbeat_interval"]) == (6.0, 2.0)
    with pytest.raises(Exception, match="--session-timeout-seconds"):
        settings("kafka", session_timeout_seconds="0.5")


@pytest.mark.parametrize("broker, wait", [("kafka", None), ("mock", 100), ("embedded", 100)])
def test_the_view_reader_gets_the_fetch_wait_of_its_profile(broker, wait):
    worker = OCMSWorker(settings(broker), METRICS)
    assert worker.reader.profile.fetch_max_wait_ms == wait
    assert worker.reader.partitions == 4 and worker.reader.topic == "unit-profile-ocms-counts-changelog"


# ------------------------------------------------------------------ background jobs fail loudly
@pytest.fixture
def worker(monkeypatch):
    worker = OCMSWorker(settings("kafka"), METRICS)
    worker.crashed = []

    async def crash(reason):
        worker.crashed.append(reason)

    monkeypatch.setattr(worker.app, "crash", crash)
    return worker


def test_a_failing_background_job_is_logged_shown_by_healthz_and_crashes_the_worker(worker, caplog):
    async def reader():
        raise ConnectionError("fetch refused")

    with caplog.at_level(logging.ERROR, logger="ocms.worker"):
        asyncio.run(worker.supervised("the changelog view reader", reader(), forever=True))
    assert [type(r) for r in worker.crashed] == [ConnectionError]
    assert "the changelog view reader stopped: ConnectionError: fetch refused" in caplog.text
    health = worker.health()
    assert health["status"] == "failed" and "fetch refused" in health["failed"]


def test_a_reader_that_returns_or_is_cancelled_while_the_worker_runs_is_a_failure(worker):
    async def returns():
        return None

    async def cancelled():
        raise asyncio.CancelledError()  # what a masked error looked like (aiokafka's stop() after start)

    asyncio.run(worker.supervised("the changelog view reader", returns(), forever=True))
    asyncio.run(worker.supervised("the changelog view reader", cancelled(), forever=True))
    assert [str(r) for r in worker.crashed] == ["it returned", "it was cancelled"]


def test_a_timer_round_that_succeeds_is_quiet(worker):
    async def round_():
        return None

    asyncio.run(worker.supervised("the retention timer", round_()))
    assert worker.crashed == [] and worker.health()["failed"] is None
