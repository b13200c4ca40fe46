"""The C client's numeric metrics (issue 40): every case of tests/vectors/numeric_v1.json through the library's
ocms_numeric_bucket (producer/c/src/numeric.c) on the layouts the example's config reader loads, and ocms-report-c
reporting numbers as their bucket indices (the wire shape of every integer metric)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from infra.capture import read_report_batch
from registry.loader import parse_registry
from tests.vectors.make_numeric_vectors import REGISTRY

from .c_client import VECTORS, run_cli, vector_fixtures

pytestmark = pytest.mark.integration  # builds and runs the C driver and CLI

DOC = json.loads((VECTORS / "numeric_v1.json").read_text(encoding="utf-8"))


config, driver = vector_fixtures(DOC, "c-numeric")


def test_every_vector_maps_to_its_bucket(driver):
    wrong = [(c, got) for c in DOC["cases"]
             if (got := driver.ask(op="numeric_bucket", metric=c["metric"], value=c["value"]).get("bucket")) != c["bucket"]]
    assert not wrong and len(DOC["cases"]) >= 600, wrong[:5]


def test_nan_is_refused_and_a_frequency_metric_has_no_buckets(driver):
    assert "error" in driver.ask(op="numeric_bucket", metric="latency_ms", value="NaN")
    for line, valid in (('"12.5"', True), ('"-Infinity"', True), ('"1e3"', True), ('"nan"', False), ('"12 ms"', False),
                        ('""', False), ('" 12"', False)):
        answer = driver.ask(op="value", metric="latency_ms", line=line)
        assert answer.get("valid", False) is valid, (line, answer)
        if not valid:
            assert "is not a number (metric latency_ms" in answer["error"], answer


def test_a_layout_that_disagrees_with_the_dictionary_is_refused(driver):
    entry = json.loads(json.dumps(DOC["device_config"]["metrics"][0]))
    entry["numeric"]["bounds"] = entry["numeric"]["bounds"][1:]
    answer = driver.ask(op="load_text", text=json.dumps({"format": 1, "metrics": [entry]}))
    assert "buckets, but the dictionary holds 11 values" in answer["error"], answer
    entry["numeric"]["bounds"] = [5, 5] + entry["numeric"]["bounds"][1:]
    answer = driver.ask(op="load_text", text=json.dumps({"format": 1, "metrics": [entry]}))
    assert "increase strictly" in answer["error"], answer


def test_the_cli_reports_numbers_as_bucket_indices(config, tmp_path):
    """2,000 reports of 21.5 (bucket 5 of temperature_c: direct RR over 7 buckets at eps 2, keep p = 0.552):
    bucket 5 within 4.5 sd of 2,000 p; the negative control: no other bucket reaches half of it."""
    out = tmp_path / "reports.bin"
    done = run_cli(["--config", config, "--metric", "temperature_c", "--out", out], ['"21.5"'] * 2000)
    assert done.returncode == 0, done.stderr
    version = parse_registry(REGISTRY).metric("temperature_c").latest
    z = np.asarray(read_report_batch(out, version.params).z, dtype=np.int64)
    counts = np.bincount(z, minlength=7)
    keep = math.exp(2) / (math.exp(2) + 6)
    assert abs(counts[5] - 2000 * keep) < 4.5 * math.sqrt(2000 * keep * (1 - keep)), counts
    assert max(np.delete(counts, 5)) < 2000 * keep / 2, counts
