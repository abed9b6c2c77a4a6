"""Front-end files shared by the dashboard (voda serve, /ui) and the simulation report.

Templates (Jinja2) under templates/, static files under static/ (our CSS and chart
code, and the vendored htmx and uPlot with their licences, see static/vendor/README.md).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

WEB_DIR = Path(__file__).resolve().parent
STATIC_DIR = WEB_DIR / "static"
TEMPLATES_DIR = WEB_DIR / "templates"


@cache
def environment():  # type: ignore[no-untyped-def]  # jinja2 is imported on first use
    """The Jinja2 environment of both front ends (autoescaped HTML)."""
    import jinja2

    from voda.web import filters

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
                             autoescape=jinja2.select_autoescape(default=True),
                             trim_blocks=True, lstrip_blocks=True)
    env.filters.update(filters.FILTERS)
    return env


def static_text(relative: str) -> str:
    """A static file's text, to inline it in a self-contained page."""
    path = (STATIC_DIR / relative).resolve()
    if STATIC_DIR not in path.parents:
        raise ValueError(f"not a static file: {relative!r}")
    return path.read_text(encoding="utf-8")
