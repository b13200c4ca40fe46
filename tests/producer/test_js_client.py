"""The JavaScript device client (producer/js), driven from the Python suite.

* its own node test suite (``node --test``): every record of tests/vectors/*.json, config validation,
  ledger, upload queue, API surface;
* the exact privacy check from the keep thresholds the client really uses (found from its behaviour by
  tools/probe_threshold.mjs), with ``cms_core.audit.exact_privacy_loss``; a leaky client is caught;
* the black-box epsilon audit (cms_core.audit: the distinguishing event, Clopper-Pearson) on 2 x 200,000
  reports from the client's public API, and the 1.25 epsilon leaky client caught;
* statistics: 10^5 reports of known values from the CLI decode with ``ocms estimate`` within their
  intervals at the expected rate (the exact binomial tail), the keep rate within 4 standard deviations;
* the CLI: one report per input line in input order, one-line errors naming the line (exit 2).

The client draws from the platform CSPRNG, which cannot be seeded: the statistical bounds are set so a
false failure is at most a one-in-ten-thousand event (4 standard deviations, alpha = 1e-6 for the audit).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import cms_core.audit as audit
from cms_core import kernel, wire
from cms_core.privatize import keep_threshold
from cms_core.values import string_fingerprint
from infra.capture import read_capture
from producer.jsclient import CLI, JS_DIR, audit_js_client, leaky_threshold_for, node, write_device_config

ROOT = Path(__file__).resolve().parents[2]

#: Small metrics: exact enumeration (tiny*), the audit's parameter sets (audit_*), the statistical runs (stat_*).
REGISTRY = """\
metrics:
  - name: tiny
    description: five categories, OCMS+RR (small enough to enumerate every output)
    owner: tests
    categories: [a, b, c, d, e]
    epsilon: 2
  - name: tiny_direct
    description: five categories, direct randomized response
    owner: tests
    categories: [a, b, c, d, e]
    mechanism: direct
    epsilon: 2
  - name: audit_ocms
    description: integers below 1000 at epsilon 2 (the Python audit's OCMSParams.build(2.0, 1000))
    owner: tests
    integers: 1000
    epsilon: 2
  - name: audit_direct
    description: 16 categories, direct randomized response at epsilon 2
    owner: tests
    categories: [c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15]
    mechanism: direct
    epsilon: 2
  - name: stat_int
    description: integers below 200, every one tracked
    owner: tests
    integers: 200
    epsilon: 2
  - name: stat_words
    description: strings in GF(2^128)
    owner: tests
    strings: true
    tracked: [w00, w01, w02, w03, w04, w05, w06, w07, w08, w09, w10, w11, w12, w13, w14, w15, w16, w17, w18, w19]
    epsilon: 3
  - name: stat_direct
    description: 12 categories, direct randomized response
    owner: tests
    categories: [k00, k01, k02, k03, k04, k05, k06, k07, k08, k09, k10, k11]
    mechanism: direct
    epsilon: 1.5
  - name: order
    description: direct randomized response at epsilon 40 (keeps with probability 1 - 4e-17; shows the order)
    owner: tests
    categories: [v0, v1, v2, v3, v4, v5, v6, v7, v8, v9]
    mechanism: direct
    epsilon: 40
"""

STAT_REPORTS = 100_000
AUDIT_TRIALS = 200_000
AUDIT_ALPHA = 1e-6

pytestmark = pytest.mark.integration  # every test runs node (or the CLI) in a child process


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    return write_device_config(tmp_path_factory.mktemp("js-registry"), REGISTRY)


def cli(config: Path, metric: str, values: list[str], *args: str, check: bool = True) -> subprocess.CompletedProcess:
    lines = "".join(json.dumps(v, ensure_ascii=False) + "\n" for v in values).encode()
    return node(CLI, "--config", config, "--metric", metric, *args, input=lines, check=check)


# ------------------------------------------------------------------ the node suite
def test_node_test_suite_passes(js_client):
    tests = sorted(str(p.relative_to(JS_DIR)) for p in (JS_DIR / "test").glob("*.test.mjs"))
    done = node("--test", *tests, check=False, timeout=900)
    out = done.stdout.decode(errors="replace")
    summary = {line.split()[1]: int(line.split()[2]) for line in out.splitlines()
               if line.startswith("# ") and len(line.split()) == 3 and line.split()[2].isdigit()}
    assert done.returncode == 0 and summary.get("fail") == 0, out[-6000:] + done.stderr.decode(errors="replace")[-3000:]
    assert summary["pass"] >= 100, summary  # every vector record is a test of its own


def test_typescript_declarations_are_built_from_the_checked_sources(js_client):
    """`npm run build` is `tsc` in strict mode with noEmitOnError: a type error fails the build, so the published
    declarations (dist/*.d.ts) are the checked sources' own."""
    tsconfig = json.loads((JS_DIR / "tsconfig.json").read_text())["compilerOptions"]
    assert tsconfig["strict"] and tsconfig["noEmitOnError"] and tsconfig["declaration"]
    assert "export declare class OcmsClient" in (JS_DIR / "dist" / "client.d.ts").read_text()


def test_uploader_default_timeout_outlasts_a_shuffling_collectors_default_wait(js_client):
    """An upload to a shuffling collector is answered once its batch is in Kafka (60 s + the acknowledgement by
    default): the Uploader's 30 s default timed out and retried every upload of a quiet metric."""
    from tests.support.collector_defaults import longest_default_answer_s

    script = ('import * as lib from "./dist/index.js";'
              'const u = new lib.Uploader({collector: "http://127.0.0.1:1", storage: new lib.MemoryStorage(), '
              'pageEvents: false});'
              'console.log(u.timeoutMs); u.close();')
    timeout_ms = float(node("--input-type=module", "-e", script).stdout.decode())
    assert timeout_ms / 1000 > longest_default_answer_s()


# ------------------------------------------------------------------ exact privacy
def probed_threshold(config: Path, metric: str, value: str, leaky: int | None = None) -> int:
    args = ["test/tools/probe_threshold.mjs", config, metric, value] + ([str(leaky)] if leaky is not None else [])
    return int(node(*args).stdout.decode().strip())


@pytest.mark.parametrize("metric", ["tiny", "tiny_direct"])
def test_exact_privacy_loss_from_the_threshold_the_client_uses(js_client, registry, metric, monkeypatch):
    _, reg, config = registry
    params = reg.metric(metric).latest.params
    used = probed_threshold(config, metric, "a")
    assert used == keep_threshold(params), "the client keeps with the registry's integer T, to the unit"
    monkeypatch.setattr(audit, "keep_threshold", lambda p: used)  # the enumeration with the client's T
    loss = audit.exact_privacy_loss(params)
    assert loss <= Fraction(math.exp(params.epsilon)), "never more loss than claimed, exactly"
    assert float(loss) == pytest.approx(math.exp(params.epsilon), rel=1 / (2**64 - used) + 1e-15)


@pytest.mark.parametrize("metric", ["tiny", "tiny_direct"])
def test_exact_check_catches_a_client_keeping_with_a_leaky_threshold(js_client, registry, metric, monkeypatch):
    _, reg, config = registry
    params = reg.metric(metric).latest.params
    leaky = leaky_threshold_for(params)
    used = probed_threshold(config, metric, "a", leaky)
    assert used == leaky
    monkeypatch.setattr(audit, "keep_threshold", lambda p: used)
    assert audit.exact_privacy_loss(params) > Fraction(math.exp(params.epsilon))


# ------------------------------------------------------------------ black-box audit
@pytest.mark.parametrize("metric", ["audit_ocms", "audit_direct"])
def test_black_box_audit_of_the_js_client(js_client, registry, metric):
    _, reg, config = registry
    result = audit_js_client(config, reg.metric(metric).latest, 3, 7, AUDIT_TRIALS, AUDIT_ALPHA)
    assert not result.leaks, result
    assert result.fraction_of_claim >= 0.9, result


@pytest.mark.parametrize("metric", ["audit_ocms", "audit_direct"])
def test_black_box_audit_catches_the_leaky_js_client(js_client, registry, metric):
    _, reg, config = registry
    version = reg.metric(metric).latest
    result = audit_js_client(config, version, 3, 7, AUDIT_TRIALS // 4, AUDIT_ALPHA, leaky_threshold_for(version.params))
    assert result.leaks, result


# ------------------------------------------------------------------ statistics
def known_values(version, n: int) -> list[str]:
    """n values with a skewed known distribution over the version's tracked values (shuffled, fixed seed)."""
    labels = [version.value_name(v) for v in version.tracked_values().all_labels()]
    weights = 1.0 / np.arange(1, len(labels) + 1) ** 0.8
    counts = np.floor(weights / weights.sum() * n).astype(int)
    counts[0] += n - counts.sum()
    values = [label for label, c in zip(labels, counts) for _ in range(c)]
    np.random.default_rng(11).shuffle(values)
    return values


#: The chance the statistical checks fail a correct client (the client's CSPRNG cannot be seeded).
FALSE_FAILURE = 1e-4


def least_inside(k: int, coverage: float, alpha: float) -> int:
    """The largest count c with P(Binomial(k, coverage) < c) <= alpha: the exact binomial tail, not its normal
    approximation, which at k = 12 intervals failed a correct client about one run in fifty (CI, 8 of 12 inside)."""
    below = 0.0
    for c in range(k + 1):
        below_next = below + math.comb(k, c) * coverage**c * (1 - coverage) ** (k - c)
        if below_next > alpha:
            return c
        below = below_next
    return k


def test_least_inside_is_the_exact_binomial_tail():
    # 12 intervals of 95%: P(X <= 6) = 1.1e-5 and P(X <= 7) = 1.8e-4, so 7 inside is the least a 1e-4 test asks
    assert least_inside(12, 0.95, 1e-4) == 7
    assert least_inside(200, 0.95, 1e-4) == 177  # the normal approximation says 190 - 4 * 3.08 = 177.7
    assert least_inside(12, 0.95, 0.5) == 12


@pytest.mark.parametrize("metric", ["stat_int", "stat_words", "stat_direct"])
def test_reports_of_known_values_decode_within_their_intervals(js_client, registry, metric, tmp_path):
    registry_path, reg, config = registry
    version = reg.metric(metric).latest
    params = version.params
    values = known_values(version, STAT_REPORTS)
    capture = tmp_path / "capture.bin"
    cli(config, metric, values, "--out", capture)
    messages = list(read_capture(capture))
    assert len(messages) == STAT_REPORTS
    done = subprocess.run([sys.executable, "-m", "ocms", "estimate", "--registry", str(registry_path), "--metric",
                           metric, str(capture)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["n"] == STAT_REPORTS and not doc["rejected"]
    truth = Counter(values)
    inside = sum(r["count_ci_low"] <= truth[r["value"]] <= r["count_ci_high"] for r in doc["estimates"])
    k = len(doc["estimates"])
    least = least_inside(k, 0.95, FALSE_FAILURE)
    assert inside >= least, f"{inside} of {k} inside their 95% CI (at least {least} expected)"
    # keep rate: z equals the true hash with probability T / 2^64 (the reports are in input order)
    batch = wire.decode_message(_frame(params, messages), {params.fingerprint: params})[1]
    elements = [_element(version, v) for v in values]
    if params.is_direct:
        y = np.array(elements, dtype=np.uint64)
    else:
        from cms_core.values import elements_to_array, limbs_for

        y = kernel.hash_residues(params, batch.a0, batch.a1, elements_to_array(elements, limbs_for(params)))
    kept = int(np.count_nonzero(batch.z == y))
    p = keep_threshold(params) / 2**64
    sd = math.sqrt(STAT_REPORTS * p * (1 - p))
    assert abs(kept - STAT_REPORTS * p) <= 4 * sd, f"kept {kept}, expected {STAT_REPORTS * p:.0f} +- {4 * sd:.0f}"


def _frame(params, messages: list[bytes]) -> bytes:
    body = b"".join(m[wire.HEADER_SIZE:] for m in messages)
    return wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_FRAME, params.fingerprint, len(messages)) + body


def _element(version, name: str) -> int:
    value = version.value_from_name(name)
    return string_fingerprint(value) if isinstance(value, str) else int(value)


# ------------------------------------------------------------------ the CLI
def test_cli_writes_one_report_per_line_in_input_order(js_client, registry, tmp_path):
    _, reg, config = registry
    version = reg.metric("order").latest
    names = [f"v{i % 10}" for i in (3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9)]
    capture = tmp_path / "order.bin"
    cli(config, "order", names, "--out", capture)
    messages = list(read_capture(capture))
    assert len(messages) == len(names)
    zs = [wire.decode_message(m, {version.params.fingerprint: version.params})[1].z[0] for m in messages]
    assert [version.value_name(int(z)) for z in zs] == names  # epsilon 40: every report keeps its value


@pytest.mark.parametrize("lines, message", [
    (['"a"', '"zz"'], "line 2: metric \"tiny\" version 1: \"zz\" is not a category"),
    (['"a"', "a"], "line 2: not JSON"),
    (['"a"', "", '"b"'], "line 2: not JSON"),
    (["3"], "line 1: 3 is not a JSON string"),
])
def test_cli_bad_input_is_one_line_naming_it_exit_2(js_client, registry, tmp_path, lines, message):
    _, _, config = registry
    out = tmp_path / "never.bin"
    done = node(CLI, "--config", config, "--metric", "tiny", "--out", out,
                input="\n".join(lines).encode() + b"\n", check=False)
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert err.count("\n") == 1 and err.startswith(f"ocms-report: error: {message}"), err
    assert not out.exists(), "nothing is written when a line is bad"


@pytest.mark.parametrize("args, message", [
    ([], "--config is required"),
    (["--config", "CONFIG"], "--metric is required"),
    (["--config", "CONFIG", "--metric", "tiny"], "give exactly one of --out CAPTURE and --collector URL"),
    (["--config", "CONFIG", "--metric", "nope", "--out", "x"], "--metric nope: unknown metric \"nope\": this device config holds tiny"),
    (["--config", "/no/such.json", "--metric", "tiny", "--out", "x"], "--config /no/such.json: no such file"),
    (["--config", "CONFIG", "--metric", "tiny", "--collector", "ftp://x"], "--collector ftp://x: must be an http"),
    (["--config", "CONFIG", "--metric", "tiny", "--out", "x", "--budget", "2"], "--budget, --period-seconds and --memoize need --ledger"),
    (["--config", "CONFIG", "--metric", "tiny", "--out", "x", "--bogus"], "Unknown option '--bogus'"),
])
def test_cli_bad_flags_exit_2(js_client, registry, args, message):
    _, _, config = registry
    done = node(CLI, *[str(config) if a == "CONFIG" else a for a in args], input=b"", check=False)
    assert done.returncode == 2
    assert done.stderr.decode().startswith(f"ocms-report: error: {message}"), done.stderr.decode()


def test_cli_refuses_a_tampered_config(js_client, registry, tmp_path):
    _, _, config = registry
    doc = json.loads(config.read_text())
    threshold = int(doc["metrics"][0]["keep_threshold"])
    doc["metrics"][0]["keep_threshold"] = str(threshold + threshold // 1000)  # keeps more often: weaker privacy
    bad = tmp_path / "tampered.json"
    bad.write_text(json.dumps(doc))
    done = node(CLI, "--config", bad, "--metric", "tiny", "--out", tmp_path / "x.bin", input=b'"a"\n', check=False)
    assert done.returncode == 2
    assert "keep_threshold" in done.stderr.decode() and "tampered" in done.stderr.decode()


def test_cli_ledger_refuses_beyond_the_budget(js_client, registry, tmp_path):
    _, _, config = registry
    ledger = tmp_path / "ledger.json"
    capture = tmp_path / "c.bin"
    done = cli(config, "tiny", ["a", "b", "c", "d"], "--out", capture, "--ledger", ledger, "--budget", "5", check=False)
    assert done.returncode == 1
    assert "line 3: privacy budget exhausted for metric \"tiny\"" in done.stderr.decode()
    assert len(list(read_capture(capture))) == 2, "the reports made before the refusal are written"
    assert oct(ledger.stat().st_mode & 0o777) == "0o600"
