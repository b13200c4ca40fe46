"""PromQL helpers for the deployment artifacts (no Prometheus needed).

* :func:`metric_names` / :func:`selectors`: the series names (and the label
  names they match on) that a PromQL expression reads. A small lexer, not a
  full parser: enough for the expressions in deploy/ (syntax itself is checked
  by promtool in the tests).
* :func:`recording_rules`, :func:`recording_rule_names`, :func:`alert_rules`:
  the rules in deploy/prometheus/rules.
* :func:`dashboard_exprs`: every Grafana panel target expr with its dashboard
  and panel title; :func:`render_grafana_expr` substitutes Grafana variables so
  an expr can be sent to a real Prometheus.
* :func:`live_queries`: everything above as (kind, where, PromQL) triples, for
  a live test against a running Prometheus to query each of them.

``python -m tests.deploy.promql`` prints :func:`live_queries` as JSON.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RULES_DIR = DEPLOY / "prometheus" / "rules"
DASHBOARDS_DIR = DEPLOY / "grafana" / "dashboards"

# ----------------------------------------------------------------------------- lexer

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_COMMENT = re.compile(r"#[^\n]*")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
_AT = re.compile(r"@\s*(?:[0-9.]+|start\s*\(\s*\)|end\s*\(\s*\))")
_TOKEN = re.compile(
    r"(?P<num>(?:\d+(?:ms|[smhdwy]))+(?![A-Za-z0-9_:])|0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)"
)
_MATCHER_LABEL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_SELECTOR = re.compile(r"(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)?\s*\{(?P<body>[^{}]*)\}")
_KEYWORDS = frozenset({
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "and", "or", "unless", "atan2", "offset", "inf", "nan",
})

_GRAFANA_VAR = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)(?::[^\]]*)?\]\]")
_GRAFANA_BUILTIN_DEFAULTS = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__interval_ms": "15000",
    "__range": "1h",
    "__range_s": "3600",
    "__range_ms": "3600000",
    "__scrape_interval": "5s",
}


class PromQLLexError(ValueError):
    pass


def _mask_strings(expr: str) -> str:
    return _STRING.sub('""', expr)


def _prepare(expr: str) -> str:
    """Expression with strings emptied, comments, @ modifiers and Grafana variables removed."""
    text = render_grafana_expr(expr, {}, default="1")
    text = _COMMENT.sub("", _mask_strings(text))
    if "__name__" in text:
        raise PromQLLexError(f"__name__ matchers are not supported by this checker: {expr!r}")
    return _AT.sub("", text)


def selectors(expr: str) -> list[tuple[str, frozenset[str]]]:
    """(series name, label names matched on) for every vector selector of ``expr``."""
    text = _prepare(expr)
    found: list[tuple[str, frozenset[str]]] = []
    for match in _SELECTOR.finditer(text):
        name = match.group("name")
        if not name:
            raise PromQLLexError(f"selector without a metric name in {expr!r}")
        labels = frozenset(_MATCHER_LABEL.findall(match.group("body")))
        found.append((name, labels))
    # Bare names (no braces).
    for name in _bare_names(_SELECTOR.sub(" ", text)):
        found.append((name, frozenset()))
    # A name may appear both ways; keep one entry per (name, labels).
    return sorted(set(found))


def _bare_names(text: str) -> Iterator[str]:
    text = _BRACKETS.sub(" ", text)
    while True:  # label lists can follow each other: on(a) group_left(b)
        new = _LABEL_LIST.sub(" ", text)
        if new == text:
            break
        text = new
    for match in _TOKEN.finditer(text):
        ident = match.group("ident")
        if ident is None:
            continue
        rest = text[match.end():].lstrip()
        if rest.startswith("("):
            continue  # function or aggregation operator
        if ident.lower() in _KEYWORDS:
            continue
        yield ident


def metric_names(expr: str) -> frozenset[str]:
    """Series names ``expr`` reads (functions, keywords, labels, durations excluded)."""
    return frozenset(name for name, _ in selectors(expr))


# ----------------------------------------------------------------------------- rules

def load_yaml(path: Path):
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True).load(Path(path).read_text())


@dataclass(frozen=True)
class Rule:
    kind: str  # record | alert
    name: str
    expr: str
    group: str
    file: str
    raw: Mapping


def _rules(rules_dir: Path = RULES_DIR) -> list[Rule]:
    out: list[Rule] = []
    for path in sorted(Path(rules_dir).glob("*.yml")):
        doc = load_yaml(path) or {}
        for group in doc.get("groups", []):
            for rule in group.get("rules", []):
                kind = "record" if "record" in rule else "alert"
                out.append(Rule(kind, rule[kind], str(rule["expr"]).strip(), group["name"], path.name, rule))
    return out


def recording_rules(rules_dir: Path = RULES_DIR) -> list[Rule]:
    return [r for r in _rules(rules_dir) if r.kind == "record"]


def recording_rule_names(rules_dir: Path = RULES_DIR) -> list[str]:
    return [r.name for r in recording_rules(rules_dir)]


def alert_rules(rules_dir: Path = RULES_DIR) -> list[Rule]:
    return [r for r in _rules(rules_dir) if r.kind == "alert"]


_DEDUP = re.compile(r"^max\s+without\s*\(\s*instance\s*\)\s*\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*\)$")
_BY = re.compile(r"^(?:sum|max|min|avg|count)\s+by\s*\(([^()]*)\)")


def dedup_source(rule: Rule) -> str | None:
    """The raw metric a ``max without (instance) (metric)`` rule de-duplicates, else None."""
    match = _DEDUP.match(" ".join(rule.expr.split()))
    return match.group(1) if match else None


def recorded_labels(rule: Rule, known: Mapping[str, frozenset[str]]) -> frozenset[str]:
    """Label names of a recording rule's output, for the expression shapes used in deploy/.

    ``known``: label names of every series the rule may read. ``max without
    (instance) (m)`` keeps m's labels minus instance; ``agg by (a, b) (...)``
    keeps a and b; any other expression is treated as a label-free aggregate.
    """
    expr = " ".join(rule.expr.split())
    source = dedup_source(rule)
    if source is not None:
        return known.get(source, frozenset()) - {"instance"}
    match = _BY.match(expr)
    if match:
        return frozenset(x.strip() for x in match.group(1).split(",") if x.strip())
    return frozenset()


# ----------------------------------------------------------------------------- grafana

@dataclass(frozen=True)
class PanelExpr:
    dashboard_file: str
    dashboard_uid: str
    dashboard_title: str
    panel_id: int
    panel_title: str
    ref_id: str
    expr: str
    instant: bool
    datasource_uid: str | None

    @property
    def where(self) -> str:
        return f"{self.dashboard_title} / {self.panel_title} / {self.ref_id}"


def iter_panels(dashboard: Mapping) -> Iterator[Mapping]:
    """Every panel of a dashboard, rows' nested panels included (rows too)."""
    for panel in dashboard.get("panels", []):
        yield panel
        for inner in panel.get("panels", []) or []:
            yield inner


