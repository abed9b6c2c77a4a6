"""The objects Voda creates: a submitted document, rendered for the cluster.

Rendering keeps what the user wrote and adds what Voda needs: the size and the
elastic range, one GPU per worker, the `voda.io/placement` scheduling gate on the
worker template, the labels that tie pods to their job, and the worker index ->
node plan as an annotation. A Voda compact spec with an image becomes an elastic
PyTorchJob (container `pytorch`, its command under torchrun). What the operators would
refuse (operator_rules) is refused here, at submission. `voda render` prints exactly
what `start` would create.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import shlex
from pathlib import Path
from typing import Any

from voda.backends.kubernetes.adapters import Sizes, adapter_for
from voda.backends.kubernetes.isolation import REPORT_SECRET_SUFFIX, isolation_errors
from voda.backends.kubernetes.operator_rules import PYTORCH_CONTAINER
from voda.backends.kubernetes.pinning import Plan, encode
from voda.backends.kubernetes.settings import (
    GATE,
    JOB_LABEL,
    MANAGED_LABEL,
    MANAGER,
    PLAN_ANNOTATION,
    KubernetesSettings,
)
from voda.spec import crd
from voda.spec.errors import FieldError, SpecError

RUN_ANNOTATION = "voda.io/run"
JOB_ANNOTATION = "voda.io/job-name"
NAME_LIMIT = 45  # pods are named <object>-worker-<i> and their hostnames must fit 63
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
                 "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "ownerReferences")

Obj = dict[str, Any]


def object_name(job: str) -> str:
    """The cluster name of a Voda job: the job name when short enough, else a prefix and
    a hash (pod hostnames `<name>-worker-<i>` must stay within 63 characters)."""
    if len(job) <= NAME_LIMIT:
        return job
    digest = hashlib.sha1(job.encode()).hexdigest()[:8]
    return f"{job[:NAME_LIMIT - 9].rstrip('-')}-{digest}"


def torchrun_command(command: str) -> list[str]:
    """The compact spec's command under torchrun (which reads the PET_* rendezvous the
    training operator sets): `python [-m] x ...` runs x under torchrun, a command that is
    already torchrun stays, anything else runs with `torchrun --no-python`."""
    parts = shlex.split(command)
    if not parts or parts[0] == "torchrun" or parts[1:3] == ["-m", "torch.distributed.run"]:
        return parts
    if Path(parts[0]).name.startswith("python") and len(parts) > 1:
        rest = parts[1:]
        if rest[0] == "-m" and len(rest) > 1:
            return ["torchrun", "--module", *rest[1:]]
        return ["torchrun", *rest]
    return ["torchrun", "--no-python", *parts]


def compact_to_pytorchjob(document: Obj) -> Obj:
    """A Voda compact spec as an elastic PyTorchJob running its image and command under
    torchrun, in the container the training operator requires (`pytorch`)."""
    if not document.get("image"):
        raise SpecError([FieldError("image", "required on the Kubernetes backend: the "
                                    "container image the workers run")])
    container: Obj = {"name": PYTORCH_CONTAINER, "image": str(document["image"])}
    if document.get("command"):
        container["command"] = torchrun_command(str(document["command"]))
    annotations = {f"voda.io/{key.replace('_', '-')}": str(document[key])
                   for key in ("epochs", "priority", "gpu_type", "placement_strategy",
                               "preferred_domain", "profile", "category")
                   if document.get(key) is not None}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": str(document.get("name", "job")), "annotations": annotations},
            "spec": {"elasticPolicy": {"rdzvBackend": "c10d"},
                     "pytorchReplicaSpecs": {"Worker": {"replicas": 1,
                                                        "restartPolicy": "OnFailure",
                                                        "template": {"spec": {
                                                            "containers": [container]}}}}}}


def kubeflow_document(document: Obj) -> Obj:
    if document.get("kind") in (None, "VodaJob"):
        return compact_to_pytorchjob(document)
    return document


def render_job(document: Obj, job: str, sizes: Sizes, plan: Plan, run: str,
               settings: KubernetesSettings, validate: bool = True,
               report: bool = False) -> Obj:
    """The job object for the cluster; raises SpecError naming the field at fault.
    `report`: with the report channel's env (settings.report_url must be set)."""
    source = kubeflow_document(document)
    adapter = adapter_for(str(source.get("kind")), settings.gpu_resource,
                          settings.horovod_blacklist_cooldown)
    problems = adapter.check(source, sizes) + isolation_errors(
        source, settings.service_accounts, settings.secrets)
    if problems:
        raise SpecError(problems)
    obj = adapter.render(source, sizes, worker_labels={JOB_LABEL: job}, gates=[{"name": GATE}])
    obj.pop("status", None)
    meta = obj.setdefault("metadata", {})
    for key in SERVER_FIELDS:
        meta.pop(key, None)
    meta.pop("generateName", None)  # Voda generated the name already (the job's uid)
    meta["name"] = object_name(job)
    meta["namespace"] = settings.namespace
    meta["labels"] = {**(meta.get("labels") or {}), JOB_LABEL: job, MANAGED_LABEL: MANAGER}
    meta["annotations"] = {**(meta.get("annotations") or {}), PLAN_ANNOTATION: encode(plan),
                           RUN_ANNOTATION: run, JOB_ANNOTATION: job}
    if report and settings.report_url:
        add_report_env(obj, adapter.replicas_key, job, settings.report_url)
    errors = (crd.schema_errors(obj) + adapter.operator_errors(obj, sizes)) if validate else []
    if errors:
        raise SpecError(errors)
    return obj


