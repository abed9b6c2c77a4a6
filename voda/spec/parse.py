"""From a submitted document (YAML or JSON) to a JobSpec.

Three forms are accepted:

- the Voda compact spec, a flat mapping (kind absent or `VodaJob`):
  name (or generate_name: a prefix to which the service adds five random characters,
  as Kubernetes' generateName), command (a string or a list of arguments) or image,
  gpu_type (or gpu_types: the types it accepts, `any` for every one: voda.spec.gpu_types),
  min, max, preferred, epochs, priority, placement_strategy, preferred_domain,
  profile, category, queue (its team's queue: docs/design/013-queues.md), adaptive (a
  batch-adaptive job: it picks its batch by goodput and reports its goodput model, as a
  Pollux/AdaptDL job does; the emulated cluster runs such jobs) and batch_size (an
  adaptive job's fixed global batch, when it keeps one);
- a Kubeflow MPIJob (kubeflow.org/v2beta1);
- a Kubeflow PyTorchJob (kubeflow.org/v1), elastic through spec.elasticPolicy.

A Kubeflow object's name is metadata.name, or metadata.generateName for a generated one.

Kubeflow objects are validated against their CRD schema; Voda fields come from
`voda.io/*` annotations (the team queue from `voda.io/queue`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from voda.core.goodput_report import MAX_BATCH
from voda.core.model import DEFAULT_GPU_TYPE
from voda.core.placement.manager import STRATEGIES
from voda.spec import crd
from voda.spec.documents import load_document
from voda.spec.errors import FieldError, SpecError, fail
from voda.spec.gpu_types import check_one_way, parse_gpu_types

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NAME_MAX = 40
# A generated name is the prefix and GENERATED_LENGTH random characters (voda.api.job_names).
GENERATED_LENGTH = 5
PREFIX_MAX = NAME_MAX - GENERATED_LENGTH
PREFIX_RE = re.compile(r"^[a-z0-9][-a-z0-9]*$")
TOKEN_RE = re.compile(r"^[A-Za-z0-9]([-_.A-Za-z0-9]*[A-Za-z0-9])?$")
COMPACT_KINDS = ("VodaJob",)
ANNOTATION = "voda.io/"

# Documented maxima (docs/design/004-service.md). Counts are also bounded by the
# cluster at admission; these keep every value inside the store's columns.
MAX_WORKERS = 100_000
MAX_EPOCHS = 1_000_000
MAX_PRIORITY = 1_000_000
TOKEN_MAX = 100  # gpu_type, profile, category (stored with the owner's name)
DOMAIN_MAX = 200
COMMAND_MAX = 65_536
IMAGE_MAX = 1_024


@dataclass(frozen=True, slots=True)
class JobSpec:
    name: str  # empty when the service is to generate it from `generate_name`
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
    # A batch-adaptive job (picks its batch by goodput and reports its goodput model), and
    # the global batch it keeps if it keeps one.
    adaptive: bool = False
    batch_size: int | None = None
    gpu_types: tuple[str, ...] = ()  # the GPU types it accepts (empty: only gpu_type)
    document: dict[str, Any] = field(default_factory=dict)
    # Where each value came from in the document, for errors found later (admission).
    field_names: Mapping[str, str] = field(default_factory=dict)
    # Opt-in generated name: this prefix and GENERATED_LENGTH random characters.
    generate_name: str | None = None
    # The team queue it names (None: its user's default, else by namespace, else default).
    queue: str | None = None

    @property
    def name_field(self) -> str:
        """The field the job's name came from (named by a 409 when it is taken)."""
        if self.generate_name is not None:
            return self.field_names.get("generate_name", "generate_name")
        return self.field_names.get("name", "name")


def parse_submission(body: bytes, media: str = "application/yaml") -> JobSpec:
    """Parse a request body: JSON, or YAML (of which JSON is a subset), checked on the way
    (voda.spec.documents)."""
    return parse_document(load_document(body, media))


def parse_document(document: Any) -> JobSpec:
    if not isinstance(document, dict):
        raise fail("body", f"expected a mapping (a job document), got {type(document).__name__}")
    kind = document.get("kind")
    api_version = document.get("apiVersion")
    for key, value in (("kind", kind), ("apiVersion", api_version)):
        if value is not None and not isinstance(value, str):
            raise fail(key, f"must be a string, got {type(value).__name__}")
    if kind is None or kind in COMPACT_KINDS:
        return _compact(document)
    if (api_version, kind) in crd.KINDS:
        return _kubeflow(document)
    known = ", ".join(sorted({*COMPACT_KINDS, *(f"{k} ({v})" for v, k in crd.KINDS)}))
    raise fail("kind", f"unknown kind {kind!r} with apiVersion {api_version!r}; known: {known}")


