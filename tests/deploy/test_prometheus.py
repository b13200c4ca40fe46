"""Prometheus config, recording rules and alerts: promtool + the metric contract."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.deploy import metric_contract as contract
from tests.deploy import promql
from tests.deploy.conftest import run
from tests.deploy.promql import ROOT

PROM_DIR = ROOT / "deploy" / "prometheus"
CONFIG = PROM_DIR / "prometheus.yml"
RULE_FILES = sorted((PROM_DIR / "rules").glob("*.yml"))
UNIT_TESTS = sorted((PROM_DIR / "tests").glob("*.yml"))

REQUIRED_ALERTS = {"OCMSWorkerDown", "OCMSConsumerLagGrowing", "OCMSRejectRateHigh", "OCMSEstimatesStale"}
SEVERITIES = {"critical", "warning", "info"}


def _known_series() -> dict[str, frozenset[str]]:
    """Series name -> label names, for contract series and every recording rule."""
    known = {name: labels for name, (_, labels) in contract.series_catalog().items()}
    for rule in promql.recording_rules():
        known[rule.name] = promql.recorded_labels(rule, known)
    return known


# ----------------------------------------------------------------------------- promtool

@pytest.mark.integration
def test_promtool_check_config(promtool):
    result = run([promtool, "check", "config", str(CONFIG)], cwd=PROM_DIR)
    assert result.returncode == 0, result.stdout + result.stderr
    # rule_files is relative to the config: it must find every file in rules/.
    assert f"SUCCESS: {len(RULE_FILES)} rule files found" in result.stdout + result.stderr


@pytest.mark.integration
@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_promtool_check_rules(promtool, path):
    result = run([promtool, "check", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.integration
def test_promtool_unit_tests(promtool):
    assert len(UNIT_TESTS) >= 2
    result = run([promtool, "test", "rules", *map(str, UNIT_TESTS)], cwd=PROM_DIR / "tests")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAILED" not in result.stdout + result.stderr


BROKEN_RULES = {
    "bad_promql": "groups:\n  - name: x\n    rules:\n      - record: ocms:x\n        expr: sum(rate(ocms_reports_accepted_total[1m])\n",
    "bad_record_name": "groups:\n  - name: x\n    rules:\n      - record: 'ocms x'\n        expr: up\n",
    "bad_duration": "groups:\n  - name: x\n    rules:\n      - alert: X\n        expr: up == 0\n        for: soon\n",
}


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(BROKEN_RULES))
def test_promtool_rejects_a_broken_rule_file(promtool, tmp_path, name):
    path = tmp_path / f"{name}.yml"
    path.write_text(BROKEN_RULES[name])
    result = run([promtool, "check", "rules", str(path)])
    assert result.returncode != 0, result.stdout


@pytest.mark.integration
def test_promtool_unit_test_detects_a_wrong_expectation(promtool, tmp_path):
    """The dedup test fails if the expected value is wrong (the harness can fail)."""
    source = (PROM_DIR / "tests" / "recording_test.yml").read_text()
    source = source.replace("../rules/", str(PROM_DIR / "rules") + "/")
    broken = source.replace("value: 0.125\n", "value: 0.25\n", 1)
    assert broken != source
    (tmp_path / "ok.yml").write_text(source)
    (tmp_path / "broken.yml").write_text(broken)
    assert run([promtool, "test", "rules", str(tmp_path / "ok.yml")]).returncode == 0
    result = run([promtool, "test", "rules", str(tmp_path / "broken.yml")])
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr


# ----------------------------------------------------------------------------- config

def test_scrape_config_finds_every_worker(yaml_load, compose):
    config = yaml_load(CONFIG)
    assert config["global"]["scrape_interval"] == "5s"
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    worker = jobs["ocms-worker"]
    assert worker.get("metrics_path", "/metrics") == "/metrics"
    (sd,) = worker["dns_sd_configs"]
    assert sd["names"] == ["worker"] and sd["names"][0] in compose["services"]
    command = [str(x) for x in compose["services"]["worker"]["command"]]
    assert sd["port"] == int(command[command.index("--web-port") + 1])
    assert sd["type"] == "A"


def test_rule_files_resolve_in_the_container(yaml_load, compose):
    """prometheus.yml's rule_files glob, relative to the config, matches the compose mounts."""
    config = yaml_load(CONFIG)
    mounts = dict(str(v).split(":")[:2] for v in compose["services"]["prometheus"]["volumes"] if str(v).startswith("./"))
    container_config = mounts["./deploy/prometheus/prometheus.yml"]
    container_rules = mounts["./deploy/prometheus/rules"]
    command = compose["services"]["prometheus"]["command"]
    assert f"--config.file={container_config}" in command
    for pattern in config["rule_files"]:
        assert not pattern.startswith("/"), "keep rule_files relative so promtool checks them here"
        assert str(Path(container_config).parent / Path(pattern).parent) == container_rules
        assert sorted(CONFIG.parent.glob(pattern)) == RULE_FILES