def load_dashboards(dashboards_dir: Path = DASHBOARDS_DIR) -> list[tuple[Path, dict]]:
    return [(p, json.loads(p.read_text())) for p in sorted(Path(dashboards_dir).glob("*.json"))]


def dashboard_exprs(dashboards_dir: Path = DASHBOARDS_DIR) -> list[PanelExpr]:
    out: list[PanelExpr] = []
    for path, dash in load_dashboards(dashboards_dir):
        for panel in iter_panels(dash):
            for target in panel.get("targets", []) or []:
                if "expr" not in target:
                    continue
                ds = target.get("datasource") or panel.get("datasource") or {}
                out.append(PanelExpr(
                    path.name, dash.get("uid", ""), dash.get("title", ""), panel.get("id", 0),
                    panel.get("title", ""), target.get("refId", ""), target["expr"],
                    bool(target.get("instant")), ds.get("uid") if isinstance(ds, Mapping) else None,
                ))
    return out


def variable_queries(dashboards_dir: Path = DASHBOARDS_DIR) -> list[tuple[str, str, str]]:
    """(dashboard title, variable name, query) for every query variable."""
    out = []
    for _, dash in load_dashboards(dashboards_dir):
        for var in dash.get("templating", {}).get("list", []):
            if var.get("type") == "query":
                query = var.get("query")
                if isinstance(query, Mapping):
                    query = query.get("query", "")
                out.append((dash.get("title", ""), var["name"], str(query or var.get("definition", ""))))
    return out


_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<selector>.+?)\s*,\s*)?(?P<label>[A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$", re.S)


def parse_label_values(query: str) -> tuple[str | None, str]:
    """``label_values(selector, label)`` -> (selector or None, label)."""
    match = _LABEL_VALUES.match(query)
    if not match:
        raise ValueError(f"not a label_values() query: {query!r}")
    return match.group("selector"), match.group("label")


def grafana_variables(expr: str) -> frozenset[str]:
    """Names of the Grafana variables ``expr`` references (builtins included)."""
    return frozenset(next(g for g in m.groups() if g) for m in _GRAFANA_VAR.finditer(expr))


def render_grafana_expr(expr: str, variables: Mapping[str, str | Sequence[str]], default: str | None = None,
                        builtins: Mapping[str, str] | None = None) -> str:
    """Substitute Grafana variables the way Grafana sends the query to Prometheus.

    A list value becomes a regex alternation ``(a|b)`` (Grafana's multi-value
    format for Prometheus); builtins such as ``$__rate_interval`` get fixed
    defaults. Unknown variables become ``default`` or raise KeyError.
    """
    values = {**_GRAFANA_BUILTIN_DEFAULTS, **(builtins or {})}

    def sub(match: re.Match) -> str:
        name = next(g for g in match.groups() if g)
        if name in variables:
            value = variables[name]
            if isinstance(value, str):
                return value
            items = [re.escape(str(v)) for v in value]
            return items[0] if len(items) == 1 else "(" + "|".join(items) + ")"
        if name in values:
            return values[name]
        if default is not None:
            return default
        raise KeyError(f"Grafana variable ${name} has no value")

    return _GRAFANA_VAR.sub(sub, expr)


# ----------------------------------------------------------------------------- live

def live_queries(variables: Mapping[str, str | Sequence[str]] | None = None,
                 rules_dir: Path = RULES_DIR, dashboards_dir: Path = DASHBOARDS_DIR) -> list[tuple[str, str, str]]:
    """(kind, where, PromQL) for every recording rule name and dashboard expr.

    ``variables``: values for the dashboard variables (e.g. ``{"params":
    "0123456789abcdef", "value": ["0", "1"]}``); missing ones become ``.*``
    (only right for ``=~`` matchers: give every variable a value).
    """
    variables = variables or {}
    out = [("recording_rule", f"{r.file} / {r.group}", r.name) for r in recording_rules(rules_dir)]
    out += [("panel", p.where, render_grafana_expr(p.expr, variables, default=".*"))
            for p in dashboard_exprs(dashboards_dir)]
    return out


def _main(argv: Iterable[str] | None = None) -> int:
    print(json.dumps([{"kind": k, "where": w, "query": q} for k, w, q in live_queries()], indent=2))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main())
