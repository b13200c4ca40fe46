"""`make run` / `ocms run`: estimates appear, and every way of stopping it leaves no process behind.

Ctrl-C (the terminal's SIGINT to the foreground group), SIGHUP (terminal closed), SIGTERM (kill,
systemd) and SIGKILL of `ocms run` itself: afterwards no process of its tree is alive (the broker,
the worker and the collector the fleet uploads through) and the worker's and the collector's ports
are closed. A `--duration` run counts every report sent through the collector exactly (and the
`--direct-kafka` path too). The process tree is read from /proc (no psutil).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.waiting import poll_until

pytestmark = pytest.mark.integration  # runs `ocms run` (broker, worker, collector, fleet)

ROOT = Path(__file__).resolve().parents[2]


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def port_closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


COLLECTOR = re.compile(r"^collector pid (\d+) on http://127\.0\.0\.1:(\d+) ", re.M)


def collector_of(text: str) -> tuple[int, int]:
    """(pid, port) of the collector `ocms run` started, from its banner."""
    match = COLLECTOR.search(text)
    assert match, text
    assert re.search(r"^collector    http://127\.0\.0\.1:%s/v1/metrics/flight_dest/reports" % match.group(2), text, re.M)
    return int(match.group(1)), int(match.group(2))


def kill_all(pids) -> None:
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_make_run_shows_estimates_and_ctrl_c_leaves_nothing(tmp_path):
    log = tmp_path / "run.log"
    process = subprocess.Popen(
        ["make", "-s", "run", "RUN_ARGS=--rate 3000 --every 1 --show 3"], cwd=ROOT, stdout=open(log, "wb"),
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    seen: set[int] = set()
    try:
        def estimates_shown():
            seen.update(descendants(process.pid))
            text = log.read_text(errors="replace")
            assert process.poll() is None, text
            counted = [int(n.replace(",", "")) for n in re.findall(r"counted by the worker ([\d,]+)", text)]
            return (counted and counted[-1] > 0 and re.search(r"^\s+\w+\s+[\d,]+\s+[-\d,]+\s+\[", text, re.M)
                    and re.search(r"\d+ of \d+ values inside their 95% CI", text) and text)

        text = poll_until(estimates_shown, 120, "estimates and the coverage line shown")
        assert "curl -s 'http://127.0.0.1:" in text and "/metrics" in text
        assert "\x1b[" not in text  # the log is not a terminal: no cursor escape codes
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)/metrics", text).group(1))
        # what ocms run prints before the console's address (make may install first, if pyproject.toml changed):
        # one line each for the broker, the worker starting and the collector, then the addresses, the console's
        # first (README: "the console's address first")
        before = text[text.index("embedded broker"):text.index("console      http://")].strip().splitlines()
        assert [line.split(" ", 1)[0] for line in before] == ["embedded", "worker", "collector"], before
        assert text.index("console      http://") < text.index("collector    http://")
        # the discovery demo (ocms/run_discovery.py): typed_words' console view and /discovered are printed
        assert re.search(r"^discovery    metric typed_words: .* http://127\.0\.0\.1:\d+/\?metric=typed_words ", text, re.M)
        collector_pid, collector_port = collector_of(text)
        seen |= descendants(process.pid)
        assert len(seen) >= 4 and collector_pid in seen  # make -> ocms run -> worker, collector (+ the broker)
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        process.wait(60)
        poll_until(lambda: not [pid for pid in seen if alive(pid)], 30, f"no process left of {sorted(seen)}")
        assert port_closed(port), "the worker port is still open"
        assert port_closed(collector_port), "the collector port is still open"
        text = log.read_text()
        assert "stopped." in text and "Traceback" not in text and "BlockingIOError" not in text
        assert "stopping fleet, collector, worker, broker" in text
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        kill_all(seen)


def start_ocms_run(log: Path) -> tuple[subprocess.Popen, set[int], int, Path, tuple[int, int]]:
    """`ocms run` in its own session (as a terminal's foreground job), once the worker answers."""
    process = subprocess.Popen(
        [sys.executable, "-m", "ocms", "run", "--rate", "500", "--every", "1", "--show", "2"], cwd=ROOT,
        stdout=open(log, "wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )

    def ready():
        text = log.read_text(errors="replace")
        assert process.poll() is None, text
        return "Ctrl-C stops everything." in text and text

    try:
        text = poll_until(ready, 120, "ocms run ready")
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        kill_all(descendants(process.pid))
        raise
    tree = descendants(process.pid)
    port = int(re.search(r"http://127\.0\.0\.1:(\d+)/metrics", text).group(1))
    worker_log = Path(re.search(r"worker pid \d+ starting \(log (\S+)\)", text).group(1))
    assert "\x1b[" not in worker_log.read_text(errors="replace") and "\x1b[" not in text  # not a terminal: no cursor codes
    collector = collector_of(text)
    assert collector[0] in tree, (collector, tree)
    poll_until(lambda: collector_accepted(collector[1]) > 0, 60, "the fleet's reports accepted by the collector")
    return process, tree, port, worker_log.parent, collector


def collector_accepted(port: int) -> float:
    """ocms_collector_reports_accepted_total{metric="flight_dest"} from the collector's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    match = re.search(r'^ocms_collector_reports_accepted_total\{metric="flight_dest"\} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


@pytest.mark.parametrize("how", ["SIGHUP to the terminal's process group", "SIGTERM to ocms run",
                                 "SIGINT twice (an impatient Ctrl-C)"])
def test_sighup_and_sigterm_stop_the_whole_tree(tmp_path, how):
    log = tmp_path / "run.log"
    process, tree, port, logs, (_, collector_port) = start_ocms_run(log)
    try:
        assert len(tree) >= 3, tree  # the worker, the collector and the embedded broker
        if how.startswith("SIGHUP"):
            os.killpg(process.pid, signal.SIGHUP)
        elif how.startswith("SIGTERM"):
            os.kill(process.pid, signal.SIGTERM)
        else:
            os.killpg(process.pid, signal.SIGINT)
            os.killpg(process.pid, signal.SIGINT)
        assert process.wait(60) == 0
        poll_until(lambda: not [pid for pid in tree if alive(pid)], 30, f"no process left of {sorted(tree)}")
        assert port_closed(port) and port_closed(collector_port)
        text = log.read_text()
        assert "stopped." in text and "Traceback" not in text, text
        assert "stopping fleet, collector, worker, broker" in text
        assert not logs.exists()  # a clean stop removes its logs
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        kill_all(tree)


def test_sigkill_of_ocms_run_leaves_no_children(tmp_path):
    log = tmp_path / "run.log"
    process, tree, port, logs, (_, collector_port) = start_ocms_run(log)
    try:
        assert len(tree) >= 3, tree
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        poll_until(lambda: not [pid for pid in tree if alive(pid)], 30, f"children of a killed parent gone: {sorted(tree)}")
        assert port_closed(port) and port_closed(collector_port)
    finally:
        kill_all(tree)
        shutil.rmtree(logs, ignore_errors=True)  # a killed ocms run could not remove them


@pytest.mark.parametrize("path", ["collector", "direct-kafka"])
def test_duration_run_counts_every_report_exactly(tmp_path, path):
    """`ocms run --duration`: the final table says every report sent was counted, no more, no fewer."""
    flags = ["--direct-kafka"] if path == "direct-kafka" else []
    done = subprocess.run(
        [sys.executable, "-m", "ocms", "run", "--duration", "4", "--rate", "2000", "--every", "60", "--show", "2",
         "--seed", "7", *flags], cwd=ROOT, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    text = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in text, text
    final = text.split("final, every report counted:", 1)
    assert len(final) == 2, text
    sent, counted = (int(n.replace(",", "")) for n in
                     re.search(r"reports sent ([\d,]+); counted by the worker ([\d,]+)", final[1]).groups())
    assert sent == counted and sent >= 2000, text  # frames of 100 at 2,000/s for 4 s: whole chunks only
    fleet = re.search(r"fleet sent ([\d,]+) reports in ([\d,]+) messages .* (through the collector|straight to Kafka)",
                      final[1])
    assert fleet and int(fleet.group(1).replace(",", "")) == sent, text
    # The default run's companion metrics (carrier, flight_tailnum, flight_air_time) are in the fleet line too,
    # each with what its own line says it sent, and the total is the sum of all four fleets.
    together = re.search(r"with the companion metrics \((.*?)\): ([\d,]+) reports in all", final[1])
    assert together, text
    companions = {name: int(n.replace(",", "")) for name, n in re.findall(r"(\w+) ([\d,]+)", together.group(1))}
    assert set(companions) == {"carrier", "flight_tailnum", "flight_air_time"}, text
    for name, n in companions.items():
        assert int(re.search(rf"{name}\s+eps=\S+\s+sent ([\d,]+)", final[1]).group(1).replace(",", "")) == n, text
    assert int(together.group(2).replace(",", "")) == sent + sum(companions.values()), text
    if path == "collector":
        assert fleet.group(3) == "through the collector" and COLLECTOR.search(text), text
        assert "uploaded through the collector" in text
    else:
        assert fleet.group(3) == "straight to Kafka" and not COLLECTOR.search(text), text


def _killed_parent_leaves_no_child(tmp_path, child_code: str) -> None:
    """A parent starts a child as ``child_code`` says and is SIGKILLed; the child must end by itself."""
    pid_file = tmp_path / "child.pid"
    parent_code = textwrap.dedent(f"""
        import os, subprocess, sys, time
        from pathlib import Path
        from infra.process import spawn, watch_parent
        {child_code}
        Path({str(pid_file)!r}).write_text(str(child.pid))
        time.sleep(120)
    """)
    parent = subprocess.Popen([sys.executable, "-c", parent_code], cwd=ROOT, start_new_session=True)
    child_pid = None
    try:
        child_pid = int(poll_until(lambda: pid_file.exists() and pid_file.read_text(), 30, "child started"))
        assert alive(child_pid)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        poll_until(lambda: not alive(child_pid), 15, "the orphaned child ended")
    finally:
        if parent.poll() is None:
            parent.kill()
        if child_pid is not None:
            kill_all([child_pid])


def test_parent_death_signal_ends_any_program(tmp_path):
    # prctl(PR_SET_PDEATHSIG) alone: the child is `sleep`, which knows nothing of its parent
    _killed_parent_leaves_no_child(tmp_path, "child = spawn(['sleep', '120'])")


def test_parent_watch_thread_ends_a_python_child(tmp_path):
    # the portable guard alone: a plain Popen (no parent-death signal) whose child watches its parent
    _killed_parent_leaves_no_child(tmp_path, (
        "child = subprocess.Popen([sys.executable, '-c', 'import time; from infra.process import watch_parent; "
        "watch_parent(%d, poll_s=0.1); time.sleep(120)' % os.getpid()])"))


def test_closing_the_terminal_stops_the_whole_tree():
    """A real terminal going away: ocms run on a pty as its controlling terminal, then the pty closes.

    The kernel sends SIGHUP to the foreground process group and every later write to the terminal
    fails (EIO); the cleanup must still stop the worker and the broker.
    """
    import fcntl
    import pty
    import select
    import termios

    master, slave = pty.openpty()

    def controlling_terminal():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    process = subprocess.Popen(
        [sys.executable, "-m", "ocms", "run", "--rate", "500", "--every", "1", "--show", "2"], cwd=ROOT,
        stdin=slave, stdout=slave, stderr=slave, start_new_session=True, preexec_fn=controlling_terminal,
    )
    os.close(slave)
    tree: set[int] = set()
    output = b""
    try:
        deadline = time.monotonic() + 120
        while b"Ctrl-C stops everything." not in output:
            assert time.monotonic() < deadline and process.poll() is None, output.decode(errors="replace")
            if select.select([master], [], [], 0.2)[0]:
                try:
                    output += os.read(master, 65536)
                except OSError:
                    break
        tree = descendants(process.pid)
        assert len(tree) >= 2, tree
        text = output.decode(errors="replace")
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)/metrics", text).group(1))
        logs = Path(re.search(r"worker pid \d+ starting \(log (\S+)\)", text).group(1)).parent
        os.close(master)  # the terminal window closes
        master = None
        assert process.wait(60) == 0
        poll_until(lambda: not [pid for pid in tree if alive(pid)], 30, f"no process left of {sorted(tree)}")
        assert port_closed(port) and not logs.exists()
    finally:
        if master is not None:
            os.close(master)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        kill_all(tree)


def test_collector_port_errors_name_the_flag():
    """A taken --collector-port, or one no collector would use, is one clear line before anything starts."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = subprocess.run([sys.executable, "-m", "ocms", "run", "--collector-port", str(port)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert busy.returncode != 0 and "Traceback" not in busy.stderr, busy.stderr
    assert f"--collector-port {port}: cannot listen on 127.0.0.1:{port}" in busy.stderr
    direct = subprocess.run([sys.executable, "-m", "ocms", "run", "--direct-kafka", "--collector-port", "9999"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert direct.returncode == 2 and "no collector runs with --direct-kafka" in direct.stderr, direct.stderr
    assert "embedded broker" not in direct.stdout  # refused before anything started


def test_collector_killed_mid_run_ends_the_run_with_its_reason(tmp_path):
    """The fleet does not retry for a minute against a dead collector: the next table notices it, names it,
    and everything else stops (logs kept: they explain the failure)."""
    log = tmp_path / "run.log"
    process, tree, port, logs, (collector_pid, collector_port) = start_ocms_run(log)
    try:
        os.kill(collector_pid, signal.SIGKILL)
        assert process.wait(60) != 0
        poll_until(lambda: not [pid for pid in tree if alive(pid)], 30, f"no process left of {sorted(tree)}")
        assert port_closed(port)
        text = log.read_text()
        assert f"the collector (pid {collector_pid}) exited with status -9 while the fleet was sending" in text, text
        assert "Traceback" not in text and "ocms run: error: the collector" in text, text
        assert (logs / "collector.log").exists()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        kill_all(tree)
        shutil.rmtree(logs, ignore_errors=True)


def test_a_companion_whose_worker_does_not_answer_leaves_its_line_out(monkeypatch):
    """companion_lines: an OSError from the worker (numeric /histogram or a category's /estimates) drops that
    companion's line; the others are printed and nothing raises."""
    import asyncio
    from types import SimpleNamespace

    import numpy as np

    from ocms import run as run_module

    asked = []

    def refusing(url):
        asked.append(url)
        raise ConnectionRefusedError(url)

    monkeypatch.setattr(run_module, "_get", refusing)
    dataset = SimpleNamespace(label=lambda i: f"v{i}")
    numeric = SimpleNamespace(name="latency", numeric=object())
    category = SimpleNamespace(name="dest", numeric=None, dataset=dataset)
    result = SimpleNamespace(counts=np.array([3, 1]), reports=4)
    extra = [(numeric, result, None, None), (category, result, None, None)]
    assert asyncio.run(run_module.companion_lines("http://127.0.0.1:9", extra)) == ""
    assert asked == ["http://127.0.0.1:9/metrics/latency/histogram", "http://127.0.0.1:9/metrics/dest/estimates/v0"]