# ----- typed field readers ------------------------------------------------------
def _int(value: Any, name: str, errors: list[FieldError], text_ok: bool = False) -> int | None:
    """An integer; a string of digits only where the format has strings (annotations)."""
    if isinstance(value, bool) or not isinstance(value, int):
        if text_ok and isinstance(value, str) and re.fullmatch(r"-?\d{1,12}", value.strip()):
            return int(value)
        if text_ok and isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            errors.append(FieldError(name, f"out of range: {_shown(value)} has more than 12 "
                                     "digits"))
            return None
        errors.append(FieldError(name, f"must be an integer, got {_shown(value)}"))
        return None
    return value


def _str(value: Any, name: str, errors: list[FieldError], limit: int = TOKEN_MAX) -> str | None:
    if not isinstance(value, str) or not value.strip():
        errors.append(FieldError(name, f"must be a non-empty string, got {_shown(value)}"))
        return None
    if len(value.strip()) > limit:
        errors.append(FieldError(name, f"must be at most {limit} characters, got "
                                 f"{len(value.strip())}"))
        return None
    return value.strip()


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _check_name(name: str | None, field_name: str, errors: list[FieldError]) -> None:
    if name is None:
        return
    if len(name) > NAME_MAX or not NAME_RE.match(name):
        errors.append(FieldError(
            field_name,
            f"must be lowercase letters, digits and '-', start and end with a letter or digit, "
            f"at most {NAME_MAX} characters; got {name!r}",
        ))


def _job_name(name: str | None, prefix: str | None, fields: tuple[str, str],
              errors: list[FieldError]) -> None:
    """A job has a name, or a prefix to generate one from (generate_name), not both."""
    name_field, prefix_field = fields
    if name is not None and prefix is not None:
        errors.append(FieldError(prefix_field, f"give {name_field} or {prefix_field}, not "
                                 "both"))
    if prefix is not None and (len(prefix) > PREFIX_MAX or not PREFIX_RE.match(prefix)):
        errors.append(FieldError(prefix_field, f"must be lowercase letters, digits and '-', "
                                 f"start with a letter or digit, at most {PREFIX_MAX} "
                                 f"characters (the service adds {GENERATED_LENGTH}); got "
                                 f"{_shown(prefix)}"))
    _check_name(name, name_field, errors)


def _check_token(value: str | None, field_name: str, errors: list[FieldError],
                 limit: int = TOKEN_MAX) -> None:
    if value is not None and (len(value) > limit or not TOKEN_RE.match(value)):
        errors.append(FieldError(field_name, f"must be a simple identifier (letters, digits, "
                                 f"'-', '_', '.'; at most {limit}), got {_shown(value)}"))


def _check_strategy(value: str | None, field_name: str, errors: list[FieldError]) -> None:
    if value is not None and value not in STRATEGIES:
        errors.append(FieldError(field_name, f"unknown strategy {_shown(value)}; valid: "
                                 f"{', '.join(STRATEGIES)}"))


def _check_sizes(values: dict[str, Any], names: dict[str, str], errors: list[FieldError]) -> None:
    low, high, preferred = values.get("min"), values.get("max"), values.get("preferred")
    for key, limit in (("min", MAX_WORKERS), ("max", MAX_WORKERS), ("preferred", MAX_WORKERS),
                       ("epochs", MAX_EPOCHS), ("priority", MAX_PRIORITY)):
        value = values.get(key)
        if value is not None and value > limit:
            errors.append(FieldError(names[key], f"must be at most {limit:,}, got {value}"))
            values[key] = None
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
_COMPACT_INTS = ("min", "max", "preferred", "epochs", "priority", "batch_size")
_COMPACT_STRS = ("name", "generate_name", "image", "gpu_type", "placement_strategy",
                 "preferred_domain", "profile", "category", "queue")
_COMPACT_FIELDS = frozenset({*_COMPACT_INTS, *_COMPACT_STRS, "command", "kind", "apiVersion",
                             "adaptive", "gpu_types"})
MAX_COMMAND_ARGS = 1000


def _command(value: Any, errors: list[FieldError]) -> str | None:
    """`command:` as one string (split by the shell's rules) or, as Kubernetes writes it, a
    list of arguments; a list is kept as the string that splits back into it."""
    if isinstance(value, str):
        return _str(value, "command", errors, COMMAND_MAX)
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
    if len(joined) > COMMAND_MAX:
        errors.append(FieldError("command", f"must be at most {COMMAND_MAX} characters, got "
                                 f"{len(joined)}"))
        return None
    return joined


