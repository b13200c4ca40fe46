"""The PromQL lexer and the query lists exported for a later live test."""

from __future__ import annotations

import pytest

from tests.deploy import promql


@pytest.mark.parametrize("expr, names", [
    ("up", {"up"}),
    ('up{job="ocms-worker"} == 0', {"up"}),
    ("sum by (le) (rate(ocms_decode_duration_seconds_bucket[5m]))", {"ocms_decode_duration_seconds_bucket"}),
    ("histogram_quantile(0.99, sum(rate(a_bucket[1h30m])) by (le))", {"a_bucket"}),
    ("time() - ocms:last_processed_timestamp_seconds:max > 300", {"ocms:last_processed_timestamp_seconds:max"}),
    ('a / on(x) group_left(y, z) b offset 5m', {"a", "b"}),
    ('a and ignoring(instance) b unless c or d', {"a", "b", "c", "d"}),
    ('sum(x{a="}{ b", c!~"d|e"}[5m:30s]) @ 1700000000', {"x"}),
    ("topk(5, m) * -Inf + NaN + 1e3 + 0x1F", {"m"}),
    ("count(up == 1) or vector(0)", {"up"}),
    ("rate(x[$__rate_interval])", {"x"}),
    ('ocms:estimate_ratio{params="$params", value=~"${value:regex}"}', {"ocms:estimate_ratio"}),
    ("sum(rate(ocms_reports_accepted_total[1m])) # comment with fake_metric", {"ocms_reports_accepted_total"}),
])
def test_metric_names(expr, names):
    assert promql.metric_names(expr) == names


def test_selector_labels():
    assert promql.selectors('x{a="1", b=~"2"} / ignoring(c) y') == [("x", frozenset({"a", "b"})), ("y", frozenset())]


def test_name_matchers_are_refused():
    with pytest.raises(promql.PromQLLexError):
        promql.metric_names('{__name__="ocms_x"}')


def test_render_grafana_expr():
    expr = 'rate(x{p="$params", v=~"$value"}[$__rate_interval])'
    assert promql.render_grafana_expr(expr, {"params": "ab", "value": ["1", "2"]}) == 'rate(x{p="ab", v=~"(1|2)"}[1m])'
    assert promql.render_grafana_expr(expr, {"params": "ab", "value": ["1"]}) == 'rate(x{p="ab", v=~"1"}[1m])'
    with pytest.raises(KeyError):
        promql.render_grafana_expr(expr, {})
    assert promql.grafana_variables(expr) == {"params", "value", "__rate_interval"}


def test_parse_label_values():
    assert promql.parse_label_values("label_values(ocms:params_info, params)") == ("ocms:params_info", "params")
    assert promql.parse_label_values('label_values(m{a="1, 2"}, value)') == ('m{a="1, 2"}', "value")
    with pytest.raises(ValueError):
        promql.parse_label_values("query_result(up)")


def test_live_queries_cover_every_rule_and_panel():
    queries = promql.live_queries({"params": "0123456789abcdef", "value": ["0", "1"]})
    rules = [q for kind, _, q in queries if kind == "recording_rule"]
    panels = [(w, q) for kind, w, q in queries if kind == "panel"]
    assert rules == promql.recording_rule_names() and len(rules) == len(set(rules))
    assert len(panels) == len(promql.dashboard_exprs())
    assert all("$" not in q for _, q in panels), "every Grafana variable is substituted"
    assert any(w.startswith("OCMS estimates / ") for w, _ in panels)
    assert any(w.startswith("OCMS pipeline / ") for w, _ in panels)


def test_main_prints_json(capsys):
    import json

    assert promql._main() == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"kind", "where", "query"} == set(doc[0])
