"""docs/first-reports-from-a-browser.md as a newcomer follows it (issue 36): its registry, its page in a real
Chromium served over HTTP from its own origin, `ocms run` with the flags it gives, and the check it tells you to
make. Each click of the page's button is one report of button_clicked, counted by the worker exactly."""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.request

import pytest

from infra.broker import free_port
from producer.jsclient import BUNDLE
from tests.agents.harness import ROOT
from tests.agents.test_console import chrome  # noqa: F401  (the Chromium fixture)
from tests.support.waiting import poll_until

pytestmark = pytest.mark.integration

DOC = ROOT / "docs" / "first-reports-from-a-browser.md"
CLICKS = 3


def doc_parts() -> tuple[str, str, str]:
    """(the registry the doc writes, its page, its `ocms run` command line)."""
    text = DOC.read_text(encoding="utf-8")
    registry = re.search(r"<<'YAML'\n(.*?)\nYAML\n", text, re.S).group(1) + "\n"
    page = text.split("<!-- first-reports-page:", 1)[1].split("```html\n", 1)[1].split("```", 1)[0]
    command = re.search(r"^ocms run .*$", text, re.M).group(0)
    return registry, page, command


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def get_json(url: str):
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except OSError:
        return None, None


def test_the_first_reports_page_reports_through_ocms_run(chrome, js_client, tmp_path):  # noqa: F811
    registry, page, command = doc_parts()
    collector_port, web_port = free_port(), free_port()
    (tmp_path / "metrics.yaml").write_text(registry, encoding="utf-8")
    (tmp_path / "ocms-client.min.js").write_bytes(BUNDLE.read_bytes())
    (tmp_path / "index.html").write_text(page.replace("127.0.0.1:8080", f"127.0.0.1:{collector_port}"),
                                         encoding="utf-8")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{server.server_address[1]}"
    argv = command.split()[2:]  # the doc's flags, on this test's free ports
    argv = [a.replace("8080", str(collector_port)).replace("6066", str(web_port))
            .replace("http://127.0.0.1:8000", origin) for a in argv]
    run = subprocess.Popen([sys.executable, "-m", "ocms", "run", *argv, "--rate", "200", "--duration", "600"],
                           cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{web_port}"
        poll_until(lambda: run.poll() is not None or get_json(base + "/healthz")[0] == 200, 180,
                   "ocms run's worker to be healthy")
        assert run.poll() is None, run.stderr.read().decode()[-3000:]
        poll_until(lambda: get_json(f"http://127.0.0.1:{collector_port}/healthz")[0] == 200, 120, "its collector")
        chrome.get(origin + "/")
        # The page's module installs the button's handler after OcmsClient.create (a fetch of the device config
        # from the collector): a click before that does nothing (it failed a busy make test: never reported).
        poll_until(lambda: chrome.execute_script("return typeof document.getElementById('buy').onclick;") == "function",
                   120, "the page's client to be ready (the button's handler installed)")
        for _ in range(CLICKS):
            chrome.execute_script("delete document.body.dataset.reported; document.getElementById('buy').click();")
            poll_until(lambda: chrome.execute_script("return document.body.dataset.reported;") == "yes", 120,
                       "the page's report to be answered 202")

        def counted():
            status, doc = get_json(base + "/metrics/button_clicked")
            return doc["versions"][0]["reports"] if status == 200 else None

        assert poll_until(counted, 120, f"the worker to count the page's {CLICKS} reports",
                          until=lambda n: n is not None and n >= CLICKS) == CLICKS
    finally:
        server.shutdown()
        server.server_close()
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGTERM)
        run.wait(60)
