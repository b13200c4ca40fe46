"""The collector accepts a numeric version's Hybrid mean reports (issue 40) as a version of the metric: a frame of
the mean part's fingerprint (z alone, as direct RR's) on the metric's path, binary or JSON; mixed with the
histogram's reports in one upload, on another metric's path, or with a z outside the report values, refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cms_core import hybrid, wire
from cms_core.reports import ReportBatch, identity_coefficients
from collector.uploads import UploadParser, UploadRejected
from tests.agents.test_numeric_mean_answers import TEXT
from tests.registry.helpers import load


@pytest.fixture(scope="module")
def reg(tmp_path_factory):
    return load(tmp_path_factory.mktemp("reg"), TEXT)


def mean_frame(version, values, seed=1):
    z = hybrid.simulate(version.mean.hybrid, np.asarray(values, float), np.random.default_rng(seed))
    return wire.encode_frame(version.mean.carrier, ReportBatch(*identity_coefficients(z.size), z.astype(np.uint32)))


def test_the_mean_part_is_taken_as_the_metric(reg):
    parser = UploadParser(reg, max_reports=10_000)
    version = reg.metric("latency_split").latest
    (part,) = version.mean_parts()
    frame = mean_frame(version, np.linspace(0, 3000, 500))
    assert wire.record_size(part.params) == 2  # M + 2 = 1,647 report values: two bytes a record
    upload = parser.parse_binary(frame, "latency_split")
    assert upload.version is part and len(upload.batch) == 500
    framed = parser.frame_binary(frame, None)
    assert framed is not None and framed[0] is part
    histogram = wire.encode_frame(version.params, ReportBatch(*identity_coefficients(3), np.array([0, 1, 2], np.uint32)))
    with pytest.raises(UploadRejected) as info:  # one parameter set per upload: the mean part is a version
        parser.parse_binary(frame + histogram, None)
    assert info.value.reason == "mixed_parameter_sets" and "latency_split@1/mean" in info.value.detail
    with pytest.raises(UploadRejected) as info:
        parser.parse_binary(frame, "latency_mean")
    assert info.value.reason == "foreign_metric"


def test_a_json_upload_of_the_mean_names_its_fingerprint_and_bad_z_is_refused(reg):
    parser = UploadParser(reg, max_reports=10_000)
    version = reg.metric("latency_mean").latest
    fp = version.mean.fingerprint.hex()
    upload = parser.parse_json(json.dumps({"fingerprint": fp, "reports": [{"z": "0"}, {"z": "1200"}]}).encode(),
                               "latency_mean")
    assert upload.version.report_part == "mean" and len(upload.batch) == 2
    outside = str(version.mean.hybrid.outputs)  # negative control: one past the last report value
    with pytest.raises(UploadRejected):
        parser.parse_json(json.dumps({"fingerprint": fp, "reports": [{"z": outside}]}).encode(), "latency_mean")