def check_document(document: Obj, min_workers: int, max_workers: int,
                   settings: KubernetesSettings, job: str = "check") -> None:
    """Refuse at submission what could never be created or what the operator would
    refuse (raises SpecError)."""
    render_job(copy.deepcopy(document), job, Sizes(min_workers, min_workers, max_workers),
               {}, "0", settings, report=True)


# ----- the report channel ------------------------------------------------------------------
REPORT_SECRET_KEY = "token"


def report_secret_name(job: str) -> str:
    return f"{object_name(job)}{REPORT_SECRET_SUFFIX}"


def report_secret(job: str, token: str, settings: KubernetesSettings,
                  owner: Obj | None = None) -> Obj:
    """The Secret holding a job's report token; owned by the job's object once it exists
    (so the garbage collector deletes it with the object)."""
    meta: Obj = {"name": report_secret_name(job), "namespace": settings.namespace,
                 "labels": {JOB_LABEL: job, MANAGED_LABEL: MANAGER},
                 "annotations": {JOB_ANNOTATION: job}}
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(owner)]
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque",
            "data": {REPORT_SECRET_KEY: base64.b64encode(token.encode()).decode()}}


def owner_reference(obj: Obj) -> Obj:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"],
            "uid": meta["uid"]}


def secret_token(secret: Obj) -> str | None:
    value = (secret.get("data") or {}).get(REPORT_SECRET_KEY)
    try:
        return base64.b64decode(str(value), validate=True).decode() if value else None
    except ValueError:
        return None


def add_report_env(obj: Obj, replicas_key: str, job: str, report_url: str) -> None:
    """Give every container of every replica of `obj` (under spec.`replicas_key`) the report
    channel: VODA_REPORT (the service's URL), VODA_JOB and VODA_TOKEN from the job's Secret.
    A variable the user set is kept as it is."""
    from voda.training.report import JOB_ENV, REPORT_ENV, TOKEN_ENV

    ours = [{"name": REPORT_ENV, "value": report_url}, {"name": JOB_ENV, "value": job},
            {"name": TOKEN_ENV, "valueFrom": {"secretKeyRef": {
                "name": report_secret_name(job), "key": REPORT_SECRET_KEY}}}]
    for replica in ((obj.get("spec") or {}).get(replicas_key) or {}).values():
        pod = ((replica or {}).get("template") or {}).get("spec") or {}
        for container in pod.get("containers") or ():
            env = container.setdefault("env", [])
            if not isinstance(env, list):
                continue  # the schema check names the field
            names = {entry.get("name") for entry in env if isinstance(entry, dict)}
            env.extend(copy.deepcopy(e) for e in ours if e["name"] not in names)
