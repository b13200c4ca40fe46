"""docker-compose.yml: Compose Specification schema + the deployment's invariants.

No Docker engine is needed: the file is validated against the compose-spec
JSON schema vendored by check-jsonschema, and its structure is checked here.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from tests.deploy.conftest import require_module, run
from tests.deploy.promql import ROOT

COMPOSE = ROOT / "docker-compose.yml"

WORKER_COMMAND = [
    "worker", "--registry", "/etc/ocms/registry.yaml", "--bootstrap-servers", "kafka:9092",
    "--partitions", "4", "--web-host", "0.0.0.0", "--web-port", "6066", "--store", "rocksdb:///var/lib/ocms",
]
SIMULATOR_COMMAND = [
    "simulate", "--registry", "/etc/ocms/registry.yaml", "--metric", "flight_dest", "--collector", "http://collector:8080",
    "--duration", "86400", "--rate", "2000", "--frame-size", "100",
]
TOPICS = {"ocms-reports": 4, "ocms-reports-dlq": 4, "ocms-worker-ocms-counts-changelog": 4}
CHANGELOG = "ocms-worker-ocms-counts-changelog"
LONG_RUNNING = ("kafka", "worker", "collector", "simulator", "prometheus", "grafana")
WITH_HEALTHCHECK = ("kafka", "worker", "collector", "prometheus", "grafana")


def _command(service: dict) -> list[str]:
    cmd = service.get("command")
    return shlex.split(cmd) if isinstance(cmd, str) else [str(x) for x in cmd]


def _flag(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def _env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def _unescape(text: str) -> str:
    """What Compose hands to the container: `$$` is a literal `$`."""
    return text.replace("$$", "$")


def _topic_init_script(compose: dict) -> str:
    service = compose["services"]["topic-init"]
    parts = _command(service)
    return _unescape(parts[-1])


# ----------------------------------------------------------------------------- schema

def _check_jsonschema(path: Path):
    require_module("check_jsonschema")
    return run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(path)])


@pytest.mark.integration
def test_compose_file_matches_compose_spec_schema():
    result = _check_jsonschema(COMPOSE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok -- validation done" in result.stdout


@pytest.mark.integration
@pytest.mark.parametrize("broken", [
    # depends_on condition typo
    "services:\n  a:\n    image: x:1\n    depends_on:\n      b:\n        condition: service_healty\n  b:\n    image: x:1\n",
    # unknown service key
    "services:\n  a:\n    image: x:1\n    restart_policy: always\n",
    # healthcheck.retries must be a number
    "services:\n  a:\n    image: x:1\n    healthcheck:\n      test: [CMD, true]\n      retries: many\n",
])
def test_schema_check_rejects_broken_compose_files(tmp_path, broken):
    path = tmp_path / "docker-compose.yml"
    path.write_text(broken)
    result = _check_jsonschema(path)
    assert result.returncode != 0, result.stdout


def test_interpolation_is_escaped_and_has_defaults():
    """Compose interpolates `$X`; literal dollars must be `$$`, variables need defaults."""
    text = COMPOSE.read_text()
    bad = []
    for match in re.finditer(r"\$(\$|\{[^}]*\}|.)", text):
        token = match.group(0)
        if token == "$$":
            continue
        if re.fullmatch(r"\$\{[A-Z_][A-Z0-9_]*:-[^}]*\}", token):
            continue
        line = text.count("\n", 0, match.start()) + 1
        bad.append(f"line {line}: {token!r}")
    assert not bad, "unescaped or default-less interpolation: " + ", ".join(bad)


# ----------------------------------------------------------------------------- kafka

def test_kafka_is_a_pinned_single_kraft_node(compose):
    kafka = compose["services"]["kafka"]
    image, _, tag = kafka["image"].partition(":")
    assert image == "apache/kafka"
    assert re.fullmatch(r"\d+\.\d+\.\d+", tag), f"pin an exact Kafka version, got {kafka['image']!r}"
    env = _env(kafka)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node_id = env["KAFKA_NODE_ID"]
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{node_id}@kafka:9093"
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] == "CONTROLLER"
    assert "CONTROLLER://:9093" in env["KAFKA_LISTENERS"]
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert not any("ZOOKEEPER" in key for key in env), "KRaft: no ZooKeeper settings"
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "1"
    assert env["KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS"] == "0"
    # Storage is formatted with CLUSTER_ID: a base64url-encoded 16-byte UUID.
    import base64

    assert len(env["CLUSTER_ID"]) == 22 and len(base64.urlsafe_b64decode(env["CLUSTER_ID"] + "==")) == 16
    # Data on a named volume, where the broker writes its log.
    mounts = [str(v) for v in kafka["volumes"]]
    assert f"kafka-data:{env['KAFKA_LOG_DIRS']}" in mounts


def test_topic_init_creates_topics_with_explicit_partitions(compose):
    services = compose["services"]
    init = services["topic-init"]
    assert init["image"] == services["kafka"]["image"], "use the broker's own kafka-topics.sh"
    assert init["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert str(init.get("restart", "no")) == "no", "one-shot service"
    script = _topic_init_script(compose)
    assert "kafka-topics.sh" in script
    created = {}
    for line in script.splitlines():
        parts = line.split()
        if parts[:1] == ["create"]:
            created[parts[1]] = (int(parts[2]), parts[3:])
    assert {name: n for name, (n, _) in created.items()} == TOPICS
    assert created[CHANGELOG][1] == ["--config", "cleanup.policy=compact"]
    for name in TOPICS:
        assert created[name][1] == [] or name == CHANGELOG
    # The helper passes the partition count and RF 1, and refuses an existing topic with another count.
    assert '--partitions "$partitions" --replication-factor 1' in script
    assert "PartitionCount" in script and "exit 1" in script


@pytest.mark.integration
def test_topic_init_script_is_valid_bash(compose):
    script = _topic_init_script(compose)
    result = run(["bash", "-n", "-c", script])
    assert result.returncode == 0, result.stderr
    assert compose["services"]["topic-init"]["entrypoint"] == ["/bin/bash", "-euc"]


def test_topic_partitions_match_the_worker(compose):
    worker_partitions = int(_flag(_command(compose["services"]["worker"]), "--partitions"))
    assert set(TOPICS.values()) == {worker_partitions}
    assert _env(compose["services"]["collector"])["OCMS_SOURCE_TOPIC"] in TOPICS


# ----------------------------------------------------------------------------- worker / simulator

def test_worker_command_line(compose):
    assert _command(compose["services"]["worker"]) == WORKER_COMMAND


def test_simulator_command_line(compose):
    assert _command(compose["services"]["simulator"]) == SIMULATOR_COMMAND


def test_the_fleet_uploads_through_the_collector(compose):
    """The deployment exercises its own front door: the simulated fleet posts to the collector
    service (as devices do), never to Kafka, and the collector produces to the topic the worker reads."""
    from agents.settings import SETTINGS

    services = compose["services"]
    simulator, collector, worker = services["simulator"], services["collector"], services["worker"]
    command = _command(simulator)
    assert "--bootstrap-servers" not in command and "--embedded-broker" not in command, "the fleet bypasses the collector"
    url = _flag(command, "--collector")
    host, port = re.fullmatch(r"http://([\w-]+):(\d+)", url).groups()
    assert host == "collector" and port == _flag(_command(collector), "--port")
    assert simulator["depends_on"] == {"collector": {"condition": "service_healthy"}}
    # the metric the fleet reports is one the collector accepts (same registry file) and the worker counts
    assert _flag(command, "--registry") == _flag(_command(collector), "--registry") == _flag(_command(worker), "--registry")
    worker_topic = next(s.default for s in SETTINGS if s.name == "source_topic")
    assert "--source-topic" not in _command(worker)
    assert "--source-topic" not in _command(collector)
    assert _env(collector)["OCMS_SOURCE_TOPIC"] == worker_topic == "ocms-reports"


def test_worker_is_scalable(compose):
    worker = compose["services"]["worker"]
    assert "container_name" not in worker
    assert "ports" not in worker, "a fixed host port breaks `--scale worker=2`; Prometheus scrapes inside the network"
    assert "hostname" not in worker
    assert "6066" in [str(p) for p in worker.get("expose", [])]
    assert "build" in worker and worker["build"]["dockerfile"] == "Dockerfile"
    # deploy.replicas would fight `--scale`; leave the count to the command line.
    assert "replicas" not in (worker.get("deploy") or {})


def test_no_service_pins_a_container_name(compose):
    assert [name for name, s in compose["services"].items() if "container_name" in s] == []


def test_worker_store_is_on_a_per_replica_volume(compose):
    worker = compose["services"]["worker"]
    store = _flag(_command(worker), "--store")
    assert store.startswith("rocksdb://")
    path = store[len("rocksdb://"):]
    volumes = [v for v in worker["volumes"] if isinstance(v, dict)]
    targets = {v["target"]: v for v in volumes}
    assert path in targets, f"{path} is not on a volume"
    assert targets[path]["type"] == "volume"
    # A named volume would be shared by every replica (RocksDB locks): anonymous instead.
    assert "source" not in targets[path]


def test_worker_healthcheck_probes_healthz_on_the_web_port(compose):
    worker = compose["services"]["worker"]
    port = _flag(_command(worker), "--web-port")
    probe = " ".join(worker["healthcheck"]["test"])
    assert f"127.0.0.1:{port}/healthz" in probe
    assert _flag(_command(worker), "--web-host") == "0.0.0.0"


def test_dependencies_use_conditions(compose):
    services = compose["services"]
    for name, service in services.items():
        deps = service.get("depends_on") or {}
        assert isinstance(deps, dict), f"{name}: depends_on needs conditions, not a list"
        for dep, spec in deps.items():
            assert dep in services
            assert spec["condition"] in ("service_healthy", "service_completed_successfully", "service_started")
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} to be healthy but it has no healthcheck"
            if spec["condition"] == "service_completed_successfully":
                assert str(services[dep].get("restart", "no")) == "no"
    for name in ("worker", "collector"):
        deps = services[name]["depends_on"]
        assert deps["kafka"]["condition"] == "service_healthy"
        assert deps["topic-init"]["condition"] == "service_completed_successfully"
    assert services["grafana"]["depends_on"]["prometheus"]["condition"] == "service_healthy"


@pytest.mark.parametrize("name", WITH_HEALTHCHECK)
def test_healthchecks(compose, name):
    check = compose["services"][name]["healthcheck"]
    assert check["test"][0] in ("CMD", "CMD-SHELL")
    for key in ("interval", "timeout", "retries", "start_period"):
        assert key in check, f"{name}: healthcheck.{key}"


@pytest.mark.parametrize("name", LONG_RUNNING)
def test_restart_policies(compose, name):
    assert compose["services"][name]["restart"] in ("unless-stopped", "always", "on-failure")


def test_named_volumes_are_declared_and_used(compose):
    declared = set(compose.get("volumes") or {})
    used = set()
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            if isinstance(volume, str):
                source = volume.split(":", 1)[0]
                if not source.startswith((".", "/")):
                    used.add(source)
            elif volume.get("type") == "volume" and volume.get("source"):
                used.add(volume["source"])
    assert used == declared
    assert {"kafka-data", "prometheus-data", "grafana-data"} <= declared


def test_bind_mounts_exist(compose):
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            if isinstance(volume, str) and volume.startswith("./"):
                assert (ROOT / volume.split(":", 1)[0]).exists(), f"{name}: {volume}"


def test_images_are_pinned(compose):
    for name, service in compose["services"].items():
        image = service.get("image", "")
        if "build" in service:
            continue
        repo, _, tag = image.partition(":")
        assert tag and tag != "latest", f"{name}: pin {image!r}"
    assert compose["services"]["prometheus"]["image"].startswith("prom/prometheus:v")
    assert compose["services"]["grafana"]["image"].startswith("grafana/grafana:")


def test_published_host_ports_are_unique(compose):
    seen = {}
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            host = str(port).rsplit(":", 1)[0]
            assert host not in seen, f"{name} and {seen.get(host)} publish {host}"
            seen[host] = name


def test_compose_command_lines_parse_with_the_ocms_cli(compose):
    """The compose file's simulator and worker command lines are valid `ocms` invocations."""
    from ocms.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(_command(compose["services"]["simulator"]))
    assert args.command == "simulate" and args.frame_size == 100 and args.metric == "flight_dest"
    assert args.collector == "http://collector:8080" and args.bootstrap_servers is None

    args = parser.parse_args(_command(compose["services"]["worker"]))
    assert args.command == "worker" and args.registry == "/etc/ocms/registry.yaml"


