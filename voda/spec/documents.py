"""A request body (JSON or YAML) read into a plain JSON document, whatever its sender tried.

Before any parser builds a value:
- the nesting depth is measured without recursion (JSON: the brackets outside strings;
  YAML: libyaml's event stream, which is a state machine) and refused past MAX_DEPTH,
  because the parsers recurse (libyaml's composer in C overflows the thread's stack;
  Python's json raises RecursionError);
- YAML aliases are refused (a few hundred bytes of nested aliases expand to gigabytes).

While building it: duplicate keys, non-string keys, non-finite numbers and integers longer
than MAX_INT_DIGITS are refused. After: only JSON types, and no string holding NUL or a
lone surrogate (neither can be stored in PostgreSQL). Every error names a field.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from itertools import accumulate
from typing import Any

import yaml

from voda.spec.errors import FieldError, SpecError, fail

MAX_DEPTH = 64
MAX_NODES = 100_000  # scalars, sequences and mappings in one document
MAX_INT_DIGITS = 30

JSON_TYPES = frozenset({"application/json"})
YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})

_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(rb"[^\[\]{}]+")
_DEPTH_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def media_type(content_type: str | None) -> str:
    """'application/json; charset=utf-8' -> 'application/json' ('' when absent)."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def is_json(media: str) -> bool:
    return media in JSON_TYPES or (media.startswith("application/") and media.endswith("+json"))


def is_yaml(media: str) -> bool:
    return media in YAML_TYPES


# ----- depth, before parsing -----------------------------------------------------------
def json_depth(body: bytes) -> int:
    """The deepest bracket nesting of a JSON text, strings left out (no recursion)."""
    brackets = _BRACKETS.sub(b"", _JSON_STRING.sub(b"", body))
    if not brackets:
        return 0
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)))


def check_yaml_events(text: str) -> None:
    """Refuse YAML nested deeper than MAX_DEPTH, with aliases, or with too many nodes."""
    depth = nodes = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.AliasEvent):
                raise fail("body", f"YAML aliases (*{event.anchor}) are not accepted")
            if isinstance(event, yaml.NodeEvent):
                nodes += 1
                if nodes > MAX_NODES:
                    raise fail("body", f"more than {MAX_NODES} values in one document")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise fail("body", f"nested deeper than {MAX_DEPTH} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError as exc:
        raise fail("body", f"not valid YAML: {_first_line(exc)}") from None


# ----- parsing ---------------------------------------------------------------------------
class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe YAML as JSON sees it: dates stay strings, mappings refuse duplicate keys."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: object, line: int) -> None:
        self.key, self.line = key, line
        super().__init__(f"duplicate key {key!r} (line {line})")


def _mapping(loader: Any, node: yaml.MappingNode) -> dict[str, Any]:
    loader.flatten_mapping(node)
    result: dict[str, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if not isinstance(key, str):
            raise SpecError([FieldError(str(key)[:100], f"keys must be strings (line {line})")])
        if key in result:
            raise _DuplicateKey(key, line)
        result[key] = loader.construct_object(value_node, deep=True)
    return result


class _TooLong:
    """An integer literal of more than MAX_INT_DIGITS digits, kept unconverted (a huge
    int costs time to convert) until check_values names the field that holds it."""

    def __init__(self, text: str) -> None:
        self.digits = len(text.lstrip("+-"))
        self.negative = text.startswith("-")

    def reason(self) -> str:
        sign = "-" if self.negative else ""
        return (f"out of range: {sign}10^{self.digits - 1} or beyond (an integer of "
                f"{self.digits} digits; no field takes more than {MAX_INT_DIGITS})")


def _int(loader: Any, node: yaml.ScalarNode) -> int | _TooLong:
    if len(node.value) > MAX_INT_DIGITS:
        return _TooLong(node.value)
    return int(yaml.SafeLoader.construct_yaml_int(loader, node))


_Loader.add_constructor("tag:yaml.org,2002:map", _mapping)
_Loader.add_constructor("tag:yaml.org,2002:int", _int)


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise SpecError([FieldError(key, "duplicate key")])
        result[key] = value
    return result


def _json_int(text: str) -> int | _TooLong:
    if len(text) > MAX_INT_DIGITS:
        return _TooLong(text)
    return int(text)


def _json_constant(name: str) -> float:
    raise fail("body", f"{name} is not a number JSON allows")


def load_document(body: bytes, media: str) -> Any:
    """Parse `body` as JSON or YAML (by media type) into a checked JSON document."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise fail("body", "not UTF-8 text") from None
    if not text.strip():
        raise fail("body", "empty; expected a JSON or YAML document")
    if is_json(media):
        if json_depth(body) > MAX_DEPTH:
            raise fail("body", f"nested deeper than {MAX_DEPTH} levels")
        try:
            document = json.loads(text, object_pairs_hook=_json_pairs, parse_int=_json_int,
                                  parse_constant=_json_constant)
        except ValueError as exc:
            if isinstance(exc, SpecError):
                raise
            raise fail("body", f"not valid JSON: {_first_line(exc)}") from None
    elif is_yaml(media):
        check_yaml_events(text)
        try:
            document = yaml.load(text, Loader=_Loader)
        except _DuplicateKey as exc:
            raise SpecError([FieldError(str(exc.key), f"duplicate key (line {exc.line})")]) \
                from None
        except yaml.YAMLError as exc:
            raise fail("body", f"not valid YAML: {_first_line(exc)}") from None
        except ValueError as exc:
            if isinstance(exc, SpecError):
                raise
            raise fail("body", f"not valid YAML: {_first_line(exc)}") from None
    else:
        raise fail("Content-Type", f"expected JSON or YAML, got {media or 'none'!r}", 415)
    check_values(document)
    return document


# ----- after parsing ---------------------------------------------------------------------
def _walk(document: Any) -> Iterator[tuple[str, Any]]:
    """(path, value) of every value, iteratively (depth is bounded, but no recursion)."""
    stack: list[tuple[str, Any]] = [("", document)]
    while stack:
        path, value = stack.pop()
        yield path, value
        if isinstance(value, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(value))


def check_values(document: Any) -> None:
    """Only JSON types; finite numbers; strings storable anywhere (no NUL, valid UTF-8)."""
    errors: list[FieldError] = []
    for path, value in _walk(document):
        where = path or "body"
        if isinstance(value, str):
            reason = _bad_string(value)
            if reason:
                errors.append(FieldError(where, reason))
        elif isinstance(value, _TooLong):
            errors.append(FieldError(where, value.reason()))
        elif isinstance(value, float):
            if not math.isfinite(value):
                errors.append(FieldError(where, f"must be a finite number, got {value}"))
        elif isinstance(value, dict):
            for key in value:
                reason = _bad_string(key) if isinstance(key, str) else "keys must be strings"
                if reason:
                    errors.append(FieldError(where, f"key {str(key)[:40]!r}: {reason}"))
        elif not (value is None or isinstance(value, bool | int | list)):
            errors.append(FieldError(where, f"only JSON values are accepted, got "
                                     f"{type(value).__name__}"))
        if len(errors) >= 5:
            break
    if errors:
        raise SpecError(errors)


def _bad_string(value: str) -> str | None:
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode text (no lone surrogates)"
    return None


def _first_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200]


def canonical_json(document: Any) -> bytes:
    """One byte string per parsed document: keys sorted, no whitespace. Two bodies that
    parse to the same document (keys reordered, other spacing, YAML for JSON) give the
    same bytes."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode()
