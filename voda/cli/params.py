"""`--param NAME=VALUE` options: algorithm knobs from the command line.

A value is read as JSON when it parses (numbers, true/false, null, lists),
"none" means None, and a comma-separated list of numbers is a list
("3600,14400"). Anything else stays a string. The algorithm then validates it
(voda.core.allocation.registry.create), naming the knob and the reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


class ParamError(ValueError):
    pass


def parse_value(text: str) -> Any:
    stripped = text.strip()
    if stripped.lower() in ("none", "null"):
        return None
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        pass
    if "," in stripped:
        parts = [p.strip() for p in stripped.split(",")]
        try:
            return [json.loads(p) for p in parts]
        except json.JSONDecodeError:
            return parts
    return stripped


def parse_param_items(items: Iterable[str]) -> dict[str, Any]:
    """NAME=VALUE strings -> {NAME: value}; raises ParamError on a malformed item."""
    params: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ParamError(f"--param {item!r}: expected NAME=VALUE")
        if name in params:
            raise ParamError(f"--param {name}: given twice")
        params[name] = parse_value(value)
    return params