def test_changelog_topic_is_the_workers_table_changelog():
    """Faust names the changelog `<app id>-<table>-changelog`; topic-init must create that one."""
    from agents import settings

    app_id = settings.BY_NAME["app_id"].default  # the declared default (agents/settings.py SETTINGS)
    assert f"{app_id}-{settings.TABLE_NAME}-changelog" == CHANGELOG


def _run_topic_init(compose: dict, tmp_path: Path, partitions_reported: int):
    """The topic-init script against a stub kafka-topics.sh that logs its calls."""
    log = tmp_path / "calls.log"
    stub = tmp_path / "kafka-topics.sh"
    stub.write_text(f"""#!/bin/bash
echo "$*" >> {log}
if [[ " $* " == *" --describe "* ]]; then
  topic=$(sed -n 's/.*--topic \\([^ ]*\\).*/\\1/p' <<< "$*")
  printf 'Topic: %s\\tTopicId: x\\tPartitionCount: {partitions_reported}\\tReplicationFactor: 1\\tConfigs: \\n' "$topic"
  printf '\\tTopic: %s\\tPartition: 0\\tLeader: 1\\tReplicas: 1\\tIsr: 1\\n' "$topic"
fi
""")
    stub.chmod(0o755)
    script = _topic_init_script(compose).replace("/opt/kafka/bin/kafka-topics.sh", str(stub))
    assert str(stub) in script
    result = run(["bash", "-euc", script])
    return result, (log.read_text().splitlines() if log.exists() else [])


