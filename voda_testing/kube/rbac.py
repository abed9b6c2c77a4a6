"""Requests to the fake API server as RBAC sees them, and whether roles grant them: for
tests that hold a component's RBAC to exactly the requests it makes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qs

from voda_testing.kube.authz import Attributes as AuthzAttributes
from voda_testing.kube.authz import query_of, request_attributes
from voda_testing.kube.server import Request

# (API group, resource or resource/subresource, verb, object name, namespaced)
Attributes = tuple[str, str, str, str | None, bool]


def attributes(request: Request) -> Attributes:
    """What an authorizer checks of a request. A list or watch of one object by a
    `metadata.name` field selector names it, as the real authorizer does."""
    parts = request.path.strip("/").split("/")
    group = "" if parts[0] == "api" else parts[1]
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    namespaced = rest[0] == "namespaces"
    if namespaced:
        rest = rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    name = rest[1] if len(rest) > 1 else None
    selector = parse_qs(request.query).get("fieldSelector", [""])[0]
    if name is None and selector.startswith("metadata.name="):
        name = selector.removeprefix("metadata.name=")
    return group, resource, request.verb, name, namespaced


def made_by(requests: Iterable[Request], user_agent: str) -> list[Attributes]:
    return [attributes(r) for r in requests if user_agent in r.user_agent]


def granted(rules: Iterable[Mapping[str, Any]], group: str, resource: str, verb: str,
            name: str | None) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
               and ("resourceNames" not in r or name in r["resourceNames"]) for r in rules)


def unused(rules: Iterable[Mapping[str, Any]], requests: Iterable[Attributes]) -> list[str]:
    """Grants of `rules` that no request used, as 'group/resource verb'."""
    used = {(g, r, v) for g, r, v, _, _ in requests}
    return [f"{group}/{resource} {verb}" for rule in rules for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]
            if (group, resource, verb) not in used]


# ----- with namespaces and users (the server's own authorizer's view) -------------------
def seen(requests: Iterable[Request], user: str) -> list[AuthzAttributes]:
    """What the authorizer checked of each request `user` sent (allowed ones: a refused
    request is not recorded)."""
    out = []
    for r in requests:
        if r.user != user:
            continue
        parts = r.path.strip("/").split("/")
        group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
        out.append(request_attributes(r.method, group, rest, query_of(r.query)))
    return out


def grants(rules: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str, str | None]]:
    """Each (group, resource, verb, name or None) a list of rules grants."""
    return [(group, resource, verb, name) for rule in rules for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]
            for name in (rule.get("resourceNames") or [None])]


def unused_in(rules: Iterable[Mapping[str, Any]], requests: Iterable[AuthzAttributes],
              namespace: str | None = None) -> list[str]:
    """Grants of `rules` (bound in `namespace`; None: cluster-wide) that no request used,
    as 'group/resource verb [name]'; a grant for a name is used only by a request for it."""
    used = {(a.group, a.combined, a.verb, a.name) for a in requests
            if namespace is None or a.namespace == namespace}
    used_any = {(g, r, v) for g, r, v, _ in used}
    out = []
    for group, resource, verb, name in grants(rules):
        hit = (group, resource, verb, name) in used if name else (
            (group, resource, verb) in used_any)
        if not hit:
            out.append(f"{group}/{resource} {verb}" + (f" {name}" if name else ""))
    return out
