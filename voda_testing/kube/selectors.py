"""Label and field selectors, parsed as the real server parses them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from voda_testing.kube.errors import ApiError

Matcher = Callable[[dict[str, Any]], bool]

_SET_RE = re.compile(r"^\s*(!?)([A-Za-z0-9._/-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_OP_RE = re.compile(r"^\s*([A-Za-z0-9._/-]+)\s*(==|=|!=)\s*([A-Za-z0-9._-]*)\s*$")
_EXISTS_RE = re.compile(r"^\s*(!?)([A-Za-z0-9._/-]+)\s*$")


def _split(selector: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, current = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current)
    return parts


def label_matcher(selector: str | None) -> Matcher | None:
    if not selector:
        return None
    tests: list[Callable[[Mapping[str, str]], bool]] = []
    for part in _split(selector):
        if m := _SET_RE.match(part):
            negated, key, op, values = m.groups()
            if negated:
                raise ApiError(400, f"unable to parse requirement: {part!r}")
            allowed = {v.strip() for v in values.split(",") if v.strip()}
            if op == "in":
                tests.append(lambda lb, k=key, a=allowed: lb.get(k) in a)
            else:
                tests.append(lambda lb, k=key, a=allowed: lb.get(k) not in a)
        elif m := _OP_RE.match(part):
            key, op, value = m.groups()
            if op == "!=":
                tests.append(lambda lb, k=key, v=value: lb.get(k) != v)
            else:
                tests.append(lambda lb, k=key, v=value: k in lb and lb[k] == v)
        elif m := _EXISTS_RE.match(part):
            negated, key = m.groups()
            if negated:
                tests.append(lambda lb, k=key: k not in lb)
            else:
                tests.append(lambda lb, k=key: k in lb)
        else:
            raise ApiError(400, f"unable to parse requirement: {part!r}")

    def match(obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(t(labels) for t in tests)

    return match


def field_value(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_matcher(selector: str | None, allowed: frozenset[str]) -> Matcher | None:
    if not selector:
        return None
    tests: list[tuple[str, bool, str]] = []
    for part in _split(selector):
        m = _OP_RE.match(part)
        if not m:
            raise ApiError(400, f"invalid field selector: {part!r}")
        path, op, value = m.groups()
        if path not in allowed and path not in ("metadata.name", "metadata.namespace"):
            raise ApiError(400, f'field label not supported: "{path}"')
        tests.append((path, op != "!=", value))
    # each field read once per object, however many requirements name it
    by_path: dict[str, list[tuple[bool, str]]] = {}
    for path, eq, value in tests:
        by_path.setdefault(path, []).append((eq, value))
    checks = [(tuple(path.split(".")), wanted) for path, wanted in by_path.items()]

    def match(obj: dict[str, Any]) -> bool:
        for parts, wanted in checks:
            found = _value_at(obj, parts)
            for eq, value in wanted:
                if (found == value) != eq:
                    return False
        return True

    return match


def _value_at(obj: dict[str, Any], parts: tuple[str, ...]) -> str:
    value: Any = obj
    for part in parts:
        value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