@pytest.mark.integration
def test_topic_init_script_runs(compose, tmp_path):
    result, calls = _run_topic_init(compose, tmp_path, 4)
    assert result.returncode == 0, result.stdout + result.stderr
    creates = [c for c in calls if "--create" in c]
    assert creates == [
        "--bootstrap-server kafka:9092 --create --if-not-exists --topic ocms-reports --partitions 4 --replication-factor 1",
        "--bootstrap-server kafka:9092 --create --if-not-exists --topic ocms-reports-dlq --partitions 4 --replication-factor 1",
        f"--bootstrap-server kafka:9092 --create --if-not-exists --topic {CHANGELOG} --partitions 4 "
        "--replication-factor 1 --config cleanup.policy=compact",
    ]
    assert "topic ocms-reports ready: 4 partitions" in result.stdout


@pytest.mark.integration
def test_topic_init_fails_on_an_existing_topic_with_other_partitions(compose, tmp_path):
    result, calls = _run_topic_init(compose, tmp_path, 2)
    assert result.returncode == 1
    assert "topic ocms-reports has 2 partitions, expected 4" in result.stderr
    assert len([c for c in calls if "--create" in c]) == 1, "stops at the first mismatch"


@pytest.mark.parametrize("name", ["worker", "simulator", "collector"])
def test_registry_readers_mount_the_registry_and_its_tracked_files(compose, name):
    """--registry names a file inside the container; the registry's tracked files are relative to it."""
    import posixpath

    from registry import load_registry

    service = compose["services"][name]
    path = _flag(_command(service), "--registry")
    mounts = {v.split(":")[1]: v.split(":")[0] for v in service.get("volumes", []) if isinstance(v, str)}
    assert mounts.get(path) == "./deploy/registry.yaml", f"{name}: {path} is not mounted"
    tracked_dir = posixpath.join(posixpath.dirname(path), "tracked")
    assert mounts.get(tracked_dir) == "./deploy/tracked", f"{name}: the registry's tracked files are not mounted"
    assert load_registry(ROOT / "deploy" / "registry.yaml").metrics  # the mounted file loads
