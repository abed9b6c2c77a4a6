"""deploy/grafana's dashboard and deploy/prometheus's rules as the monitoring tests read
them: the PromQL of every panel and variable, with Grafana's variables replaced."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import promql_parser
import yaml

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "voda-dashboard.json"
RULES = ROOT / "deploy" / "prometheus" / "rules.yaml"
RUNBOOK = ROOT / "docs" / "runbook.md"
# Grafana's variables, replaced by what Grafana puts there when "All" is chosen.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "6h", "$gpu_type": ".*",
                     "$namespace": ".*", "$instance": ".*"}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panel_queries() -> list[str]:
    """Every panel target's expression, as written (Grafana's variables in it)."""
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def variable_queries() -> dict[str, tuple[str, str]]:
    """The query variables: name -> (the selector of label_values(SELECTOR, LABEL), LABEL)."""
    out = {}
    for variable in dashboard()["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            inner = query["query"].removeprefix("label_values(").removesuffix(")")
            selector, label = inner.rsplit(",", 1)
            out[variable["name"]] = (selector.strip(), label.strip())
    return out


def substitute(query: str, variables: Mapping[str, str]) -> str:
    # Longest first: "$__range" must not be taken for a variable "$__r...".
    for name in sorted(variables, key=len, reverse=True):
        query = query.replace(name, variables[name])
    return query


def dashboard_queries(variables: Mapping[str, str] = GRAFANA_VARIABLES) -> list[str]:
    """Every panel's expression and every variable's selector, with `variables` replaced."""
    queries = panel_queries() + [s for s, _ in variable_queries().values()]
    return [substitute(q, variables) for q in queries]


def rules() -> list[dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def rule_queries() -> list[str]:
    return [rule["expr"] for rule in rules()]


def selectors(expr: str) -> list[promql_parser.VectorSelector]:
    """The vector selectors of an expression (parsed, not pattern-matched)."""
    found: list[promql_parser.VectorSelector] = []

    def walk(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)
            return
        for attribute in ("expr", "lhs", "rhs", "vector_selector", "param"):
            child = getattr(node, attribute, None)
            if child is not None:
                walk(child)
        for child in getattr(node, "args", None) or ():
            walk(child)

    walk(promql_parser.parse(expr))
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects."""
    return {s.name for s in selectors(expr)}