# ----------------------------------------------------------------------------- rules vs contract

def test_recording_rules_are_namespaced():
    rules = promql.recording_rules()
    assert rules
    for rule in rules:
        assert rule.name.startswith("ocms:"), rule.name
        assert rule.group.startswith("ocms:"), rule.group
    names = [r.name for r in rules]
    assert len(names) == len(set(names)), "duplicate recording rule"


def test_every_global_metric_has_a_dedup_rule():
    by_source = {promql.dedup_source(r): r.name for r in promql.recording_rules() if promql.dedup_source(r)}
    for metric in contract.METRICS:
        if metric.scope == "global":
            assert metric.name in by_source, f"no `max without (instance) ({metric.name})` rule"
            assert by_source[metric.name] == "ocms:" + metric.name.removeprefix("ocms_")


def test_rules_read_only_contract_metrics_and_recorded_series():
    known = _known_series()
    for rule in promql.recording_rules() + promql.alert_rules():
        for name, labels in promql.selectors(rule.expr):
            assert name in known, f"{rule.file}: {rule.name} reads unknown series {name!r}"
            assert labels <= known[name], f"{rule.name}: {name} has no labels {sorted(labels - known[name])}"


def test_global_metrics_are_only_read_through_dedup_rules():
    """Summing a global metric over workers would multiply it by the number of workers."""
    global_series = contract.global_series()
    for rule in promql.recording_rules() + promql.alert_rules():
        if promql.dedup_source(rule):
            continue
        leaked = promql.metric_names(rule.expr) & global_series
        assert not leaked, f"{rule.name} reads {sorted(leaked)} without de-duplication"


def test_required_recording_rules_exist():
    names = set(promql.recording_rule_names())
    for required in (
        "ocms:estimate_ratio", "ocms:estimate_count", "ocms:estimate_ci_lower_ratio", "ocms:estimate_ci_upper_ratio",
        "ocms:estimate_stddev_ratio", "ocms:params_reports", "ocms:ingest_rate:rate1m", "ocms:reports_rejected:rate1m",
        "ocms:reject_ratio:rate5m", "ocms:decode_duration_seconds:p50_1m", "ocms:decode_duration_seconds:p99_1m",
        "ocms:batch_reports:mean1m", "ocms:consumer_lag_messages:sum",
    ):
        assert required in names, required
    exprs = {r.name: " ".join(r.expr.split()) for r in promql.recording_rules()}
    assert "histogram_quantile(0.99," in exprs["ocms:decode_duration_seconds:p99_1m"]
    assert exprs["ocms:ingest_rate:rate1m"] == "sum(rate(ocms_reports_accepted_total[1m]))"


def test_alerts_are_complete():
    alerts = {r.name: r for r in promql.alert_rules()}
    assert REQUIRED_ALERTS <= set(alerts)
    assert " ".join(alerts["OCMSWorkerDown"].expr.split()) == 'up{job="ocms-worker"} == 0'
    for name, rule in alerts.items():
        assert re.fullmatch(r"\d+[smh]", str(rule.raw.get("for", ""))), f"{name}: needs `for:`"
        assert rule.raw["labels"]["severity"] in SEVERITIES, name
        annotations = rule.raw["annotations"]
        assert annotations.get("summary") and annotations.get("description"), name


def test_every_alert_has_firing_and_silent_unit_tests(yaml_load):
    firing, silent = set(), set()
    for path in UNIT_TESTS:
        for case in yaml_load(path).get("tests", []):
            for check in case.get("alert_rule_test", []) or []:
                (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    alerts = {r.name for r in promql.alert_rules()}
    assert alerts <= firing, f"alerts never tested firing: {sorted(alerts - firing)}"
    assert alerts <= silent, f"alerts never tested silent: {sorted(alerts - silent)}"


def test_job_label_matches_the_scrape_job(yaml_load):
    jobs = {job["job_name"] for job in yaml_load(CONFIG)["scrape_configs"]}
    for rule in promql.recording_rules() + promql.alert_rules():
        for job in re.findall(r'job\s*=\s*"([^"]*)"', rule.expr):
            assert job in jobs, f"{rule.name}: job {job!r} is not scraped"
