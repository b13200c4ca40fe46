"""The JS client's CLI with a numeric metric (issue 40): decimal numbers in JSON strings, as ocms-report-c reads
them, reported as their bucket indices; a string that is not a number is refused before anything is written.
(The bucket vectors are node's own test, producer/js/test/numeric.test.mjs, run by test_js_client.)"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from infra.capture import read_report_batch
from producer.jsclient import CLI, node
from registry.loader import parse_registry
from tests.vectors.make_numeric_vectors import REGISTRY

pytestmark = pytest.mark.integration  # runs node in a child process

VECTORS_CONFIG = json.loads((Path(__file__).resolve().parents[1] / "vectors"
                             / "numeric_v1.json").read_text(encoding="utf-8"))["device_config"]


def test_the_cli_reports_numbers_as_bucket_indices(js_client, tmp_path):
    """2,000 reports of "21.5" (bucket 5 of temperature_c: direct RR over 7 buckets at eps 2, keep p = 0.552)."""
    config, out = tmp_path / "config.json", tmp_path / "reports.ocap"
    config.write_text(json.dumps(VECTORS_CONFIG), encoding="utf-8")
    node(CLI, "--config", config, "--metric", "temperature_c", "--out", out, input=b'"21.5"\n' * 2000)
    version = parse_registry(REGISTRY).metric("temperature_c").latest
    counts = np.bincount(np.asarray(read_report_batch(out, version.params).z, dtype=np.int64), minlength=7)
    keep = math.exp(2) / (math.exp(2) + 6)
    assert abs(counts[5] - 2000 * keep) < 4.5 * math.sqrt(2000 * keep * (1 - keep)), counts
    assert max(np.delete(counts, 5)) < 2000 * keep / 2, counts  # negative control
    done = node(CLI, "--config", config, "--metric", "temperature_c", "--out", tmp_path / "x.ocap",
                input=b'"21.5"\n"warm"\n', check=False)
    assert done.returncode == 2 and b'line 2: "warm" is not a number' in done.stderr
    assert not (tmp_path / "x.ocap").exists()


def test_the_cli_reports_a_tree_metric_that_ocms_estimate_reads_back(js_client, tmp_path, capsys):
    """A tree (size_tree of tests/vectors/numeric_hierarchy_v1.json: 40 buckets, three levels): 6,000 numbers through
    the JS CLI (its CSPRNG: no seed), each report framed with its level's fingerprint; ``ocms estimate`` decodes every
    level, the raw CDF at every edge and the mean within 4.5 sd of the truth (the tree's exact noise); the negative
    control, a fleet twice as large, more than 6 sd away."""
    from tests.support.trees import check_capture_of_size_tree

    doc = json.loads((Path(__file__).resolve().parents[1] / "vectors" / "numeric_hierarchy_v1.json").read_text("utf-8"))
    config, out = tmp_path / "config.json", tmp_path / "reports.ocap"
    config.write_text(json.dumps(doc["device_config"]), encoding="utf-8")
    values = np.random.default_rng(5).lognormal(math.log(8), 0.8, 6000)
    node(CLI, "--config", config, "--metric", "size_tree", "--out", out,
         input="".join(f'"{float(v)!r}"\n' for v in values).encode())
    check_capture_of_size_tree(capsys, tmp_path, out, values)
