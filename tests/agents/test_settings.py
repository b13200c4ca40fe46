import re
import subprocess
import sys
from pathlib import Path

import pytest

from agents.settings import README_MARKER, SETTINGS, WORKER_ROWS, WorkerSettings, readme_table, worker_settings
from cms_core import InvalidParameterError
from infra.settings import generated_table
from ocms.cli import build_parser
from registry.values_file import MAX_WHOLE_DICTIONARY

ROOT = Path(__file__).resolve().parents[2]

#: A worker's one metric, in its variables.
METRIC_ENV = {"OCMS_EPSILON": "2", "OCMS_DICTIONARY_SIZE": "1000"}


def test_env_then_overrides_and_frozen():
    env = {"OCMS_BOOTSTRAP_SERVERS": "k:9092", "OCMS_PARTITIONS": "8", "OCMS_TRACKED_RANGE": "0:1000",
           "OCMS_WATCH": "1, 2,3", "OCMS_BUCKET_SECONDS": "60", **METRIC_ENV}
    s, metrics = worker_settings({"partitions": "2"}, env)
    version = metrics.metrics[0].latest
    assert (s.bootstrap_servers, s.partitions, version.tracked_count, version.watch) == ("k:9092", 2, 1000,
                                                                                         ("1", "2", "3"))
    assert s.broker.session_timeout_s == s.session_timeout_s == 30.0
    assert WorkerSettings.build(broker="embedded").session_timeout_s == 3.0
    assert WorkerSettings.build(broker="embedded", session_timeout_seconds="6").session_timeout_s == 6.0
    with pytest.raises(AttributeError):
        s.partitions = 3


