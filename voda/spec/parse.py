"""From a submitted document (YAML or JSON) to a JobSpec.

Three forms are accepted:

- the Voda compact spec, a flat mapping (kind absent or `VodaJob`):
  name, command (a string or a list of arguments) or image, gpu_type, min, max,
  preferred, epochs, priority, placement_strategy, preferred_domain, profile, category;
- a Kubeflow MPIJob (kubeflow.org/v2beta1);
- a Kubeflow PyTorchJob (kubeflow.org/v1), elastic through spec.elasticPolicy.

Kubeflow objects are validated against their CRD schema; Voda fields come from
`voda.io/*` annotations.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

import yaml

from voda.core.model import DEFAULT_GPU_TYPE
from voda.spec import crd
from voda.spec.errors import FieldError, SpecError, fail

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NAME_MAX = 40
TOKEN_RE = re.compile(r"^[A-Za-z0-9]([-_.A-Za-z0-9]*[A-Za-z0-9])?$")
COMPACT_KINDS = ("VodaJob",)
ANNOTATION = "voda.io/"


@dataclass(frozen=True, slots=True)
class JobSpec:
    name: str
    kind: str  # VodaJob, MPIJob, PyTorchJob
    min_workers: int = 1
    max_workers: int = 1
    preferred_workers: int | None = None
    epochs: int = 1
    priority: int = 0
    gpu_type: str = DEFAULT_GPU_TYPE
    command: str | None = None
    image: str | None = None
    placement_strategy: str = "consolidated"
    preferred_domain: str | None = None
    profile: str | None = None
    category: str = ""
    document: dict[str, Any] = field(default_factory=dict)


def parse_submission(body: bytes) -> JobSpec:
    """Parse a request body (YAML, of which JSON is a subset)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise fail("body", "not UTF-8 text") from None
    if not text.strip():
        raise fail("body", "empty; expected a YAML or JSON job document")
    try:
        document = json.loads(text)
    except ValueError:
        try:
            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            document = yaml.load(text, Loader=loader)
        except yaml.YAMLError as exc:
            raise fail("body", f"not valid YAML or JSON: {_first_line(exc)}") from None
    return parse_document(document)


def _first_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200]


def parse_document(document: Any) -> JobSpec:
    if not isinstance(document, dict):
        raise fail("body", f"expected a mapping (a job document), got {type(document).__name__}")
    kind = document.get("kind")
    if kind is None or kind in COMPACT_KINDS:
        return _compact(document)
    api_version = document.get("apiVersion")
    if (api_version, kind) in crd.KINDS:
        return _kubeflow(document)
    known = ", ".join(sorted({*COMPACT_KINDS, *(f"{k} ({v})" for v, k in crd.KINDS)}))
    raise fail("kind", f"unknown kind {kind!r} with apiVersion {api_version!r}; known: {known}")


# ----- typed field readers ------------------------------------------------------
def _int(value: Any, name: str, errors: list[FieldError]) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            return int(value)
        errors.append(FieldError(name, f"must be an integer, got {value!r}"))
        return None
    return value


def _str(value: Any, name: str, errors: list[FieldError]) -> str | None:
    if not isinstance(value, str) or not value.strip():
        errors.append(FieldError(name, f"must be a non-empty string, got {value!r}"))
        return None
    return value.strip()


def _check_name(name: str | None, field_name: str, errors: list[FieldError]) -> None:
    if name is None:
        return
    if len(name) > NAME_MAX or not NAME_RE.match(name):
        errors.append(FieldError(
            field_name,
            f"must be lowercase letters, digits and '-', start and end with a letter or digit, "
            f"at most {NAME_MAX} characters; got {name!r}",
        ))


def _check_token(value: str | None, field_name: str, errors: list[FieldError]) -> None:
    if value is not None and (len(value) > 100 or not TOKEN_RE.match(value)):
        errors.append(FieldError(field_name, f"must be a simple identifier, got {value!r}"))


def _check_sizes(values: dict[str, Any], names: dict[str, str], errors: list[FieldError]) -> None:
    low, high, preferred = values.get("min"), values.get("max"), values.get("preferred")
    if low is not None and low < 1:
        errors.append(FieldError(names["min"], f"must be at least 1, got {low}"))
    if high is not None and low is not None and high < low:
        errors.append(FieldError(names["max"], f"must be at least min ({low}), got {high}"))
    if preferred is not None and low is not None and high is not None and not (
        low <= preferred <= high
    ):
        errors.append(FieldError(names["preferred"],
                                 f"must lie in [min, max] = [{low}, {high}], got {preferred}"))
    epochs = values.get("epochs")
    if epochs is not None and epochs < 1:
        errors.append(FieldError(names["epochs"], f"must be at least 1, got {epochs}"))
    priority = values.get("priority")
    if priority is not None and priority < 0:
        errors.append(FieldError(names["priority"],
                                 f"must not be negative (0 is highest), got {priority}"))