def _adaptive(doc: dict[str, Any], batch_size: int | None, errors: list[FieldError]) -> bool:
    """`adaptive: true|false`, and `batch_size` (only with it, 1..MAX_BATCH)."""
    value = doc.get("adaptive", False)
    if not isinstance(value, bool):
        errors.append(FieldError("adaptive", f"must be true or false, got {_shown(value)}"))
        value = False
    if batch_size is not None:
        if not value:
            errors.append(FieldError("batch_size", "only a batch-adaptive job (adaptive: true) "
                                     "takes a batch size here"))
        elif not 1 <= batch_size <= MAX_BATCH:
            errors.append(FieldError("batch_size", f"must lie in [1, {MAX_BATCH:,}], got "
                                     f"{batch_size}"))
    return value


def _compact(doc: dict[str, Any]) -> JobSpec:
    errors: list[FieldError] = []
    for key in sorted(set(doc) - _COMPACT_FIELDS, key=str):
        errors.append(FieldError(str(key), f"unknown field; known fields: "
                                 f"{', '.join(sorted(_COMPACT_FIELDS - {'kind', 'apiVersion'}))}"))
    ints = {k: _int(doc[k], k, errors) for k in _COMPACT_INTS if doc.get(k) is not None}
    limits = {"name": NAME_MAX + 1, "generate_name": PREFIX_MAX + 1, "image": IMAGE_MAX,
              "preferred_domain": DOMAIN_MAX}
    strs = {k: _str(doc[k], k, errors, limits.get(k, TOKEN_MAX)) for k in _COMPACT_STRS
            if doc.get(k) is not None}
    if doc.get("command") is not None:
        strs["command"] = _command(doc["command"], errors)
    if "name" not in doc and "generate_name" not in doc:
        errors.append(FieldError("name", "required (or generate_name, a prefix for a "
                                 "generated name)"))
    _job_name(strs.get("name"), strs.get("generate_name"), ("name", "generate_name"), errors)
    if not strs.get("command") and not strs.get("image") and not {"command", "image"} & set(doc):
        errors.append(FieldError("command", "a job needs a command or an image"))
    if "min" in ints and "max" not in doc:
        ints["max"] = ints["min"]
    ints.setdefault("min", 1)
    ints.setdefault("max", max(1, ints["min"] or 1))
    _check_sizes(ints, {k: k for k in _COMPACT_INTS}, errors)
    for key in ("gpu_type", "profile", "category", "queue"):
        _check_token(strs.get(key), key, errors)
    _check_token(strs.get("preferred_domain"), "preferred_domain", errors, DOMAIN_MAX)
    _check_strategy(strs.get("placement_strategy"), "placement_strategy", errors)
    adaptive = _adaptive(doc, ints.get("batch_size"), errors)
    gpu_types = (parse_gpu_types(doc["gpu_types"], "gpu_types", errors)
                 if doc.get("gpu_types") is not None else ())
    check_one_way(strs.get("gpu_type"), gpu_types, "gpu_types", errors)
    if errors:
        raise SpecError(errors)
    name = str(strs.get("name") or "")
    prefix = strs.get("generate_name")
    return JobSpec(
        name=name,
        generate_name=prefix,
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
        category=strs.get("category") or strs.get("profile") or name or _stem(prefix),
        adaptive=adaptive,
        batch_size=ints.get("batch_size"),
        gpu_types=gpu_types,
        document=doc,
        field_names={k: k for k in (*_COMPACT_INTS, *_COMPACT_STRS, "adaptive", "gpu_types")},
        queue=strs.get("queue"),
    )


# ----- kubeflow ---------------------------------------------------------------------
_ANNOTATED_INTS = {"min-workers": "min", "max-workers": "max", "preferred-workers": "preferred",
                   "epochs": "epochs", "priority": "priority"}
_ANNOTATED_STRS = {"gpu-type": "gpu_type", "placement-strategy": "placement_strategy",
                   "preferred-domain": "preferred_domain", "profile": "profile",
                   "category": "category", "queue": "queue"}


