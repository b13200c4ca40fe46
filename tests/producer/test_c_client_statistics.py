"""The C client's reports, statistically (issue 25): the black-box epsilon audit and ocms estimate.

* Black-box audit (cms_core.audit.audit_batches, black_box_audit's procedure on reports made
  elsewhere: Clopper-Pearson lower bound on epsilon from the most distinguishing event) on 2 x 200,000 reports that ocms-report-c
  made from the OS CSPRNG, for OCMS+RR and direct RR: the bound must not exceed epsilon (no leak)
  and must reach 90% of it (the budget is really used). alpha = 1e-6, since the CSPRNG cannot be
  seeded. Negative control: the library with the keep threshold of 1.25 epsilon (a test parameter
  struct in the test driver) claiming epsilon is caught.
* 10^5 reports of known values per metric kind (categories, direct RR, GF(2^64) integers,
  GF(2^128) strings), written by ocms-report-c and decoded by `ocms estimate`: the true counts lie
  inside their 95% intervals at the expected rate and all inside 5 sd; the keep rate (z equals the
  true hash, computed from the report's public coefficients) is within 4 sd of T / 2^64.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from statistics import NormalDist

import numpy as np
import pytest

from cms_core import kernel
from cms_core.audit import audit_batches
from cms_core.privatize import keep_threshold
from cms_core.values import elements_to_array, encode_value, limbs_for
from infra.capture import read_report_batch
from registry.device import device_config
from registry.loader import parse_registry

from .c_client import C_DIR, Driver, line_of, make, run_cli

pytestmark = pytest.mark.integration

AUDIT_TRIALS = 200_000
AUDIT_ALPHA = 1e-6
STAT_REPORTS = 100_000

REGISTRY = """\
metrics:
  - name: screens
    description: categories, OCMS+RR
    owner: tests
    categories: [%s]
    epsilon: 2
  - name: colors
    description: categories, direct randomized response
    owner: tests
    categories: [red, green, blue, cyan, magenta, yellow, black, white]
    mechanism: direct
    epsilon: 2
  - name: builds
    description: 64-bit integers, GF(2^64)
    owner: tests
    integers: 2^64
    tracked: [%s]
    epsilon: 3
  - name: queries
    description: strings, GF(2^128)
    owner: tests
    strings: true
    tracked: [%s]
    epsilon: 3
