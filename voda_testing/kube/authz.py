"""Authentication and RBAC authorization for the fake API server, as kube-apiserver does them.

A request carries `Authorization: Bearer TOKEN`; the token names a user (and its groups).
No token, or an unknown one, is answered 401. An authenticated request to a resource is
allowed when a Role or ClusterRole bound to the user (RoleBinding in the request's
namespace, or ClusterRoleBinding) has a rule matching its API group, resource (with
subresource, as `pods/binding` or `*/scale`), verb and, where the rule lists
resourceNames, its object's name; else 403 with kube-apiserver's message. The roles and
bindings are the store's own objects, read on every request, so a test may change them.
Members of `system:masters` are allowed everything; every authenticated user may read the
discovery documents (the `system:discovery` ClusterRole a real cluster binds)."""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from voda_testing.kube.errors import ApiError
from voda_testing.kube.store import Store

RBAC = "rbac.authorization.k8s.io"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
RBAC_KINDS = {"Role": "roles", "ClusterRole": "clusterroles", "RoleBinding": "rolebindings",
              "ClusterRoleBinding": "clusterrolebindings"}
# Loaded with them: where they apply, who they bind, and the objects named in resourceNames.
CORE_KINDS = {"ServiceAccount": "serviceaccounts", "Namespace": "namespaces",
              "Endpoints": "endpoints"}
CLUSTER_KINDS = {"ClusterRole", "ClusterRoleBinding", "Namespace"}


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Attributes:
    """What the authorizer checks of one request (k8s.io/apiserver authorizer.Attributes)."""

    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def combined(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def service_account_user(namespace: str, name: str) -> User:
    return User(f"system:serviceaccount:{namespace}:{name}",
                ("system:serviceaccounts", f"system:serviceaccounts:{namespace}"))


def request_attributes(method: str, group: str, rest: list[str], query: Mapping[str, str]
                       ) -> Attributes:
    """The attributes of a resource request, from its path after /api/v1 or /apis/G/V.
    A list or watch of one object by a `metadata.name` field selector names it."""
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:  # as k8s.io/apiserver's RequestInfo
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in ("status", "finalize"):
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if query.get("watch") in ("1", "true", "True"):
        verb = "watch"
    elif method == "GET":
        verb = "get" if name else "list"
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())
    if not name and verb in ("list", "watch"):
        selector = query.get("fieldSelector") or ""
        if selector.startswith("metadata.name=") and "," not in selector:
            name = selector.removeprefix("metadata.name=")
    return Attributes(verb, group, resource, sub, namespace, name)


