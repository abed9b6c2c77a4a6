"""Formatting helpers of the templates: durations, ages, percentages, job colours."""

from __future__ import annotations

import hashlib
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


JOB_HUES = 36  # colour classes hue-0 .. hue-35 in voda.css, 10 degrees apart


def job_hue(name: str) -> str:
    """A stable colour class per job name (a CSS class, as the pages' Content-Security-
    Policy allows no inline style)."""
    digest = hashlib.blake2s(name.encode(), digest_size=4).digest()
    return f"hue-{int.from_bytes(digest, 'big') % JOB_HUES}"


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
    "gpu_hours": gpu_hours, "job_hue": job_hue, "to_json": to_json,
    "json_attr": json_attr,
}
