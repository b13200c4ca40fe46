"""The deployment of docker-compose.yml as separate hosts (benchmarks.faults.hosts): a broker, workers and
collectors, each on its own host, running the commands and flags of docker-compose.yml.

The worker and collector commands are read from docker-compose.yml itself (its ``command`` lists), with
only what a host here differs in replaced: the broker's address for ``kafka:9092``, this run's registry
for ``/etc/ocms/registry.yaml``, a folder of the host's for the RocksDB volume, and ``--broker`` for the
broker profile (compose runs Apache Kafka, the ``kafka`` profile). Topics are created first, as compose's
``topic-init`` does. The embedded broker (Tansu) or librdkafka's mock cluster stands in for Kafka.

The mock cluster listens on its own host's loopback only (librdkafka binds 127.0.0.1 and advertises it), so
with ``--broker mock`` a relay on every host forwards its loopback ports to the broker host's
(benchmarks.faults.relay): a cut link still cuts that host off.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ruamel.yaml import YAML

from infra.broker import broker_binary
from infra.kafka import EMBEDDED, MOCK, create_topics, wait_until_ready
from ocms.process import worker_topics

from .hosts import Host, Network, Process

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
KAFKA_PORT = 9092
WORKER_PORT = 6066
COLLECTOR_PORT = 8080
APP_ID = "ocms-worker"  # compose's default app id (not given there)
SOURCE_TOPIC = "ocms-reports"


def compose_commands(path: Path = COMPOSE) -> dict[str, tuple[list[str], dict[str, str]]]:
    """service -> (its command, its environment) for the worker and the collector of docker-compose.yml."""
    doc = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    out = {}
    for service in ("worker", "collector"):
        spec = doc["services"][service]
        env = spec.get("environment") or {}
        if isinstance(env, list):
            env = dict(item.split("=", 1) for item in env)
        out[service] = ([str(a) for a in spec["command"]], {k: str(v) for k, v in env.items()})
    return out


def _substituted(command: list[str], replacements: dict[str, str]) -> list[str]:
    return [replacements.get(arg, arg) for arg in command]


@dataclass
class Role:
    """One worker or collector host and its process."""

    kind: str  # "worker" | "collector"
    host: Host
    argv: list[str]
    env: dict
    log_path: Path
    process: Process | None = None

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def url(self) -> str:
        port = WORKER_PORT if self.kind == "worker" else COLLECTOR_PORT
        return f"http://{self.host.address}:{port}"

    def start(self) -> None:
        if self.process is None:
            self.process = self.host.spawn(self.argv, self.log_path, self.env)
        else:
            self.process.start()

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()


@dataclass
class Deployment:
    """A broker host, ``workers`` worker hosts (plus ``spares`` that join and leave), ``collectors``
    collector hosts, on one Network."""

    network: Network
    workdir: Path
    registry: Path
    broker_kind: str = "embedded"
    workers: int = 3
    spares: int = 1
    collectors: int = 2
    partitions: int = 4
    collector_args: tuple[str, ...] = ()
    worker_args: tuple[str, ...] = ()
    roles: dict[str, Role] = field(default_factory=dict)
    broker_host: Host | None = None
    broker_process: Process | None = None
    mock: object | None = None  # the MockCluster, with --broker mock
    relays: list[Process] = field(default_factory=list)

    @property
    def profile(self):
        return EMBEDDED if self.broker_kind == "embedded" else MOCK

    @property
    def bootstrap(self) -> str:
        """The broker's address as the hosts reach it."""
        if self.broker_kind == "embedded":
            return f"{self.broker_host.address}:{KAFKA_PORT}"
        return self.mock.bootstrap_servers  # 127.0.0.1:P,... on every host, through its relay

    @property
    def controller_bootstrap(self) -> str:
        """The broker's address as the controller (this process) reaches it."""
        if self.broker_kind == "embedded":
            return self.bootstrap
        return self.mock.bootstrap_servers

    @property
    def spare_names(self) -> list[str]:
        """The workers beyond ``workers``: they join and leave."""
        return [r.name for r in self.worker_roles()[self.workers:]]

    def worker_roles(self) -> list[Role]:
        return [r for r in self.roles.values() if r.kind == "worker"]

    def collector_roles(self) -> list[Role]:
        return [r for r in self.roles.values() if r.kind == "collector"]

    def start(self) -> "Deployment":
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.broker_host = self.network.add_host("kafka")
        self._start_broker()
        commands = compose_commands()
        replacements = {"kafka:9092": self.bootstrap, "/etc/ocms/registry.yaml": str(self.registry)}
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("OCMS_")}
        worker_command, worker_env = commands["worker"]
        for i in range(1, self.workers + self.spares + 1):
            name = f"worker{i}"
            host = self.network.add_host(name)
            store = self.workdir / name / "store"
            store.mkdir(parents=True, exist_ok=True)
            argv = _substituted(worker_command, {**replacements, "rocksdb:///var/lib/ocms": f"rocksdb://{store}"})
            argv = [sys.executable, "-m", "ocms", *argv, "--broker", self.broker_kind, *self.worker_args]
            if self.broker_kind == "mock":
                # The mock's address on every host is its relay's 127.0.0.1: the address a worker reaches the
                # broker from is no address the others reach it at.
                argv += ["--web-advertise-host", host.address]
            self.roles[name] = Role("worker", host, argv, {**base_env, **worker_env}, self.workdir / f"{name}.log")
        collector_command, collector_env = commands["collector"]
        for i in range(1, self.collectors + 1):
            name = f"collector{i}"
            host = self.network.add_host(name)
            argv = [sys.executable, "-m", "ocms", *_substituted(collector_command, replacements),
                    "--broker", self.broker_kind, *self.collector_args]
            self.roles[name] = Role("collector", host, argv, {**base_env, **collector_env},
                                    self.workdir / f"{name}.log")
        if self.broker_kind == "mock":
            self._start_relays()
        self._create_topics()
        return self

    # ---------------------------------------------------------------- the broker
    def _start_broker(self) -> None:
        if self.broker_kind == "embedded":
            url = f"tcp://{self.broker_host.address}:{KAFKA_PORT}"
            self.broker_process = self.broker_host.spawn(
                [broker_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"], self.workdir / "kafka.log")
            asyncio.run(wait_until_ready(self.controller_bootstrap, 30))
            return
        from infra.mock_cluster import MockCluster

        # The mock runs in this process's namespace: its brokers on this host's loopback; every host's relay
        # forwards its own loopback ports here (through the bridge, so a cut link cuts it off).
        self.mock = MockCluster(brokers=3).start()

    def _start_relays(self) -> None:
        ports = [int(a.rsplit(":", 1)[1]) for a in self.mock.bootstrap_servers.split(",")]
        target = self.network.bridge_address
        # In the controller's namespace: listen on the bridge address, forward to the mock's loopback ports.
        from .relay import spawn_relay_here

        self.relays.append(spawn_relay_here(target, ports, self.workdir / "relay-controller.log"))
        for role in self.roles.values():
            self.relays.append(role.host.spawn(
                [sys.executable, "-m", "benchmarks.faults.relay", "--listen", "127.0.0.1", "--target", target,
                 *[str(p) for p in ports]], self.workdir / f"relay-{role.name}.log"))

    def _create_topics(self) -> None:
        topics = worker_topics(APP_ID, SOURCE_TOPIC, self.partitions)
        if self.broker_kind == "mock":
            topics = {**topics, f"{SOURCE_TOPIC}-idempotency": 1, f"{SOURCE_TOPIC}-idempotency-redo": 1}
            self.mock.create_topics(topics)
            return
        changelog = next(t for t in topics if t.endswith("-changelog"))
        asyncio.run(create_topics(self.controller_bootstrap, topics, self.profile,
                                  configs={changelog: {"cleanup.policy": "compact"}}))

    # ---------------------------------------------------------------- lifecycle
    def start_roles(self, kind: str, count: int | None = None) -> None:
        roles = [r for r in self.roles.values() if r.kind == kind]
        for role in roles[:count]:
            role.start()

    def close(self) -> None:
        for role in self.roles.values():
            if role.process is not None:
                role.process.stop(timeout=5)
        for relay in self.relays:
            relay.stop(timeout=2)
        if self.mock is not None:
            self.mock.stop()
        if self.broker_process is not None:
            self.broker_process.stop(timeout=5)