@pytest.mark.parametrize(
    "env, name",
    [
        ({}, "--bootstrap-servers (or OCMS_BOOTSTRAP_SERVERS)"),  # neither given: both named
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
        worker_settings({}, {**METRIC_ENV, **env})
    assert info.value.name == name


def test_flags_name_themselves_when_given():
    with pytest.raises(InvalidParameterError) as info:
        WorkerSettings.build({"OCMS_WEB_PORT": "8080"}, bootstrap_servers="k", web_port="0")
    assert info.value.name == "--web-port"
    with pytest.raises(InvalidParameterError) as info:
        worker_settings({"retention_seconds": "30", "bootstrap_servers": "k"}, {"OCMS_BUCKET_SECONDS": "60", **METRIC_ENV})
    assert info.value.name == "--retention-seconds"


def test_defaults_come_from_the_declarations():
    s = WorkerSettings.build({}, bootstrap_servers="k")
    for setting in WORKER_ROWS:
        if hasattr(s, setting.name) and setting.name != "bootstrap_servers":
            assert getattr(s, setting.name) == setting.default, setting.name
    assert s.broker.name == "kafka"


def test_parameter_set_from_flags_and_environment():
    env = {"OCMS_EPSILON": "2", "OCMS_DICTIONARY_SIZE": "1_000", "OCMS_BOOTSTRAP_SERVERS": "k:1",
           "OCMS_EXTRA_EPSILON": "1, 3", "OCMS_STRINGS": "false"}
    _, metrics = worker_settings({"epsilon": "4"}, env)
    versions = metrics.metrics[0].versions
    assert versions[-1].params.epsilon == 4.0 and versions[-1].params.dictionary_size == 1000
    assert [v.params.epsilon for v in versions] == [1.0, 3.0, 4.0]  # the rotated sets, then --epsilon
    with pytest.raises(InvalidParameterError) as info:
        worker_settings({}, {**env, "OCMS_EPSILON": "-1"})
    assert info.value.name == "OCMS_EPSILON"
    with pytest.raises(InvalidParameterError) as info:
        worker_settings({}, {**env, "OCMS_HASH_RANGE": "8", "OCMS_F_STAR": "0.5"})
    assert info.value.name == "OCMS_F_STAR" and "has no effect with OCMS_HASH_RANGE" in info.value.reason


def test_every_setting_is_a_flag_with_its_variable_in_the_help():
    worker = build_parser()._subparsers._group_actions[0].choices["worker"]
    text = " ".join(worker.format_help().split())
    for setting in SETTINGS:
        assert setting.flag in worker._option_string_actions, setting.flag
        assert f"[{setting.env}" in text, setting.env


@pytest.mark.integration
def test_readme_settings_table_is_the_generated_one():
    reference = ROOT / "docs" / "reference.md"
    table = generated_table(reference, README_MARKER)
    assert table is not None, "docs/reference.md lost its settings-table markers"
    assert table == readme_table(), "regenerate: python -m agents.settings --update-readme"
    printed = subprocess.run([sys.executable, "-m", "agents.settings"], capture_output=True, text=True, check=True,
                             cwd=ROOT).stdout
    assert printed.strip() == readme_table()


def test_one_tracked_set_limit_everywhere(capsys):
    from ocms.cli import main

    text = readme_table()
    assert f"d <= {MAX_WHOLE_DICTIONARY:,}" in text
    with pytest.raises(SystemExit) as info:
        main(["estimate", "x.cap", "-e", "2", "-d", str(MAX_WHOLE_DICTIONARY + 1)])
    assert info.value.code == 2 and f"larger than {MAX_WHOLE_DICTIONARY:,}" in capsys.readouterr().err
    with pytest.raises(InvalidParameterError) as info:
        worker_settings({"bootstrap_servers": "k"}, {"OCMS_EPSILON": "2",
                                                     "OCMS_DICTIONARY_SIZE": str(MAX_WHOLE_DICTIONARY + 1)})
    assert f"larger than {MAX_WHOLE_DICTIONARY:,}" in info.value.reason


def test_readme_and_makefile_state_one_make_results_time():
    readme = (ROOT / "docs" / "evidence.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    readme_times = set(re.findall(r"make results.*?~(\d+) min", readme))
    make_times = set(re.findall(r"~(\d+) min on", makefile))
    assert readme_times and readme_times == make_times, (readme_times, make_times)


def test_l2_derives_the_tracked_count_from_a_tracked_set_given_in_the_environment():
    """Issue 18: `--mode l2` takes D from the tracked set, wherever the set was given (here OCMS_TRACKED_RANGE)."""
    env = {"OCMS_TRACKED_RANGE": "0:500", "OCMS_BOOTSTRAP_SERVERS": "127.0.0.1:9092"}
    params = worker_settings({"epsilon": "2", "mode": "l2", "dictionary_size": "100000"}, env)[1].metrics[0].latest.params
    assert (params.mode, params.tracked_count) == ("l2", 500)
    explicit = worker_settings({"epsilon": "2", "mode": "l2", "dictionary_size": "100000", "tracked": "800"}, env)[1]
    assert explicit.metrics[0].latest.params.tracked_count == 800  # an explicit D wins


def test_a_worker_bound_to_every_address_advertises_one_the_others_can_reach():
    """Issue 35, 4: docker-compose's workers bind 0.0.0.0, and each advertised http://0.0.0.0:6066, so the
    partition-to-worker map (keyed by that URL) collapsed and no query was ever forwarded. The advertised host is
    the address the host reaches the broker from (or --web-advertise-host), never 0.0.0.0."""
    from agents.settings import WorkerSettings, route_source_address

    bound = WorkerSettings.build(bootstrap_servers="127.0.0.1:9092", web_host="0.0.0.0")
    assert bound.advertised_web_host == "127.0.0.1" == route_source_address("127.0.0.1:9092")
    assert WorkerSettings.build(bootstrap_servers="127.0.0.1:9092", web_host="::").advertised_web_host != "::"
    assert WorkerSettings.build(bootstrap_servers="b:9092", web_host="10.1.2.3").advertised_web_host == "10.1.2.3"
    named = WorkerSettings.build(bootstrap_servers="b:9092", web_host="0.0.0.0", web_advertise_host="worker-2.internal")
    assert named.advertised_web_host == "worker-2.internal"
    assert route_source_address("no-such-host.invalid:9092") is None and route_source_address(":9092") is None
