"""``--view share`` (issue 27, agents.shards): each worker's view holds its share of the metrics,
and any worker answers any metric with the single worker's integers, or 503 while a share moves.

Two workers on the embedded broker serve a registry of eight metrics spread over the four
shards. Each answer is checked against the offline decode of exactly its metric's messages;
the worker that does not hold a metric forwards the query to the one that does. Then the
holder of a share is SIGKILLed while queries for that share run against the survivor: every
answer is either the exact one or a 503 with Retry-After, never another number. Half the
metrics' frames say a shuffling collector produced them (``ocms-shuffle-n``): their answers,
forwarded or not, carry the central epsilon of that batch; the others' carry null.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from agents.catalog import Catalog
from agents.view import CountsView
from cms_core import claims
from cms_core.planning import shuffle_delta
from cms_core.shuffle import central_epsilon
from fleet.offline import sketch_from_messages
from infra.broker import EmbeddedBroker
from registry import load_registry

from .harness import Scrape, WorkerProcess, report_messages, send
from tests.support.waiting import poll_until

pytestmark = pytest.mark.integration

PARTITIONS = 4


NAMES = [f"screen_{i}" for i in range(8)]
CATEGORIES = ["home", "search", "feed", "settings"]
REPORTS = 2000
SHUFFLED = set(NAMES[::2])  # their frames come in one shuffled batch of all REPORTS reports


def registry_text() -> str:
    out = ["metrics:"]
    for i, name in enumerate(NAMES):
        out += [f"  - name: {name}", f"    description: test metric {i}", "    owner: test@example.com",
                f"    categories: [{', '.join(CATEGORIES)}]", "    mechanism: direct", f"    epsilon: {1 + i % 3}"]
    return "\n".join(out) + "\n"


def get(worker: WorkerProcess, name: str) -> tuple[int, dict]:
    try:
        return worker.get(f"/metrics/{name}/estimates")
    except OSError:  # a killed worker's port
        return -1, {}


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    path = folder / "registry.yaml"
    path.write_text(registry_text(), encoding="utf-8")
    registry = load_registry(path)
    layout = Catalog(registry, CountsView()).state_layout(PARTITIONS)
    shards = {name: layout.shard_of_metric(name) for name in NAMES}
    assert set(shards.values()) == set(range(PARTITIONS))  # precondition: every shard serves a metric
    key = b"shard-test-claim-key-" * 2
    (folder / "claim.key").write_bytes(key)
    with EmbeddedBroker() as broker:
        workers = [WorkerProcess(broker.bootstrap_servers, "it-shards", "it-shards", folder, "--registry", str(path),
                                 "--view", "share", "--shuffle-claim-key-file", str(folder / "claim.key"))
                   for _ in range(2)]
        try:
            for w in workers:
                w.start()
            for w in workers:
                w.wait_healthy()
            now_ms = int(time.time() * 1000)
            sent, messages = {}, []
            for seed, name in enumerate(NAMES):
                params = registry.metric(name).version(1).params
                values = np.random.default_rng(seed).choice(len(CATEGORIES), REPORTS, p=[0.4, 0.3, 0.2, 0.1])
                sent[name] = report_messages(params, values, 250, seed=50 + seed,
                                             timestamps_ms=[now_ms - 10_000] * (REPORTS // 250))
                if name in SHUFFLED:  # one batch of REPORTS, its claim signed (cms_core.claims)
                    batch_id = claims.new_batch_id()
                    for m in sent[name]:
                        m.headers = claims.claim_headers(key, REPORTS, batch_id, m.value)
                messages += sent[name]
            send(broker.bootstrap_servers, workers[0].topic, messages)
            expected, central = {}, {}
            for name in NAMES:
                v = registry.metric(name).version(1)
                sketch, rejected = sketch_from_messages(v.params, v.tracked_values(), [m.value for m in sent[name]])
                assert not rejected
                expected[name] = sketch.counts.tolist()
                central[name] = (central_epsilon(REPORTS, v.params.epsilon, shuffle_delta(REPORTS))
                                 if name in SHUFFLED else None)
            yield broker, workers, expected, shards, central
        finally:
            for w in workers:
                w.stop()


def answers_exactly(doc: dict, counts: list[int]) -> bool:
    return doc.get("n") == REPORTS and [r["match_count"] for r in doc["estimates"]] == counts


def test_every_worker_answers_every_metric_exactly_from_the_share_that_holds_it(fed):
    _, workers, expected, shards, central = fed

    def all_exact():
        return all(get(w, name)[0] == 200 and answers_exactly(get(w, name)[1], counts)
                   for w in workers for name, counts in expected.items())

    poll_until(all_exact, 120, "every worker answering every metric exactly")
    for w in workers:  # one of the two answers of each metric is forwarded: it says the same
        for name in NAMES:
            doc = get(w, name)[1]
            assert (doc["central_epsilon"], doc["shuffled_reports"]) == (
                central[name], REPORTS if name in SHUFFLED else 0), (w.base_url, name)
    health = [w.get("/healthz")[1] for w in workers]
    held = [set(h["held_shards"]) for h in health]
    assert all(h["view"] == "share" for h in health)
    assert held[0] and held[1] and not held[0] & held[1] and held[0] | held[1] == set(range(PARTITIONS))
    assert [set(h["assigned_partitions"]) for h in health] == held  # the share follows the assignment
    for w, mine in zip(workers, held):
        scrape = Scrape.parse(w.text("/metrics"))
        exported = {dict(k)["metric"] for k in scrape.series("ocms_params_reports")}
        assert exported == {name for name in NAMES if shards[name] in mine}  # the series of its share only
    for w in workers:  # the listing (the console's) gives every metric's count through either worker
        listing = w.get("/metrics", format="json")[1]
        assert {m["name"]: m["versions"][0]["reports"] for m in listing["metrics"]} == {n: REPORTS for n in NAMES}
        assert {m["name"]: m["versions"][0]["windows"]["total"]["central_epsilon"] for m in listing["metrics"]} == central
        assert w.get(f"/metrics/{NAMES[0]}")[1]["versions"][0]["reports"] == REPORTS
    # The view of each holds its share only: fewer member states than all metrics' (2 keys each, 4 partitions at most).
    assert all(0 < h["view_keys"] < sum(1 for _ in NAMES) * 2 * PARTITIONS for h in health)


def test_killing_the_holder_of_a_share_gives_exact_answers_or_503_never_wrong(fed):
    _, workers, expected, shards, _ = fed
    # Exact, not just 200: run alone (-k, or -n splitting the module) nothing before waited for the counts
    poll_until(lambda: all(answers_exactly(get(w, n)[1], expected[n]) for w in workers for n in NAMES), 120,
               "both workers answering every metric exactly")
    survivor, victim = workers
    victim_shards = set(victim.get("/healthz")[1]["held_shards"])
    watched = [name for name in NAMES if shards[name] in victim_shards]
    assert watched
    seen, wrong, stop = [], [], threading.Event()

    def query():
        while not stop.is_set():
            for name in watched:
                status, doc = get(survivor, name)
                seen.append(status)
                if status == 200 and not answers_exactly(doc, expected[name]):
                    wrong.append((name, doc.get("n")))
                elif status not in (200, 503):
                    wrong.append((name, status, doc))
            time.sleep(0.01)

    thread = threading.Thread(target=query)
    thread.start()
    try:
        poll_until(lambda: seen.count(200) >= 5, 30, "answers before the kill")
        victim.kill()
        poll_until(lambda: set(survivor.get("/healthz")[1]["ready_shards"]) == set(range(PARTITIONS)), 90,
                   "the survivor rebuilding the dead worker's share")
        answered_after = len(seen)
        poll_until(lambda: seen[answered_after:].count(200) >= 2 * len(watched), 30, "answers after the rebuild")
    finally:
        stop.set()
        thread.join()
    assert wrong == []
    assert 503 in seen  # the share moved while queries ran: some of them were told to retry
    for name, counts in expected.items():
        status, doc = get(survivor, name)
        assert status == 200 and answers_exactly(doc, counts)
    victim.start()  # leave the module's pair as it was
