"""Child processes that never outlive their parent, and the ports they listen on.

The embedded broker, ``ocms run``'s worker and collector, the tests' and the benchmarks' processes
each run in their own session, so a terminal's Ctrl-C, SIGHUP or SIGTERM reaches only the parent,
which stops its children in order and by process group (:func:`stop_process_group`). A parent that
cannot stop them (SIGKILL, a crash) must not leave them running with their ports: two independent
guards end them.

* On Linux :func:`spawn` asks the kernel for a parent-death signal (``prctl(PR_SET_PDEATHSIG)``)
  between fork and exec; it works for any program (the Tansu broker binary too). The kernel sends
  it when the *thread* that started the child exits, so it is only set when the child is started
  from the main thread.
* A child that is one of ours (``ocms worker --parent-pid PID``) also watches its parent from a
  thread (:func:`watch_parent`: portable, the parent pid changes when the parent dies) and stops
  itself with SIGTERM, then exits hard if the clean stop hangs.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Callable, Sequence

from cms_core.errors import OCMSError

# ------------------------------------------------------------------ start and stop
#: prctl option number (linux/prctl.h).
PR_SET_PDEATHSIG = 1


def _libc_prctl() -> Callable | None:
    """libc's prctl, resolved in the parent (loading a library between fork and exec is unsafe)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # no usable libc (musl static builds and the like)
        return None


_PRCTL = _libc_prctl()


def parent_death_preexec(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive ``sig`` when this process dies (Linux; None elsewhere)."""
    if _PRCTL is None or threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid()
    prctl = _PRCTL

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl ran: the signal will never come
            os.kill(os.getpid(), sig)

    return preexec


def spawn(command: Sequence[str], *, death_signal: int = signal.SIGTERM, **popen_kwargs) -> subprocess.Popen:
    """``subprocess.Popen`` in a new session that receives ``death_signal`` if this process dies."""
    preexec = parent_death_preexec(death_signal)
    return subprocess.Popen(list(command), start_new_session=True, preexec_fn=preexec, **popen_kwargs)


def stop_process_group(process: subprocess.Popen, timeout: float = 15.0) -> None:
    """SIGTERM the child's process group, then SIGKILL it if it has not exited within ``timeout``."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout)


# ------------------------------------------------------------------ the parent watch
#: How often a child checks that its parent is alive, and how long a clean stop may take after it died.
PARENT_POLL_S = 0.5
PARENT_GONE_GRACE_S = 15.0


def watch_parent(parent_pid: int, poll_s: float = PARENT_POLL_S, grace_s: float = PARENT_GONE_GRACE_S) -> threading.Thread:
    """Stop this process (SIGTERM, then a hard exit after ``grace_s``) once ``parent_pid`` is no longer its parent.

    Also when it already is not (the parent died before the child got here).
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        print(f"parent process {parent_pid} is gone: stopping", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(1)

    thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
    thread.start()
    return thread


# ------------------------------------------------------------------ children that answer /healthz
class ChildProcess:
    """A child started with :func:`spawn` (own session, dies with this process) that answers
    ``/healthz``: its pid, whether it runs, the wait for its health, and the stop by process group."""

    process: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def poll_health(self, url: str, timeout: float, *, ready: Callable[[dict], bool], exited: Callable[[], Exception],
                    late: Callable[[object], Exception]) -> dict:
        """GET ``url`` every 0.2 s until it answers 200 with a document ``ready`` accepts, and return that
        document; raise ``exited()`` once the child is gone, ``late(the last answer or error)`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            if not self.alive():
                raise exited()
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    last = json.loads(response.read())
                if ready(last):
                    return last
            except urllib.error.HTTPError as exc:  # 503 while the child is not ready yet
                last = f"HTTP {exc.code}"
            except OSError as exc:  # not listening yet
                last = exc
            time.sleep(0.2)
        raise late(last)

    def stop(self, timeout: float = 15.0) -> None:
        if self.process is not None:
            stop_process_group(self.process, timeout)


# ------------------------------------------------------------------ ports
#: Where :func:`free_port` looks first: below the ephemeral range, never a well-known port.
LISTEN_PORTS_FROM = 10_000
_handed_out: set[int] = set()


def ephemeral_ports() -> tuple[int, int]:
    """The kernel's range for outgoing connections' source ports (Linux's default where it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            low, high = (int(x) for x in fh.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, for a server started a moment later (tests, ``ocms run``, benchmarks).

    Drawn at random below the ephemeral range: a port the kernel hands out for port 0 is an ephemeral one, so
    an outgoing connection (a Kafka client's, a probe's) could take it as its source port before the server
    binds it, and the server then failed with "Address already in use" (seen in ``make test`` under load).
    Below that range only another listener can take it. Never the same port twice in one process."""
    import random

    low, _ = ephemeral_ports()
    draw = random.SystemRandom()
    if low - LISTEN_PORTS_FROM >= 1000:
        for _ in range(100):
            port = draw.randrange(LISTEN_PORTS_FROM, low)
            if port in _handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # no room below the range: the kernel's pick
        s.bind((host, 0))
        port = s.getsockname()[1]
    _handed_out.add(port)
    return port


def check_port_free(port: int, flag: str = "--web-port", host: str = "127.0.0.1") -> None:
    """One clear line instead of the worker's traceback when the port is taken."""
    with socket.socket() as probe:
        # as the web server binds: connections of a killed predecessor in TIME_WAIT do not count
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise PortInUseError(f"{flag} {port}: cannot listen on {host}:{port} ({exc.strerror}); "
                                 f"choose another port or leave {flag} out for a free one") from None


class PortInUseError(OCMSError, RuntimeError):
    """A port the command must listen on is taken."""
