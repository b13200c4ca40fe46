"""Grafana provisioning and dashboards: valid JSON, datasource uid, only known series."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.deploy import metric_contract as contract
from tests.deploy import promql
from tests.deploy.conftest import run
from tests.deploy.promql import DASHBOARDS_DIR, ROOT

GRAFANA = ROOT / "deploy" / "grafana"
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "prometheus.yml"
PROVIDERS = GRAFANA / "provisioning" / "dashboards" / "ocms.yml"
DASHBOARD_FILES = sorted(DASHBOARDS_DIR.glob("*.json"))


def _known_series() -> dict[str, frozenset[str]]:
    known = {name: labels for name, (_, labels) in contract.series_catalog().items()}
    for rule in promql.recording_rules():
        known[rule.name] = promql.recorded_labels(rule, known)
    return known


def expr_problems(expr: str, known: dict[str, frozenset[str]]) -> list[str]:
    """Why ``expr`` does not fit the metric contract + recording rules (empty: fine)."""
    problems = []
    global_series = contract.global_series()
    for name, labels in promql.selectors(expr):
        if name not in known:
            problems.append(f"unknown series {name!r}")
        elif name in global_series:
            problems.append(f"raw global metric {name!r}: query its de-duplicated ocms: rule")
        elif not labels <= known[name]:
            problems.append(f"{name} has no labels {sorted(labels - known[name])}")
    return problems


@pytest.fixture(scope="module")
def datasource_uid(yaml_load) -> str:
    (ds,) = yaml_load(DATASOURCES)["datasources"]
    return ds["uid"]


@pytest.fixture(scope="module")
def dashboards() -> list[tuple[Path, dict]]:
    assert DASHBOARD_FILES, "no dashboards"
    return [(path, json.loads(path.read_text())) for path in DASHBOARD_FILES]


# ----------------------------------------------------------------------------- provisioning

def test_datasource_provisioning(yaml_load, compose):
    doc = yaml_load(DATASOURCES)
    assert doc["apiVersion"] == 1
    (ds,) = doc["datasources"]
    assert ds["type"] == "prometheus" and ds["uid"] and ds["isDefault"] is True
    host, port = re.fullmatch(r"http://([\w-]+):(\d+)", ds["url"]).groups()
    assert host in compose["services"]
    assert any(str(p).endswith(f":{port}") for p in compose["services"][host]["ports"])


def test_dashboard_provider_points_at_the_mounted_dashboards(yaml_load, compose):
    (provider,) = yaml_load(PROVIDERS)["providers"]
    assert provider["type"] == "file"
    volumes = [str(v) for v in compose["services"]["grafana"]["volumes"]]
    assert f"./deploy/grafana/dashboards:{provider['options']['path']}:ro" in volumes
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in volumes
    home = compose["services"]["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(provider["options"]["path"] + "/")
    assert (DASHBOARDS_DIR / Path(home).name).exists()


# ----------------------------------------------------------------------------- dashboards

def test_dashboards_are_valid_and_unique(dashboards):
    uids = [d["uid"] for _, d in dashboards]
    assert len(set(uids)) == len(uids) and all(uids)
    for path, dash in dashboards:
        assert dash["title"] and isinstance(dash["schemaVersion"], int), path.name
        assert "id" not in dash or dash["id"] is None, f"{path.name}: provisioned dashboards carry no database id"
        ids = [p["id"] for p in promql.iter_panels(dash)]
        assert len(ids) == len(set(ids)), f"{path.name}: duplicate panel ids"
        for panel in promql.iter_panels(dash):
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24 and grid["w"] > 0 and grid["h"] > 0, panel["title"]
            assert panel.get("title"), f"{path.name}: untitled panel {panel['id']}"


def test_every_panel_uses_the_provisioned_datasource(dashboards, datasource_uid):
    for path, dash in dashboards:
        for panel in promql.iter_panels(dash):
            if panel["type"] == "row":
                continue
            assert panel["datasource"] == {"type": "prometheus", "uid": datasource_uid}, f"{path.name}: {panel['title']}"
            assert panel.get("targets"), f"{path.name}: {panel['title']} has no query"
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == datasource_uid, f"{panel['title']} {target['refId']}"
                assert target.get("expr"), f"{panel['title']} {target['refId']}: empty expr"
        for var in dash.get("templating", {}).get("list", []):
            if var["type"] == "query":
                assert var["datasource"]["uid"] == datasource_uid, var["name"]
        text = json.dumps(dash)
        assert "${DS_" not in text, "exported-for-sharing dashboards need the fixed uid instead of ${DS_...}"


def test_panel_exprs_use_only_contract_metrics_and_recording_rules():
    known = _known_series()
    exprs = promql.dashboard_exprs()
    assert exprs
    problems = [f"{e.where}: {p}" for e in exprs for p in expr_problems(e.expr, known)]
    assert not problems, "\n".join(problems)


def test_the_checker_flags_unknown_and_raw_global_series():
    known = _known_series()
    assert expr_problems("sum(rate(ocms_reports_accepted_total[5m]))", known) == []
    assert expr_problems('rate(ocms_reports_acepted_total{metric="x"}[5m])', known) == [
        "unknown series 'ocms_reports_acepted_total'"]
    assert expr_problems("ocms:estimate_ratios", known) == ["unknown series 'ocms:estimate_ratios'"]
    assert "raw global metric" in expr_problems('ocms_estimate_ratio{value="1"}', known)[0]
    assert expr_problems('ocms:estimate_ratio{instance="a"}', known) == ["ocms:estimate_ratio has no labels ['instance']"]
    assert expr_problems('ocms:ingest_rate:rate1m{metric="x"}', known) == ["ocms:ingest_rate:rate1m has no labels ['metric']"]


def test_dashboard_with_an_unknown_metric_is_rejected(tmp_path):
    """End to end on a copy of a real dashboard with one expr broken."""
    path = DASHBOARD_FILES[0]
    dash = json.loads(path.read_text())
    panel = next(p for p in promql.iter_panels(dash) if p.get("targets"))
    panel["targets"][0]["expr"] = "sum(ocms_no_such_metric)"
    (tmp_path / path.name).write_text(json.dumps(dash))
    known = _known_series()
    problems = [p for e in promql.dashboard_exprs(tmp_path) for p in expr_problems(e.expr, known)]
    assert problems == ["unknown series 'ocms_no_such_metric'"]


@pytest.mark.integration
def test_panel_exprs_are_valid_promql(promtool, tmp_path):
    """promtool parses every expr (Grafana variables substituted) as a recording rule."""
    exprs = promql.dashboard_exprs()
    rules = [{"record": f"panel:expr_{i}", "expr": promql.render_grafana_expr(e.expr, {}, default="1")}
             for i, e in enumerate(exprs)]
    path = tmp_path / "panels.yml"
    path.write_text(json.dumps({"groups": [{"name": "panels", "rules": rules}]}))  # JSON is YAML
    result = run([promtool, "check", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_template_variables(dashboards):
    known = _known_series()
    for path, dash in dashboards:
        defined = {v["name"] for v in dash.get("templating", {}).get("list", [])}
        for panel in promql.iter_panels(dash):
            used = set()
            for target in panel.get("targets", []):
                used |= promql.grafana_variables(target["expr"])
            used |= promql.grafana_variables(panel.get("title", ""))
            if panel.get("repeat"):
                used.add(panel["repeat"])
            missing = {v for v in used if not v.startswith("__")} - defined
            assert not missing, f"{path.name}: {panel['title']} uses undefined variables {sorted(missing)}"
    for _, name, query in promql.variable_queries():
        selector, label = promql.parse_label_values(query)
        assert selector, f"variable {name}: give label_values() a metric"
        problems = expr_problems(selector, known)
        assert not problems, f"variable {name}: {problems}"
        (series, _), = [s for s in promql.selectors(selector)]
        assert label in known[series], f"variable {name}: {series} has no label {label!r}"
    names = {(title, name) for title, name, _ in promql.variable_queries()}
    assert {("OCMS estimates", "metric"), ("OCMS estimates", "version"), ("OCMS estimates", "value")} <= names
    # Drop-downs offer names: metric and value come from those labels, never a fingerprint.
    queries = {name: query for title, name, query in promql.variable_queries() if title == "OCMS estimates"}
    assert promql.parse_label_values(queries["metric"])[1] == "metric"
    assert promql.parse_label_values(queries["value"])[1] == "value"
    assert not any(label in {"params", "fingerprint"} for label in
                   (promql.parse_label_values(q)[1] for q in queries.values()))


def _panels_reading(dashboards, needle: str) -> list[dict]:
    return [p for _, d in dashboards for p in promql.iter_panels(d)
            if any(needle in t.get("expr", "") for t in p.get("targets", []))]


def test_required_panels(dashboards):
    # Estimates with CI bands: the upper bound fills down to the lower bound.
    bands = [p for p in _panels_reading(dashboards, "ocms:estimate_ci_upper_ratio") if p["type"] == "timeseries"]
    assert any(
        any(prop == {"id": "custom.fillBelowTo", "value": "CI lower"} for o in p["fieldConfig"]["overrides"]
            for prop in o["properties"])
        for p in bands
    ), "no CI band panel"
    assert any(p.get("repeat") == "value" for p in bands), "estimates are repeated per watched value"
    # Top-K table.
    assert any(p["type"] == "table" for p in _panels_reading(dashboards, "ocms:estimate_ratio"))
    # Trends per bucket.
    assert _panels_reading(dashboards, 'window="latest_bucket"')
    # Pipeline health.
    for needle in ("ocms:ingest_rate:rate1m", "ocms:reports_rejected:rate1m", "ocms:consumer_lag_messages",
                   "ocms:decode_duration_seconds:p99_1m", "ocms:decode_duration_seconds:p50_1m",
                   "ocms:params_info", "ocms:params_reports"):
        assert _panels_reading(dashboards, needle), needle
    # Privacy parameters shown from ocms_params_info's labels.
    legends = {t.get("legendFormat") for p in _panels_reading(dashboards, "ocms:params_info") for t in p["targets"]}
    assert {"{{epsilon}}", "{{hash_range}}"} <= legends


def test_the_estimates_dashboard_shows_discovered_values(dashboards):
    """Issue 15: a panel of the latest discovery pass, read through the de-duplicated rules."""
    (dash,) = [d for path, d in dashboards if path.name == "ocms-estimates.json"]
    exprs = {t["expr"] for p in promql.iter_panels(dash) if p["type"] == "table" for t in p.get("targets", [])}
    assert 'sort_desc(ocms:discovered_frequency{metric="$metric"})' in exprs
    assert {'ocms:discovered_frequency_ci_low{metric="$metric"}', 'ocms:discovered_frequency_ci_high{metric="$metric"}'} <= exprs


def test_the_estimates_dashboard_shows_numeric_metrics(dashboards):
    """Issue 40: a heatmap of the cumulative CDF gauges (de-accumulated by le) and quantile lines, read through
    the de-duplicated rules."""
    (dash,) = [d for path, d in dashboards if path.name == "ocms-estimates.json"]
    heatmaps = [p for p in _panels_reading([(None, dash)], "ocms:numeric_cdf_ratio") if p["type"] == "heatmap"]
    assert heatmaps and all(t["format"] == "heatmap" and t["legendFormat"] == "{{le}}"
                            for p in heatmaps for t in p["targets"])
    lines = [p for p in _panels_reading([(None, dash)], "ocms:numeric_quantile") if p["type"] == "timeseries"]
    assert lines and {"p{{quantile}}", "p{{quantile}} CI lower", "p{{quantile}} CI upper"} <= {
        t["legendFormat"] for p in lines for t in p["targets"]}
    assert _panels_reading([(None, dash)], "ocms:numeric_mean")
