"""Formatting helpers of the templates: durations, ages, percentages, charts in words."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any


def duration(seconds: float | None) -> str:
    """`42s`, `3m05s`, `2h07m`, `3d04h`; `-` for unknown."""
    if seconds is None:
        return "-"
    s = int(max(0.0, seconds))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 172800:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def age(t: float | None, now: float | None = None) -> str:
    if t is None:
        return "-"
    return duration((time.time() if now is None else now) - t)


def clock(t: float | None) -> str:
    """Local wall-clock time of an epoch timestamp."""
    if t is None:
        return "-"
    return time.strftime("%H:%M:%S", time.localtime(t))


def until(t: float | None, now: float | None = None) -> str:
    """A forecast instant from now: 'now', 'in 1h05m', '-' when none."""
    if t is None:
        return "-"
    seconds = t - (time.time() if now is None else now)
    return "now" if seconds <= 0 else f"in {duration(seconds)}"


def percent(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def gpu_hours(gpu_seconds: float | None) -> str:
    if gpu_seconds is None:
        return "-"
    hours = gpu_seconds / 3600
    return f"{hours:.2f}" if hours < 10 else f"{hours:,.0f}"


CHART_ROWS = 200  # rows of a chart's data table at most (the latest ones)


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def chart_text(spec: dict[str, Any]) -> dict[str, Any]:
    """What a chart (a spec of voda/web/static/charts.js) says in words, for those who do
    not see it: its name, a one-sentence summary, and its data as a table (columns, rows;
    the latest CHART_ROWS rows, `dropped` the rows left out)."""
    x, y = spec.get("x") or {}, spec.get("y") or {}
    name = spec.get("title") or "chart"
    series = [s for s in spec.get("series", []) if any(v is not None for v in s["values"])]
    xs = spec.get("xs", [])
    labels = x.get("labels")

    def x_text(value: Any) -> str:
        if labels is not None:
            return str(labels[value]) if isinstance(value, int) and value < len(labels) else ""
        return clock(value) if x.get("time") else _number(value)

    x_name = x.get("label") or ("time" if x.get("time") else "x")
    if not series:
        summary = f"{name}: no data yet."
    elif spec.get("kind") == "bars":
        parts = [f"{x_text(xv)}: {_number(v)}" for xv, v in zip(xs, series[0]["values"],
                                                                  strict=False) if v]
        summary = (f"{name}, {series[0]['label']} by {x_name}: "
                   f"{'; '.join(parts) or 'none'}.")
    else:
        parts = []
        for s in series:
            values = [v for v in s["values"] if v is not None]
            shown = [xv for xv, v in zip(xs, s["values"], strict=False) if v is not None]
            span = (f"from {_number(min(values))} to {_number(max(values))}"
                    if len(values) > 1 else f"{_number(values[0])}")
            parts.append(f"{s['label']} {span} ({len(values)} "
                         f"{'point' if len(values) == 1 else 'points'}, {x_name} "
                         f"{x_text(shown[0])} to {x_text(shown[-1])})")
        summary = f"{name}, {y.get('label') or 'value'} by {x_name}: {'; '.join(parts)}."
    rows = [[x_text(xv), *(_number(s["values"][i]) for s in series)]
            for i, xv in enumerate(xs)
            if any(s["values"][i] is not None for s in series)]
    return {"name": name, "summary": summary,
            "columns": [x_name, *(s["label"] for s in series)],
            "rows": rows[-CHART_ROWS:], "dropped": max(0, len(rows) - CHART_ROWS)}


def to_json(value: Any) -> str:
    """JSON safe inside a <script> element (no `</` can close it), marked safe for Jinja."""
    from markupsafe import Markup

    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return Markup(text.replace("</", "<\\/").replace("<!--", "<\\u0021--"))


def json_attr(value: Any) -> str:
    """JSON for an HTML attribute: a plain string, so the autoescaping quotes it. Chart specs
    travel this way because htmx drops <script> elements from what it swaps in (the
    dashboard's pages allow no script but the vendored files)."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


FILTERS: dict[str, Callable[..., str]] = {
    "duration": duration, "age": age, "clock": clock, "until": until, "percent": percent,
    "gpu_hours": gpu_hours, "chart_text": chart_text, "to_json": to_json,
    "json_attr": json_attr,
}
