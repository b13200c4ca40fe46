"""The entry point of `ocms` (ocms/cli.py) and the worker command (agents/cli.py): worker, run, errors, exit statuses."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from infra.process import free_port
from ocms.cli import main

from tests.support.waiting import poll_until

from tests.agents.harness import ocms, one_line

pytestmark = pytest.mark.integration  # runs `ocms` and worker processes


def run_cli(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_console_script_entry_point():
    script = Path(sys.executable).parent / "ocms"  # installed by pyproject [project.scripts]
    out = subprocess.run([str(script), "plan", "-e", "1", "-d", "2^64", "--json"],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["params"]["field"] == "GF(2^64)"


# ---------------------------------------------------------------- one-line errors instead of tracebacks

def test_run_that_cannot_reach_kafka_says_so_in_one_line():
    code, out, err = ocms("run", "--bootstrap-servers", "127.0.0.1:9", "--duration", "1")
    assert code == 1 and "cannot reach Kafka at 127.0.0.1:9 (--bootstrap-servers)" in one_line(err), out


def _busy_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def test_web_port_in_use_is_one_line():
    with _busy_port() as s:
        port = s.getsockname()[1]
        code, _, err = ocms("run", "--web-port", str(port), "--duration", "1")
        assert code == 1 and f"--web-port {port}: cannot listen on 127.0.0.1:{port}" in one_line(err)
        code, _, err = ocms("worker", "-e", "2", "-d", "100", "--bootstrap-servers", "127.0.0.1:9",
                            env={"OCMS_WEB_PORT": str(port)})
        assert code == 1 and f"OCMS_WEB_PORT {port}: cannot listen" in one_line(err)


def test_settings_errors_name_what_the_user_wrote():
    code, _, err = ocms("worker", "-e", "2", "-d", "100", "--bootstrap-servers", "k:1", "--web-port", "0")
    assert code == 2 and "--web-port 0: must be in [1, 65535]" in one_line(err)
    code, _, err = ocms("worker", "-e", "2", "-d", "100", "--bootstrap-servers", "k:1", env={"OCMS_WEB_PORT": "0"})
    assert code == 2 and "OCMS_WEB_PORT 0: must be in [1, 65535]" in one_line(err)
    code, _, err = ocms("worker", "-e", "2", "-d", "100", "--bootstrap-servers", "k:1", env={"OCMS_TRACKED": "0"})
    assert code == 2 and "OCMS_TRACKED 0: must be >= 1" in one_line(err)
    code, _, err = ocms("worker", "-e", "2", "--strings", "--bootstrap-servers", "k:1", env={"OCMS_MODE": "l2"})
    assert code == 2 and "--tracked" in one_line(err) and "=None" not in err


def test_worker_help_and_behaviour_agree_on_epsilon():
    code, out, _ = ocms("worker", "--help")
    assert code == 0 and "[OCMS_EPSILON, required]" in " ".join(out.split())
    code, _, err = ocms("worker", "-d", "100", "--bootstrap-servers", "k:1")
    assert code == 2 and "--epsilon (or OCMS_EPSILON) is required" in one_line(err)
    code, _, err = ocms("worker", "-d", "100", "--bootstrap-servers", "k:1", "--web-port", "0",
                        env={"OCMS_EPSILON": "2", "OCMS_WEB_PORT": "70000"})
    assert code == 2 and "--web-port 0: must be in" in one_line(err)  # the variable gave ε; the flag wins over it


def test_worker_waits_for_kafka_with_backoff_one_line_per_attempt(tmp_path):
    log = tmp_path / "worker.log"
    base = {k: v for k, v in os.environ.items() if not k.startswith("OCMS_")}
    process = subprocess.Popen([sys.executable, "-m", "ocms", "worker", "-e", "2", "-d", "100",
                                "--web-port", str(free_port())],
                               stdout=open(log, "wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               env={**base, "OCMS_BOOTSTRAP_SERVERS": "127.0.0.1:9"})
    try:
        def attempts() -> int:
            assert process.poll() is None, log.read_text()
            return log.read_text().count("waiting for Kafka")

        poll_until(attempts, 60, "three 'waiting for Kafka' lines", until=lambda n: n >= 3)
        process.send_signal(signal.SIGINT)
        assert process.wait(15) == 130
        lines = log.read_text().splitlines()
        waits = [line for line in lines if "waiting for Kafka" in line]
        assert len(waits) >= 3 and "Traceback" not in "\n".join(lines)
        assert [re.search(r"attempt (\d+):", w).group(1) for w in waits[:3]] == ["1", "2", "3"]
        assert re.findall(r"next attempt in (\d+) s", "\n".join(waits[:3])) == ["1", "2", "4"]  # doubling
        assert "cannot reach Kafka at 127.0.0.1:9 (OCMS_BOOTSTRAP_SERVERS)" in waits[0]  # named as the user gave it
        # nothing but our lines, the worker's start line, and the interrupt
        assert len(lines) == len(waits) + 1 and lines[-1] == "ocms worker: interrupted", lines
    finally:
        if process.poll() is None:
            process.kill()