def rule_allows(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    """rbac/v1 RuleAllows: verbs, API groups, resources (`*`, `res/sub`, `*/sub`) and
    resourceNames (a rule with names never matches a request without one)."""
    verbs = rule.get("verbs") or ()
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    groups = rule.get("apiGroups") or ()
    if "*" not in groups and attrs.group not in groups:
        return False
    resources = rule.get("resources") or ()
    if not any(r == "*" or r == attrs.combined
               or (attrs.subresource and r == f"*/{attrs.subresource}") for r in resources):
        return False
    names = rule.get("resourceNames") or ()
    return not names or attrs.name in names


def _applies(subject: Mapping[str, Any], user: User, binding_namespace: str) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        return bool(subject.get("name") == user.name)
    if kind == "Group":
        return subject.get("name") in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return bool(namespace) and user.name == (
            f"system:serviceaccount:{namespace}:{subject.get('name')}")
    return False


def forbidden(user: User, attrs: Attributes) -> ApiError:
    """kube-apiserver's 403 (responsewriters.Forbidden)."""
    where = (f"in the namespace {_q(attrs.namespace)}" if attrs.namespace
             else "at the cluster scope")
    reason = (f"User {_q(user.name)} cannot {attrs.verb} resource {_q(attrs.combined)} "
              f"in API group {_q(attrs.group)} {where}")
    shown = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
    subject = f"{shown} {_q(attrs.name)}" if attrs.name else shown
    return ApiError(403, f"{subject} is forbidden: {reason}", details={
        "name": attrs.name, "group": attrs.group, "kind": attrs.resource} if attrs.name else {
        "group": attrs.group, "kind": attrs.resource})


def _q(text: str) -> str:
    """Go's %q for the plain strings that appear here."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


UNAUTHORIZED = ApiError(401, "Unauthorized", reason="Unauthorized")


@dataclass
class Authorizer:
    """Bearer tokens -> users, and RBAC over the roles and bindings in `store`."""

    store: Store
    tokens: dict[str, User] = field(default_factory=dict)

    def add_token(self, user: User, token: str | None = None) -> str:
        token = token or secrets.token_urlsafe(24)
        self.tokens[token] = user
        return token

    def admin_token(self) -> str:
        return self.add_token(User("kubernetes-admin", (MASTERS,)))

    def service_account_token(self, namespace: str, name: str) -> str:
        return self.add_token(service_account_user(namespace, name))

    def authenticate(self, header: str) -> User:
        scheme, _, token = header.partition(" ")
        user = self.tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise UNAUTHORIZED
        return User(user.name, (*user.groups, AUTHENTICATED))

    def authorize(self, user: User, attrs: Attributes) -> None:
        """Raises the 403 unless some bound rule allows `attrs`."""
        if MASTERS in user.groups or any(rule_allows(rule, attrs)
                                         for rule in self.rules_for(user, attrs.namespace)):
            return
        raise forbidden(user, attrs)

    def rules_for(self, user: User, namespace: str) -> list[Mapping[str, Any]]:
        rules: list[Mapping[str, Any]] = []
        for binding in self._objects(f"clusterrolebindings.{RBAC}", None):
            if any(_applies(s, user, "") for s in binding.get("subjects") or ()):
                rules.extend(self._role_rules(binding["roleRef"], ""))
        if namespace:
            for binding in self._objects(f"rolebindings.{RBAC}", namespace):
                if any(_applies(s, user, namespace) for s in binding.get("subjects") or ()):
                    rules.extend(self._role_rules(binding["roleRef"], namespace))
        return rules

    def _objects(self, what: str, namespace: str | None) -> list[Any]:
        try:
            return self.store.list(what, namespace)[0]
        except ApiError:  # a store made without the RBAC kinds: nothing is bound
            return []

    def _role_rules(self, ref: Mapping[str, Any], namespace: str) -> list[Mapping[str, Any]]:
        cluster = ref.get("kind") == "ClusterRole"
        try:
            role = self.store.try_get(f"{'clusterroles' if cluster else 'roles'}.{RBAC}",
                                      "" if cluster else namespace, str(ref.get("name")))
        except ApiError:
            return []
        return list((role or {}).get("rules") or ())

    def can(self, user: User, verb: str, group: str, resource: str, namespace: str = "",
            name: str = "", subresource: str = "") -> bool:
        try:
            self.authorize(user, Attributes(verb, group, resource, subresource, namespace, name))
        except ApiError:
            return False
        return True


def query_of(query_string: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(query_string).items()}


def load_rbac(store: Store, documents: Iterable[Mapping[str, Any]],
              namespaces: Mapping[str, str] | None = None) -> list[str]:
    """Create the Namespaces, ServiceAccounts, Roles, ClusterRoles, their bindings and the
    Endpoints among `documents` (e.g. `kubectl kustomize deploy/`) in `store`;
    `namespaces` renames namespaces on the way (e.g. the jobs namespace to a test's).
    Returns what it created, as 'Kind/[namespace/]name'. Existing objects are replaced."""
    import copy

    rename = dict(namespaces or {})
    created = []
    for source in documents:
        kind = str(source.get("kind"))
        if kind not in RBAC_KINDS and kind not in CORE_KINDS:
            continue
        doc = copy.deepcopy(dict(source))
        meta = doc.setdefault("metadata", {})
        if kind == "Namespace":
            meta["name"] = rename.get(meta["name"], meta["name"])
        namespace = rename.get(meta.get("namespace", ""), meta.get("namespace", ""))
        meta.pop("namespace", None)
        for subject in doc.get("subjects") or ():
            if subject.get("namespace"):
                subject["namespace"] = rename.get(subject["namespace"], subject["namespace"])
        what = f"{RBAC_KINDS[kind]}.{RBAC}" if kind in RBAC_KINDS else CORE_KINDS[kind]
        namespaced = kind not in CLUSTER_KINDS
        ns = namespace if namespaced else ""
        if namespaced and ns and store.try_get("namespaces", "", ns) is None:
            store.create("namespaces", "", {"metadata": {"name": ns}})
        existing = store.try_get(what, ns, meta["name"])
        if existing is None:
            store.create(what, ns, doc)
        elif kind != "Namespace":
            doc["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            store.update(what, ns, meta["name"], doc)
        created.append(f"{kind}/{ns + '/' if ns else ''}{meta['name']}")
    return created
