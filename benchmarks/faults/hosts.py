"""Separate hosts on one machine: a network namespace each, one bridge, private addresses.

Each host of a fault schedule (the broker, every worker, every collector) runs in its own network
namespace with its own address on a private /24, and its own host name (a UTS namespace), as each
container of docker-compose.yml does: workers advertise their own address, collectors take their
transactional id from their own host name, and a cut link cuts exactly one host off.

    with Network() as net:
        kafka = net.add_host("kafka")
        proc = kafka.spawn(["sleep", "5"], log_path)
        net.cut("kafka"); net.heal("kafka")

The bridge lives in this (the controller's) namespace with the subnet's first address, so the
controller reaches every host; a host's link is its veth pair's end on the bridge (down = cut off
from every other host and from the controller). Needs root (``ip netns``). Namespaces are named
``ocms-f<pid>-<host>``; :func:`sweep_stale` removes those of runs whose process is gone (a run
killed outright), and :meth:`Network.close` removes its own: namespaces, links and processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from infra.process import parent_death_preexec

PREFIX = "ocms-f"


class HostsUnavailable(RuntimeError):
    """The machine cannot make hosts (not root, or no ``ip``): the message says what is missing."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def require_hosts() -> None:
    """Raise HostsUnavailable unless this process can make network namespaces."""
    if os.geteuid() != 0:
        raise HostsUnavailable("fault schedules run each host in its own network namespace: run as root "
                               "(CI and the developers' machines do)")
    try:
        _ip("netns", "list")
    except (OSError, subprocess.CalledProcessError) as exc:
        raise HostsUnavailable(f"`ip netns` is not usable here ({exc}): install iproute2") from exc


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> list[str]:
    """Remove the namespaces and bridges of fault runs whose process has exited; their names."""
    removed = []
    listing = _ip("netns", "list", check=False).stdout.split()
    for name in listing:
        if not name.startswith(PREFIX):
            continue
        tag = name[len(PREFIX):].split("-", 1)[0]
        if tag.isdigit() and not _alive(int(tag)):
            _kill_namespace(name)
            removed.append(name)
    for line in _ip("-o", "link", "show", "type", "bridge", check=False).stdout.splitlines():
        bridge = line.split(":")[1].strip() if ":" in line else ""
        if bridge.startswith("ocb") and bridge[3:].isdigit() and not _alive(int(bridge[3:])):
            _ip("link", "del", bridge, check=False)
            removed.append(bridge)
    return removed


def _kill_namespace(name: str) -> None:
    pids = _ip("netns", "pids", name, check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    _ip("netns", "del", name, check=False)


@dataclass
class Process:
    """A process on a host: started in the host's namespaces, in a session of its own (signals reach
    exactly it) that dies with the controller."""

    host: "Host"
    argv: list[str]
    log_path: Path
    env: dict | None = None
    popen: subprocess.Popen | None = field(default=None, repr=False)
    starts: int = 0

    def start(self) -> "Process":
        self.starts += 1
        log = open(self.log_path, "ab")
        log.write(f"\n===== start {self.starts} at {time.time():.3f}: {' '.join(self.argv)}\n".encode())
        log.flush()
        try:
            # ip netns exec -> unshare --uts -> sh (sets the host name) -> exec the command: one PID throughout.
            self.popen = subprocess.Popen(
                ["ip", "netns", "exec", self.host.namespace, "unshare", "--uts", "sh", "-c",
                 'hostname "$0" && exec "$@"', self.host.name, *self.argv],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=parent_death_preexec(signal.SIGKILL), env=self.env)
        finally:
            log.close()
        return self

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float) -> bool:
        """Whether it exited within ``timeout``."""
        if self.popen is None:
            return True
        try:
            self.popen.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (after SIGCONT: a stopped process cannot exit), then SIGKILL after ``timeout``."""
        if not self.alive():
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        if not self.wait(timeout):
            self.signal(signal.SIGKILL)
            self.wait(10)


@dataclass
class Host:
    name: str
    namespace: str
    address: str
    link: str  # the veth end on the bridge: down = cut off
    processes: list[Process] = field(default_factory=list)

    def spawn(self, argv: list[str], log_path: Path, env: dict | None = None) -> Process:
        process = Process(self, list(argv), log_path, env)
        self.processes.append(process)
        return process.start()


class Network:
    """Hosts on one bridge: ``10.A.B.0/24`` from this process's id (the bridge is ``.1``, hosts from ``.2``)."""

    def __init__(self):
        require_hosts()
        sweep_stale()
        pid = os.getpid()
        self.tag = str(pid)
        self.bridge = f"ocb{pid}"[:15]
        self.subnet = f"10.{200 + pid % 50}.{(pid // 50) % 250}"
        self.hosts: dict[str, Host] = {}
        self._started = False

    @property
    def bridge_address(self) -> str:
        """The controller's address on the bridge."""
        return f"{self.subnet}.1"

    def start(self) -> "Network":
        _ip("link", "add", "name", self.bridge, "type", "bridge")
        self._started = True
        _ip("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        return self

    def add_host(self, name: str) -> Host:
        index = len(self.hosts) + 2
        namespace = f"{PREFIX}{self.tag}-{name}"
        link = f"ocv{self.tag[-6:]}h{index}"[:15]
        inside = f"ocx{self.tag[-6:]}h{index}"[:15]
        _ip("netns", "add", namespace)
        host = Host(name, namespace, f"{self.subnet}.{index}", link)
        self.hosts[name] = host
        _ip("link", "add", link, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", namespace)
        _ip("-n", namespace, "link", "set", inside, "name", "eth0")
        _ip("-n", namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", namespace, "link", "set", "eth0", "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        _ip("link", "set", link, "master", self.bridge)
        _ip("link", "set", link, "up")
        return host

    def cut(self, name: str) -> None:
        """Cut the host off from every other host and from the controller (its link down)."""
        _ip("link", "set", self.hosts[name].link, "down")

    def heal(self, name: str) -> None:
        _ip("link", "set", self.hosts[name].link, "up")

    def close(self) -> None:
        for host in self.hosts.values():
            for process in host.processes:
                process.signal(signal.SIGCONT)
                process.signal(signal.SIGKILL)
            for process in host.processes:
                process.wait(10)
            _kill_namespace(host.namespace)
        self.hosts.clear()
        if self._started:
            _ip("link", "del", self.bridge, check=False)
            self._started = False

    def __enter__(self) -> "Network":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