# ----- compact --------------------------------------------------------------------
_COMPACT_INTS = ("min", "max", "preferred", "epochs", "priority")
_COMPACT_STRS = ("name", "image", "gpu_type", "placement_strategy",
                 "preferred_domain", "profile", "category")
_COMPACT_FIELDS = frozenset({*_COMPACT_INTS, *_COMPACT_STRS, "command", "kind", "apiVersion"})
MAX_COMMAND_ARGS = 1000
MAX_COMMAND_CHARS = 64 * 1024


def _command(value: Any, errors: list[FieldError]) -> str | None:
    """`command:` as one string (split by the shell's rules) or, as Kubernetes writes it, a
    list of arguments; a list is kept as the string that splits back into it."""
    if isinstance(value, str):
        return _str(value, "command", errors)
    if not isinstance(value, list) or not value:
        errors.append(FieldError("command", f"must be a non-empty string or a non-empty list "
                                 f"of strings, got {value!r}"[:300]))
        return None
    if len(value) > MAX_COMMAND_ARGS:
        errors.append(FieldError("command", f"at most {MAX_COMMAND_ARGS} arguments, got "
                                 f"{len(value)}"))
        return None
    bad = [i for i, part in enumerate(value) if not isinstance(part, str)]
    for i in bad[:5]:
        errors.append(FieldError(f"command[{i}]", f"must be a string, got {value[i]!r}"[:300]))
    if bad:
        return None
    if not value[0].strip():
        errors.append(FieldError("command[0]", "the program must not be empty"))
        return None
    joined = shlex.join(value)
    if len(joined) > MAX_COMMAND_CHARS:
        errors.append(FieldError("command", f"longer than {MAX_COMMAND_CHARS} characters"))
        return None
    return joined


def _compact(doc: dict[str, Any]) -> JobSpec:
    errors: list[FieldError] = []
    for key in sorted(set(doc) - _COMPACT_FIELDS, key=str):
        errors.append(FieldError(str(key), f"unknown field; known fields: "
                                 f"{', '.join(sorted(_COMPACT_FIELDS - {'kind', 'apiVersion'}))}"))
    ints = {k: _int(doc[k], k, errors) for k in _COMPACT_INTS if doc.get(k) is not None}
    strs = {k: _str(doc[k], k, errors) for k in _COMPACT_STRS if doc.get(k) is not None}
    if doc.get("command") is not None:
        strs["command"] = _command(doc["command"], errors)
    if "name" not in doc:
        errors.append(FieldError("name", "required"))
    _check_name(strs.get("name"), "name", errors)
    if not strs.get("command") and not strs.get("image") and not {"command", "image"} & set(doc):
        errors.append(FieldError("command", "a job needs a command or an image"))
    if "min" in ints and "max" not in doc:
        ints["max"] = ints["min"]
    ints.setdefault("min", 1)
    ints.setdefault("max", max(1, ints["min"] or 1))
    _check_sizes(ints, {k: k for k in _COMPACT_INTS}, errors)
    for key in ("gpu_type", "profile", "placement_strategy"):
        _check_token(strs.get(key), key, errors)
    if errors:
        raise SpecError(errors)
    name = str(strs["name"])
    return JobSpec(
        name=name,
        kind="VodaJob",
        min_workers=int(ints["min"]),
        max_workers=int(ints["max"]),
        preferred_workers=ints.get("preferred"),
        epochs=int(ints.get("epochs") or 1),
        priority=int(ints.get("priority") or 0),
        gpu_type=strs.get("gpu_type") or DEFAULT_GPU_TYPE,
        command=strs.get("command"),
        image=strs.get("image"),
        placement_strategy=strs.get("placement_strategy") or "consolidated",
        preferred_domain=strs.get("preferred_domain"),
        profile=strs.get("profile"),
        category=strs.get("category") or strs.get("profile") or name,
        document=doc,
    )


# ----- kubeflow ---------------------------------------------------------------------
_ANNOTATED_INTS = {"min-workers": "min", "max-workers": "max", "preferred-workers": "preferred",
                   "epochs": "epochs", "priority": "priority"}
