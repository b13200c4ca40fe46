"""`make run` smoke test: estimates appear, Ctrl-C stops everything, nothing is left behind."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

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


def test_make_run_shows_estimates_and_ctrl_c_leaves_nothing(tmp_path):
    log = tmp_path / "run.log"
    process = subprocess.Popen(
        ["make", "-s", "run", "RUN_ARGS=--rate 3000 --every 1 --show 3"], cwd=ROOT, stdout=open(log, "wb"),
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        text = ""
        while time.monotonic() < deadline:
            seen |= descendants(process.pid)
            text = log.read_text(errors="replace")
            counted = [int(n.replace(",", "")) for n in re.findall(r"counted by the worker ([\d,]+)", text)]
            if counted and counted[-1] > 0 and re.search(r"^\s+\w+\s+[\d,]+\s+[-\d,]+\s+\[", text, re.M):
                break
            assert process.poll() is None, text
            time.sleep(0.5)
        else:
            raise AssertionError(f"no estimates within 120 s:\n{text}")
        assert "curl -s 'http://127.0.0.1:" in text and "/metrics" in text
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)/metrics", text).group(1))
        seen |= descendants(process.pid)
        assert len(seen) >= 3  # make -> ocms run -> worker (+ the broker)
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        process.wait(60)
        time.sleep(0.5)
        left = [pid for pid in seen if alive(pid)]
        assert not left, f"processes left behind: {left}"
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, "the worker port is still open"
        assert "stopped." in log.read_text()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        for pid in seen:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