""" % (", ".join(f"s{i:02d}" for i in range(24)),
       ", ".join(f'"{v}"' for v in [0, 1, 7, 2**53 + 1, 2**63, 2**64 - 1, 12345678901234567890, 42, 99, 1000]),
       ", ".join(f'"q{i:02d}"' for i in range(12)) + ', "café", "東京タワー"')


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    make("all", "test-tools")
    directory = tmp_path_factory.mktemp("c-stats")
    (directory / "registry.yaml").write_text(REGISTRY, encoding="utf-8")
    registry = parse_registry(REGISTRY)
    config = directory / "device-config.json"
    config.write_text(json.dumps(device_config(registry), ensure_ascii=False), encoding="utf-8")
    return directory, registry, config


def _cli_capture(config, metric: str, values: list[str], out) -> None:
    done = run_cli(["--config", config, "--metric", metric, "--out", out], [line_of(v) for v in values])
    assert done.returncode == 0, done.stderr.decode()


@pytest.mark.parametrize("metric, x1, x2", [("screens", 3, 7), ("colors", 1, 5)])
def test_black_box_audit_of_the_c_client(setup, tmp_path, metric, x1, x2):
    directory, registry, config = setup
    version = registry.metric(metric).latest
    params, names = version.params, version.value_names
    batches = []
    for x in (x1, x2):
        out = tmp_path / f"{metric}-{x}.capture"
        _cli_capture(config, metric, [names[x]] * AUDIT_TRIALS, out)
        batches.append(read_report_batch(out, params))
    result = audit_batches(params, x1, x2, *batches, alpha=AUDIT_ALPHA)
    assert not result.leaks, result
    assert result.fraction_of_claim >= 0.9, result

    # negative control: the keep threshold of 1.25 epsilon, claiming epsilon, is caught
    leaky_t = keep_threshold(type(params).build(params.epsilon * 1.25, params.dictionary_size,
                                                hash_range=params.hash_range, field=params.field,
                                                mechanism=params.mechanism))
    driver = Driver(C_DIR / "build" / "ocms-c-driver")
    try:
        assert "error" not in driver.ask(op="load", path=str(config))
        leaky = []
        for x in (x1, x2):
            out = tmp_path / f"{metric}-{x}-leaky.capture"
            answer = driver.ask(op="sample", metric=metric, line=line_of(names[x]), n=AUDIT_TRIALS, out=str(out),
                                keep_threshold=str(leaky_t))
            assert answer["written"] == AUDIT_TRIALS, answer
            leaky.append(read_report_batch(out, params))
    finally:
        assert driver.close()[0] == 0
    caught = audit_batches(params, x1, x2, *leaky, alpha=AUDIT_ALPHA, claimed_epsilon=params.epsilon)
    assert caught.leaks, caught


# ------------------------------------------------------------------ ocms estimate and the keep rate
def _fleet(version, rng: np.random.Generator) -> list[str]:
    """10^5 value names: the tracked values with Zipf-like counts, plus some untracked ones."""
    if version.domain == "categories":
        names = list(version.value_names)
    else:
        names = [str(v) if not isinstance(v, str) else v for v in version.tracked_values().all_labels()]
    weights = 1.0 / np.arange(1, len(names) + 1)
    counts = np.floor(weights / weights.sum() * STAT_REPORTS * (0.9 if version.domain != "categories" else 1.0))
    values = [n for n, c in zip(names, counts.astype(int)) for _ in range(c)]
    extra = ["not-tracked-%d" % i for i in range(7)] if version.domain == "strings" else [str(2**40 + i) for i in range(7)]
    while len(values) < STAT_REPORTS:
        values.append(names[0] if version.domain == "categories" else extra[len(values) % 7])
    rng.shuffle(values)
    return values


def _estimate(directory, metric: str, capture, confidence: float) -> dict:
    done = subprocess.run([sys.executable, "-m", "ocms", "estimate", "--registry", str(directory / "registry.yaml"),
                           "--metric", metric, "--confidence", str(confidence), str(capture)],
                          capture_output=True, text=True, cwd=str(C_DIR.parents[1]))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _outside(doc: dict, truth: Counter) -> int:
    return sum(not r["count_ci_low"] <= truth[r["value"]] <= r["count_ci_high"] for r in doc["estimates"])


@pytest.mark.parametrize("metric", ["screens", "colors", "builds", "queries"])
def test_reports_decode_with_ocms_estimate_within_their_intervals(setup, tmp_path, metric):
    directory, registry, config = setup
    version = registry.metric(metric).latest
    params = version.params
    values = _fleet(version, np.random.default_rng(25))
    capture = tmp_path / f"{metric}.capture"
    _cli_capture(config, metric, values, capture)
    truth = Counter(values)

    doc = _estimate(directory, metric, capture, 0.95)
    assert doc["n"] == STAT_REPORTS and doc["rejected"] == {}
    tracked = len(doc["estimates"])
    misses = _outside(doc, truth)
    # misses ~ Binomial(tracked, 0.05): more than this bound has probability < 1e-6
    bound = next(k for k in range(tracked + 1)
                 if sum(math.comb(tracked, j) * 0.05**j * 0.95**(tracked - j) for j in range(k + 1, tracked + 1)) < 1e-6)
    assert misses <= bound, (misses, tracked, bound)
    wide = _estimate(directory, metric, capture, 1 - 2 * (1 - NormalDist().cdf(5)))  # +-5 sd
    assert _outside(wide, truth) == 0
    # negative control: the same check against a wrong truth (counts moved to other values) fails
    names = [r["value"] for r in doc["estimates"]]
    wrong = Counter({names[i]: truth[names[(i + 1) % len(names)]] for i in range(len(names))})
    assert _outside(wide, wrong) > 0

    # keep rate: z equals the true hash of the value (public coefficients) with probability T / 2^64
    batch = read_report_batch(capture, params)
    element_of = {v: encode_value(params, version.value_from_name(v)) for v in truth}
    elements = [element_of[v] for v in values]
    x = elements_to_array(elements, limbs_for(params))
    y = x.astype(np.uint32) if params.is_direct else kernel.hash_residues(params, batch.a0, batch.a1, x)
    kept = int(np.count_nonzero(batch.z == y))
    p = keep_threshold(params) / 2**64
    sd = math.sqrt(STAT_REPORTS * p * (1 - p))
    assert abs(kept - STAT_REPORTS * p) <= 4 * sd, (kept, STAT_REPORTS * p, sd)