_ANNOTATED_STRS = {"gpu-type": "gpu_type", "placement-strategy": "placement_strategy",
                   "preferred-domain": "preferred_domain", "profile": "profile",
                   "category": "category"}


def _kubeflow(doc: dict[str, Any]) -> JobSpec:
    kind = str(doc["kind"])
    problems = crd.schema_errors(doc)
    if problems:
        raise SpecError(problems)
    errors: list[FieldError] = []
    metadata = doc.get("metadata") or {}
    name = _str(metadata.get("name"), "metadata.name", errors)
    _check_name(name, "metadata.name", errors)
    spec = doc.get("spec") or {}
    if kind == "MPIJob":
        replicas_key, worker_key = "mpiReplicaSpecs", "Worker"
    else:
        replicas_key, worker_key = "pytorchReplicaSpecs", "Worker"
    replica_specs = spec.get(replicas_key) or {}
    worker = replica_specs.get(worker_key)
    if worker is None and kind == "PyTorchJob":
        worker = replica_specs.get("Master")
    if worker is None:
        raise fail(f"spec.{replicas_key}.{worker_key}", "required: the job has no workers")
    replicas = worker.get("replicas", 1)
    slots = int(spec.get("slotsPerWorker", 1) or 1) if kind == "MPIJob" else 1
    container = _first_container(worker)
    image = container.get("image")
    if kind == "MPIJob" and not container.get("command"):  # mpirun runs in the launcher
        container = {**container, **{k: v for k, v in _first_container(
            replica_specs.get("Launcher") or {}).items() if k in ("command", "args")}}
    command_parts = [*(container.get("command") or []), *(container.get("args") or [])]
    command = " ".join(str(p) for p in command_parts) or None
    if not image and not command:
        errors.append(FieldError(f"spec.{replicas_key}.{worker_key}.template.spec.containers[0]",
                                 "a job needs a command or an image"))
    low, high = replicas * slots, replicas * slots
    elastic = spec.get("elasticPolicy") or {}
    if elastic.get("minReplicas") is not None:
        low = int(elastic["minReplicas"])
    if elastic.get("maxReplicas") is not None:
        high = int(elastic["maxReplicas"])
    values: dict[str, Any] = {"min": low, "max": high}
    replicas_label = f"spec.{replicas_key}.{worker_key}.replicas"
    names = {
        "min": "spec.elasticPolicy.minReplicas" if "minReplicas" in elastic else replicas_label,
        "max": "spec.elasticPolicy.maxReplicas" if "maxReplicas" in elastic else replicas_label,
    }
    annotations = metadata.get("annotations") or {}
    strs: dict[str, str | None] = {}
    for suffix, key in _ANNOTATED_INTS.items():
        label = f"metadata.annotations.{ANNOTATION}{suffix}"
        names.setdefault(key, label)
        if f"{ANNOTATION}{suffix}" in annotations:
            names[key] = label
            values[key] = _int(annotations[f"{ANNOTATION}{suffix}"], label, errors)
    for suffix, key in _ANNOTATED_STRS.items():
        if f"{ANNOTATION}{suffix}" in annotations:
            label = f"metadata.annotations.{ANNOTATION}{suffix}"
            strs[key] = _str(annotations[f"{ANNOTATION}{suffix}"], label, errors)
            if key in ("gpu_type", "profile", "placement_strategy"):
                _check_token(strs[key], label, errors)
    if all(v is not None for v in (values.get("min"), values.get("max"))):
        _check_sizes(values, names, errors)
    if errors:
        raise SpecError(errors)
    spec_name = str(name)
    return JobSpec(
        name=spec_name,
        kind=kind,
        min_workers=int(values["min"]),
        max_workers=int(values["max"]),
        preferred_workers=values.get("preferred"),
        epochs=int(values.get("epochs") or 1),
        priority=int(values.get("priority") or 0),
        gpu_type=strs.get("gpu_type") or DEFAULT_GPU_TYPE,
        command=command,
        image=image,
        placement_strategy=strs.get("placement_strategy") or "consolidated",
        preferred_domain=strs.get("preferred_domain"),
        profile=strs.get("profile"),
        category=strs.get("category") or strs.get("profile") or spec_name,
        document=doc,
    )


def _first_container(replica_spec: dict[str, Any]) -> dict[str, Any]:
    containers = ((replica_spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return containers[0] if containers else {}
