"""``ocms migrate`` (issue 39): a worker group's counts copied into a new table while the old group keeps serving,
killed halfway and resumed, and the new group's answers exactly the old group's.

One worker of group ``mig-old`` counts 20,000 reports (4 partitions, 1-minute buckets over ten minutes). The
migration runs slowly (``--rate``, ``--batch-records``) and is SIGKILLed once it printed half of its records;
the old worker keeps answering, and counts 5,000 more reports; the resumed run goes on after the last record
the killed one copied, while the old worker counts 2,000 more, and a third run copies what it wrote since the
second began. Then the new changelog holds, key for key, the old one's latest states (their members
decoded); a worker of group ``mig-new`` on the same source topic recovers it and answers what the old one
answers, every window (the reports of the migrated states skipped by their offsets, the later ones counted).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from agents.migrate import MIGRATED_FROM, changelog_topic
from agents.state import PartialCounts, decode_bundle
from infra.process import spawn
from ocms.process import ROOT
from tests.agents.harness import WorkerProcess, report_messages, send
from tests.agents.test_worker_integration import BUCKET, PARAMS, WATCH, zipf_values
from tests.brokers import module_broker
from tests.support.topics import consume

TOPIC = "mig-reports"
broker = module_broker({TOPIC: 4})
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def worker(broker, app_id: str, log_dir) -> WorkerProcess:
    return WorkerProcess(broker, app_id, TOPIC, log_dir, "--epsilon", "2", "--dictionary-size", "1000", "--watch", WATCH,
                         "--bucket-seconds", str(BUCKET))


def migrate_command(broker, *extra: str) -> list[str]:
    return [sys.executable, "-m", "ocms", "migrate", "--bootstrap-servers", broker.bootstrap_servers, "--broker",
            "embedded", "--from-app-id", "mig-old", "--to-app-id", "mig-new", *extra]


def latest_states(broker, app_id: str) -> dict:
    """(partition, key) -> {fingerprint: member state as JSON} of a changelog's latest record of each key."""
    latest = {}
    for record in consume(broker, changelog_topic(app_id)):
        latest[(record.partition, record.key)] = record.value
    return {where: None if value is None else {fp: PartialCounts.from_bytes(raw).to_json()
                                               for fp, raw in decode_bundle(value).items()}
            for where, value in latest.items()}


def answers(w: WorkerProcess, now_s: int) -> list:
    """(n, match counts) of the total and of every minute of the last twelve."""
    out = []
    for window in [{}] + [{"from": str(t), "to": str(t + BUCKET)} for t in range(now_s // BUCKET * BUCKET - 11 * BUCKET,
                                                                                  now_s + 1, BUCKET)]:
        status, doc = w.get("/estimates", **window)
        assert status == 200, (window, doc)
        out.append((window.get("from"), doc["n"], [r["match_count"] for r in doc["estimates"]]))
    return out


def test_a_migration_killed_halfway_and_resumed_gives_the_new_group_exactly_the_old_groups_counts(broker, tmp_path):
    old = worker(broker, "mig-old", tmp_path).start()
    new = None
    try:
        old.wait_healthy()
        now_ms = int(time.time() * 1000)
        send(broker, TOPIC, report_messages(PARAMS, zipf_values(20_000, 31), 100, seed=32,
                                            timestamps_ms=[now_ms - 600_000 + i * 3_000 for i in range(200)]))
        old.wait_for_n(20_000)

        # 1. a slow migration, SIGKILLed once it said it copied half of its records
        killed = spawn(migrate_command(broker, "--rate", "60", "--batch-records", "10"), cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        copied = total = 0
        try:
            for line in killed.stdout:
                found = re.match(r"migrated ([\d,]+) of ([\d,]+) records", line)
                if found:
                    copied, total = (int(g.replace(",", "")) for g in found.groups())
                    if copied * 2 >= total:
                        break
        finally:
            killed.send_signal(signal.SIGKILL)
            killed.wait(30)
            killed.stdout.close()
        assert total >= 40 and 0 < copied < total, (copied, total)

        # 2. the old group keeps serving, and counting
        assert old.get("/estimates")[1]["n"] == 20_000
        send(broker, TOPIC, report_messages(PARAMS, zipf_values(5_000, 33), 100, seed=34,
                                            timestamps_ms=[now_ms - 30_000] * 50))
        old.wait_for_n(25_000)

        # 3. resumed: goes on after the killed run's last record, to the old changelog's end when it started,
        # while the old group counts 2,000 more (what it writes past that end is left for the next run)
        writing = threading.Thread(target=send, args=(broker, TOPIC, report_messages(
            PARAMS, zipf_values(2_000, 35), 20, seed=36, timestamps_ms=[now_ms - 10_000] * 100), 40))
        writing.start()
        resumed = subprocess.run(migrate_command(broker, "--rate", "200", "--batch-records", "10"), cwd=ROOT,
                                 capture_output=True, text=True, timeout=300)
        writing.join()
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert "resumed after old offsets {" in resumed.stdout and "0 refused" in resumed.stdout, resumed.stdout
        old.wait_for_n(27_000)
        again = subprocess.run(migrate_command(broker), cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0 and "resumed after old offsets {" in again.stdout, again.stdout + again.stderr
        old_states, new_states = latest_states(broker, "mig-old"), latest_states(broker, "mig-new")
        assert new_states == old_states and len(new_states) >= 8
        assert all(dict(r.headers).get(MIGRATED_FROM) for r in consume(broker, changelog_topic("mig-new")))

        # 4. a worker of the new group answers exactly what the old one answers
        new = worker(broker, "mig-new", tmp_path).start()
        new.wait_healthy()
        new.wait_for_n(27_000)
        now_s = int(time.time())
        assert answers(new, now_s) == answers(old, now_s)
        assert new.get("/estimates")[1]["n"] == 27_000
    finally:
        for w in (new, old):
            if w is not None:
                w.stop()
