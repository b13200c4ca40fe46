import pytest

from agents.settings import WorkerSettings
from cms_core import InvalidParameterError, OCMSParams

PARAMS = OCMSParams.build(2.0, 1000)


def test_env_then_overrides_and_frozen():
    env = {"OCMS_BOOTSTRAP_SERVERS": "k:9092", "OCMS_PARTITIONS": "8", "OCMS_TRACKED_RANGE": "0:1000",
           "OCMS_WATCH": "1, 2,3", "OCMS_BUCKET_SECONDS": "60"}
    s = WorkerSettings.build(PARAMS, env, partitions=2)
    assert (s.bootstrap_servers, s.partitions, s.tracked_range, s.watch) == ("k:9092", 2, (0, 1000), ("1", "2", "3"))
    assert s.session_timeout_s == 30.0
    assert WorkerSettings.build(PARAMS, embedded_broker=True).session_timeout_s == 3.0
    with pytest.raises(AttributeError):
        s.partitions = 3


@pytest.mark.parametrize(
    "env, name",
    [
        ({}, "OCMS_BOOTSTRAP_SERVERS"),
        ({"OCMS_BOOTSTRAP_SERVERS": "k", "OCMS_PARTITIONS": "zero"}, "OCMS_PARTITIONS"),
        ({"OCMS_BOOTSTRAP_SERVERS": "k", "OCMS_PARTITIONS": "0"}, "OCMS_PARTITIONS"),
        ({"OCMS_BOOTSTRAP_SERVERS": "k", "OCMS_WEB_PORT": "70000"}, "OCMS_WEB_PORT"),
        ({"OCMS_BOOTSTRAP_SERVERS": "k", "OCMS_SOURCE_TOPIC": "bad topic!"}, "OCMS_SOURCE_TOPIC"),
        ({"OCMS_BOOTSTRAP_SERVERS": "k", "OCMS_BATCH_MAX_SECONDS": "nan"}, "OCMS_BATCH_MAX_SECONDS"),
        ({"OCMS_BOOTSTRAP_SERVERS": "k", "OCMS_STORE": "redis://x"}, "OCMS_STORE"),
        ({"OCMS_BOOTSTRAP_SERVERS": "k", "OCMS_TRACKED_RANGE": "5"}, "OCMS_TRACKED_RANGE"),
        ({"OCMS_BOOTSTRAP_SERVERS": "k", "OCMS_TRACKED_RANGE": "0:5", "OCMS_TRACKED_FILE": "f"}, "OCMS_TRACKED_FILE"),
        ({"OCMS_BOOTSTRAP_SERVERS": "k", "OCMS_RETENTION_SECONDS": "30"}, "OCMS_RETENTION_SECONDS"),
        ({"OCMS_BOOTSTRAP_SERVERS": "k", "OCMS_DEAD_LETTER_TOPIC": "ocms-reports"}, "OCMS_DEAD_LETTER_TOPIC"),
    ],
)
def test_bad_settings_name_the_variable(env, name):
    with pytest.raises(InvalidParameterError) as info:
        WorkerSettings.build(PARAMS, env)
    assert info.value.name == name