def _kubeflow(doc: dict[str, Any]) -> JobSpec:
    kind = str(doc["kind"])
    problems = crd.schema_errors(doc)
    if problems:
        raise SpecError(problems)
    errors: list[FieldError] = []
    metadata = doc.get("metadata") or {}
    name = prefix = None
    if metadata.get("name") is not None or metadata.get("generateName") is None:
        name = _str(metadata.get("name"), "metadata.name", errors)
    if metadata.get("generateName") is not None:
        prefix = _str(metadata.get("generateName"), "metadata.generateName", errors,
                      PREFIX_MAX + 1)
    _job_name(name, prefix, ("metadata.name", "metadata.generateName"), errors)
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
    replicas = _int(worker.get("replicas", 1), f"spec.{replicas_key}.{worker_key}.replicas",
                    errors)
    slots = 1
    if kind == "MPIJob" and spec.get("slotsPerWorker") is not None:
        given = _int(spec["slotsPerWorker"], "spec.slotsPerWorker", errors)
        slots = 1 if given is None else given
        if slots < 1:
            errors.append(FieldError("spec.slotsPerWorker", f"must be at least 1, got {slots}"))
            slots = 1
    if replicas is None:
        raise SpecError(errors)
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
    low: int | None = replicas * slots
    high: int | None = replicas * slots
    elastic = spec.get("elasticPolicy") or {}
    if elastic.get("minReplicas") is not None:
        low = _int(elastic["minReplicas"], "spec.elasticPolicy.minReplicas", errors)
    if elastic.get("maxReplicas") is not None:
        high = _int(elastic["maxReplicas"], "spec.elasticPolicy.maxReplicas", errors)
    values: dict[str, Any] = {"min": low, "max": high}
    replicas_label = f"spec.{replicas_key}.{worker_key}.replicas"
    names = {
        "min": "spec.elasticPolicy.minReplicas" if "minReplicas" in elastic else replicas_label,
        "max": "spec.elasticPolicy.maxReplicas" if "maxReplicas" in elastic else replicas_label,
    }
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, dict):
        raise fail("metadata.annotations", "must be a mapping of strings")
    strs: dict[str, str | None] = {}
    for suffix, key in _ANNOTATED_INTS.items():
        label = f"metadata.annotations.{ANNOTATION}{suffix}"
        names.setdefault(key, label)
        if f"{ANNOTATION}{suffix}" in annotations:
            names[key] = label
            values[key] = _int(annotations[f"{ANNOTATION}{suffix}"], label, errors,
                               text_ok=True)
    for suffix, key in _ANNOTATED_STRS.items():
        label = f"metadata.annotations.{ANNOTATION}{suffix}"
        names[key] = label
        if f"{ANNOTATION}{suffix}" in annotations:
            limit = DOMAIN_MAX if key == "preferred_domain" else TOKEN_MAX
            strs[key] = _str(annotations[f"{ANNOTATION}{suffix}"], label, errors, limit)
            if key == "placement_strategy":
                _check_strategy(strs[key], label, errors)
            else:
                _check_token(strs[key], label, errors, limit)
    types_label = f"metadata.annotations.{ANNOTATION}gpu-types"
    gpu_types = (parse_gpu_types(annotations[f"{ANNOTATION}gpu-types"], types_label, errors)
                 if f"{ANNOTATION}gpu-types" in annotations else ())
    check_one_way(strs.get("gpu_type"), gpu_types, types_label, errors)
    names["gpu_types"] = types_label
    if command is not None and len(command) > COMMAND_MAX:
        errors.append(FieldError(f"spec.{replicas_key}.{worker_key}.template.spec."
                                 "containers[0].command", f"longer than {COMMAND_MAX}"))
    if isinstance(image, str) and len(image) > IMAGE_MAX:
        errors.append(FieldError(f"spec.{replicas_key}.{worker_key}.template.spec."
                                 "containers[0].image", f"longer than {IMAGE_MAX}"))
    if all(v is not None for v in (values.get("min"), values.get("max"))):
        _check_sizes(values, names, errors)
    if errors:
        raise SpecError(errors)
    spec_name = str(name or "")
    return JobSpec(
        name=spec_name,
        generate_name=prefix,
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
        category=strs.get("category") or strs.get("profile") or spec_name or _stem(prefix),
        gpu_types=gpu_types,
        document=doc,
        field_names={**names, "name": "metadata.name",
                     "generate_name": "metadata.generateName"},
        queue=strs.get("queue"),
    )


def _stem(prefix: str | None) -> str:
    """A generated name's prefix without its trailing '-' (the default category)."""
    return (prefix or "").rstrip("-") or "job"


def _first_container(replica_spec: dict[str, Any]) -> dict[str, Any]:
    containers = ((replica_spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return containers[0] if containers else {}
