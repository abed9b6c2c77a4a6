"""What the operators would refuse, checked before Voda creates anything.

A job the operator refuses never runs: the training operator's PyTorchJob webhook
(release-1.9) denies the create; mpi-operator (v0.8) accepts the object, then only
records a `ValidationError` Event and creates no pod, so the job would wait forever.
Voda refuses both at submission, naming the field and the operator's reason.
"""

from __future__ import annotations

import re
from typing import Any

from voda.spec.errors import FieldError

Obj = dict[str, Any]
PYTORCH_CONTAINER = "pytorch"
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1035_REASON = ("a DNS-1035 label must consist of lower case alphanumeric characters or "
                  "'-', start with an alphabetic character, and end with an alphanumeric "
                  "character, at most 63 characters")
RESTART_POLICIES = ("Never", "OnFailure")


def dns1035_label(value: str) -> bool:
    return len(value) <= 63 and DNS1035.match(value) is not None


def _containers(replica: Obj) -> list[Obj]:
    return list((((replica or {}).get("template") or {}).get("spec") or {}).get(
        "containers") or [])


def mpijob_errors(obj: Obj, max_workers: int) -> list[FieldError]:
    """mpi-operator v0.8's ValidateMPIJob, for an MPIJob that may grow to `max_workers`."""
    name = str(obj["metadata"]["name"])
    spec = obj.get("spec") or {}
    specs = spec.get("mpiReplicaSpecs") or {}
    errors = []
    host = f"{name}-worker-{max(max_workers, 1) - 1}"
    if not dns1035_label(host):
        errors.append(FieldError("metadata.name", f"mpi-operator names worker pods and their "
                                 f"hostnames {host!r}, which must be {DNS1035_REASON}"))
    if "Launcher" not in specs:
        errors.append(FieldError("spec.mpiReplicaSpecs.Launcher",
                                 "required: mpi-operator must have a Launcher replica spec"))
    for role in ("Launcher", "Worker"):
        replica = specs.get(role)
        if replica is None:
            continue
        policy = replica.get("restartPolicy")
        if policy is not None and policy not in RESTART_POLICIES:
            errors.append(FieldError(f"spec.mpiReplicaSpecs.{role}.restartPolicy",
                                     f"mpi-operator supports {' and '.join(RESTART_POLICIES)}"
                                     f", not {policy!r}"))
        if not _containers(replica):
            errors.append(FieldError(f"spec.mpiReplicaSpecs.{role}.template.spec.containers",
                                     "mpi-operator must have at least one container"))
    launcher = specs.get("Launcher") or {}
    if launcher.get("replicas") not in (None, 1):
        errors.append(FieldError("spec.mpiReplicaSpecs.Launcher.replicas", "must be 1"))
    clean = (spec.get("runPolicy") or {}).get("cleanPodPolicy")
    if clean not in (None, "None", "Running", "All"):
        errors.append(FieldError("spec.runPolicy.cleanPodPolicy",
                                 f"mpi-operator supports None, Running and All, not {clean!r}"))
    return errors


def pytorchjob_errors(obj: Obj) -> list[FieldError]:
    """The training operator's PyTorchJob webhook (release-1.9)."""
    name = str(obj["metadata"]["name"])
    spec = obj.get("spec") or {}
    specs = spec.get("pytorchReplicaSpecs") or {}
    errors = []
    if not dns1035_label(name):
        errors.append(FieldError("metadata.name", f"the training operator's webhook refuses "
                                 f"{name!r}: the name must be {DNS1035_REASON}"))
    for role, replica in specs.items():
        field = f"spec.pytorchReplicaSpecs.{role}"
        if role not in ("Master", "Worker"):
            errors.append(FieldError(field, "the training operator supports the replica "
                                     "types Master and Worker only"))
        containers = _containers(replica)
        if not any(c.get("name") == PYTORCH_CONTAINER for c in containers):
            errors.append(FieldError(f"{field}.template.spec.containers",
                                     "the training operator's webhook requires a container "
                                     f"named {PYTORCH_CONTAINER!r} (it runs torchrun and "
                                     "carries the rendezvous port)"))
        for i, container in enumerate(containers):
            if not container.get("image"):
                errors.append(FieldError(f"{field}.template.spec.containers[{i}].image",
                                         "required"))
    elastic = spec.get("elasticPolicy") or {}
    if elastic.get("nProcPerNode") is not None and spec.get("nprocPerNode") is not None:
        errors.append(FieldError("spec.elasticPolicy.nProcPerNode",
                                 "must not be used with spec.nprocPerNode"))
    return errors
