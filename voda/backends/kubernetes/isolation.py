"""What a job may not take from Voda: a training job's pods must not run as one of Voda's
ServiceAccounts nor read any of its Secrets (its database URL, its API tokens, another
job's report token). A submitted document naming one is refused, each field named.

The jobs also run in their own namespace (KubernetesSettings.namespace), apart from
Voda's (voda_namespace), so a name that slipped through would still find nothing there;
this check is the second fence, and the one that speaks to the submitter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from voda.spec.errors import FieldError

REPORT_SECRET_SUFFIX = "-voda-report"  # each job's report Secret: <object name><suffix>
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
Obj = dict[str, Any]


def _templates(document: Obj) -> Iterator[tuple[str, Obj]]:
    spec = document.get("spec") if isinstance(document.get("spec"), dict) else {}
    for key in ("mpiReplicaSpecs", "pytorchReplicaSpecs"):
        replicas = (spec or {}).get(key)
        if not isinstance(replicas, dict):
            continue
        for role, replica in replicas.items():
            template = (replica or {}).get("template") if isinstance(replica, dict) else None
            pod = (template or {}).get("spec") if isinstance(template, dict) else None
            if isinstance(pod, dict):
                yield f"spec.{key}.{role}.template.spec", pod


def _items(value: Any) -> Iterator[tuple[int, Obj]]:
    for i, item in enumerate(value if isinstance(value, list) else ()):
        if isinstance(item, dict):
            yield i, item


def _secret_refs(pod: Obj) -> Iterator[tuple[str, Any]]:
    """(field under the pod spec, Secret name) of every reference to a Secret."""
    for i, volume in _items(pod.get("volumes")):
        secret = volume.get("secret")
        if isinstance(secret, dict):
            yield f"volumes[{i}].secret.secretName", secret.get("secretName")
        sources = (volume.get("projected") or {}).get("sources") if isinstance(
            volume.get("projected"), dict) else None
        for j, source in _items(sources):
            if isinstance(source.get("secret"), dict):
                yield (f"volumes[{i}].projected.sources[{j}].secret.name",
                       source["secret"].get("name"))
    for i, ref in _items(pod.get("imagePullSecrets")):
        yield f"imagePullSecrets[{i}].name", ref.get("name")
    for where in CONTAINER_LISTS:
        for i, container in _items(pod.get(where)):
            for j, source in _items(container.get("envFrom")):
                if isinstance(source.get("secretRef"), dict):
                    yield f"{where}[{i}].envFrom[{j}].secretRef.name", source[
                        "secretRef"].get("name")
            for j, variable in _items(container.get("env")):
                ref = (variable.get("valueFrom") or {}).get("secretKeyRef") if isinstance(
                    variable.get("valueFrom"), dict) else None
                if isinstance(ref, dict):
                    yield f"{where}[{i}].env[{j}].valueFrom.secretKeyRef.name", ref.get("name")


def isolation_errors(document: Obj, service_accounts: tuple[str, ...],
                     secrets: tuple[str, ...]) -> list[FieldError]:
    """Fields of `document` (an MPIJob or PyTorchJob) that name one of `service_accounts`
    or refer to one of `secrets` or to any job's report Secret."""
    errors = []
    for base, pod in _templates(document):
        for key in ("serviceAccountName", "serviceAccount"):
            if pod.get(key) in service_accounts:
                errors.append(FieldError(f"{base}.{key}", f"{pod[key]!r} is Voda's own "
                                         "ServiceAccount; a job's pods may not run as it"))
        for field, name in _secret_refs(pod):
            if name in secrets or (isinstance(name, str)
                                   and name.endswith(REPORT_SECRET_SUFFIX)):
                errors.append(FieldError(f"{base}.{field}", f"{name!r} is one of Voda's "
                                         "Secrets; a job may not refer to it"))
    return errors
