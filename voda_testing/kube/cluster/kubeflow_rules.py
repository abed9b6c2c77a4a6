"""What the Kubeflow operators refuse and default, in their own words.

- training operator release-1.9: the PyTorchJob validating webhook
  (`validator.pytorchjob.training-operator.kubeflow.org`, on create and update): a
  DNS-1035 job name, replica types Master and Worker only, in each replica at least one
  container and one named `pytorch`, every container with an image, a Master of exactly
  1 replica, Workers of at least 1, a Worker when `elasticPolicy` is set, and not both
  `elasticPolicy.nProcPerNode` and `nprocPerNode`. A denial is a 403 whose message
  is the API server's `admission webhook "..." denied the request: ...`.
- mpi-operator v0.8.2 validates in its controller, not in a webhook: it defaults a copy
  (worker restartPolicy Never, launcher OnFailure and 1 replica, workers 0 replicas,
  slotsPerWorker 1, cleanPodPolicy None, sshAuthMountPath /root/.ssh, OpenMPI) and, when
  the copy breaks a rule, records a Warning Event `ValidationError` ("Found validation
  errors: ...") and creates nothing.

Messages are formatted as apimachinery's field.ErrorList aggregate formats them.
"""

from __future__ import annotations

import copy
import re
from typing import Any

Obj = dict[str, Any]
PYTORCH_WEBHOOK = "validator.pytorchjob.training-operator.kubeflow.org"
PYTORCH_CONTAINER = "pytorch"
PYTORCH_PORT_NAME = "pytorchjob-port"
PYTORCH_DEFAULT_PORT = 23456
DNS1035_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1035_MESSAGE = ("a DNS-1035 label must consist of lower case alphanumeric characters or "
                   "'-', start with an alphabetic character, and end with an alphanumeric "
                   "character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
                   "'[a-z]([-a-z0-9]*[a-z0-9])?')")


def dns1035_errors(value: str) -> list[str]:
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not DNS1035_RE.match(value):
        out.append(DNS1035_MESSAGE)
    return out


def _value(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


def invalid(path: str, value: Any, detail: str) -> str:
    return f"{path}: Invalid value: {_value(value)}: {detail}"


def required(path: str, detail: str) -> str:
    return f"{path}: Required value: {detail}"


def forbidden(path: str, detail: str) -> str:
    return f"{path}: Forbidden: {detail}"


def not_supported(path: str, value: Any, supported: list[str]) -> str:
    return (f"{path}: Unsupported value: {_value(value)}: supported values: "
            + ", ".join(f'"{s}"' for s in supported))


def aggregate(errors: list[str]) -> str:
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


# ----- the training operator's PyTorchJob webhook -------------------------------------------
def pytorchjob_errors(job: Obj) -> list[str]:
    meta, spec = job.get("metadata") or {}, job.get("spec") or {}
    errors = []
    name = str(meta.get("name") or "")
    if problems := dns1035_errors(name):
        errors.append(invalid("metadata.name", name, "should match: " + ",".join(problems)))
    specs_path = "spec.pytorchReplicaSpecs"
    specs = spec.get("pytorchReplicaSpecs")
    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        if "Worker" not in (specs or {}):
            errors.append(required(f"{specs_path}[Worker]",
                                   "must be configured if elastic policy is used"))
        if elastic.get("nProcPerNode") is not None and spec.get("nprocPerNode") is not None:
            errors.append(forbidden("spec.elasticPolicy.nProcPerNode",
                                    "must not be used with spec.nprocPerNode"))
    if specs is None:
        errors.append(required(specs_path, "must be required"))
        return errors
    for rtype, rspec in sorted(specs.items()):
        role = f"{specs_path}[{rtype}]"
        containers_path = f"{role}.template.spec.containers"
        if rtype not in ("Master", "Worker"):
            errors.append(not_supported(role, rtype, ["Master", "Worker"]))
        containers = (((rspec or {}).get("template") or {}).get("spec") or {}).get(
            "containers") or []
        if not containers:
            errors.append(required(containers_path, "must be specified"))
        for i, container in enumerate(containers):
            if not container.get("image"):
                errors.append(required(f"{containers_path}[{i}].image", "must be required"))
        if not any(c.get("name") == PYTORCH_CONTAINER for c in containers):
            errors.append(required(containers_path, "must have at least one container with "
                                   f"name {PYTORCH_CONTAINER}"))
        replicas = (rspec or {}).get("replicas")
        if rtype == "Master" and replicas != 1:
            errors.append(forbidden(f"{role}.replicas", "must be 1"))
        elif rtype != "Master" and replicas is not None and replicas < 1:
            errors.append(forbidden(f"{role}.replicas", "must be at least 1"))
    return errors


def pytorchjob_webhook(resource: Any, new: Obj, old: Obj | None) -> None:
    """The validating webhook, as the fake server's admission hook (PyTorchJobs only)."""
    from voda_testing.kube.errors import ApiError

    if getattr(resource, "kind", "") != "PyTorchJob":
        return
    errors = pytorchjob_errors(new)
    if errors:
        raise ApiError(403, f'admission webhook "{PYTORCH_WEBHOOK}" denied the request: '
                       + aggregate(errors))


def serve_operators(server: Any) -> Any:
    """Install the operators' admission webhooks on a FakeApiServer, for the kinds it
    serves; returns the server."""
    served = server.store.by_name.get("pytorchjobs.kubeflow.org")
    if served is not None and served.version == "v1":
        server.webhooks.append(pytorchjob_webhook)
    return server


def rendezvous_port(job: Obj) -> int:
    """The port torchrun's rendezvous listens on: elasticPolicy.rdzvPort, else the port
    named `pytorchjob-port` of the Worker's container `pytorch` (the operator defaults it
    to 23456)."""
    spec = job.get("spec") or {}
    port = (spec.get("elasticPolicy") or {}).get("rdzvPort")
    if port is not None:
        return int(port)
    worker = (spec.get("pytorchReplicaSpecs") or {}).get("Worker") or {}
    for container in ((worker.get("template") or {}).get("spec") or {}).get("containers") or []:
        if container.get("name") == PYTORCH_CONTAINER:
            for entry in container.get("ports") or []:
                if entry.get("name") == PYTORCH_PORT_NAME:
                    return int(entry["containerPort"])
    return PYTORCH_DEFAULT_PORT


# ----- mpi-operator's controller-side defaults and validation -------------------------------
def mpijob_defaulted(job: Obj) -> Obj:
    out = copy.deepcopy(job)
    spec = out.setdefault("spec", {})
    spec.setdefault("runPolicy", {}).setdefault("cleanPodPolicy", "None")
    spec.setdefault("slotsPerWorker", 1)
    spec["sshAuthMountPath"] = spec.get("sshAuthMountPath") or "/root/.ssh"
    spec["mpiImplementation"] = spec.get("mpiImplementation") or "OpenMPI"
    spec["launcherCreationPolicy"] = spec.get("launcherCreationPolicy") or "AtStartup"
    specs = spec.get("mpiReplicaSpecs") or {}
    if specs.get("Launcher") is not None:
        launcher = specs["Launcher"]
        launcher["restartPolicy"] = launcher.get("restartPolicy") or "OnFailure"
        launcher.setdefault("replicas", 1)
    if specs.get("Worker") is not None:
        worker = specs["Worker"]
        worker["restartPolicy"] = worker.get("restartPolicy") or "Never"
        worker.setdefault("replicas", 0)
    return out


def _replica_errors(rspec: Obj, path: str) -> list[str]:
    errors = []
    if rspec.get("replicas") is None:
        errors.append(required(f"{path}.replicas", "must define number of replicas"))
    policy = rspec.get("restartPolicy", "")
    if policy not in ("Never", "OnFailure"):
        errors.append(not_supported(f"{path}.restartPolicy", policy, ["Never", "OnFailure"]))
    if not (((rspec.get("template") or {}).get("spec") or {}).get("containers")):
        errors.append(required(f"{path}.template.spec.containers",
                               "must define at least one container"))
    return errors


def mpijob_errors(job: Obj) -> list[str]:
    """ValidateMPIJob on a defaulted MPIJob."""
    meta, spec = job.get("metadata") or {}, job.get("spec") or {}
    specs = spec.get("mpiReplicaSpecs")
    errors = []
    worker = (specs or {}).get("Worker")
    replicas = int((worker or {}).get("replicas") or 0)
    host = f"{meta.get('name', '')}-worker-{max(replicas, 1) - 1}"
    if problems := dns1035_errors(host):
        errors.append(invalid("metadata.name", meta.get("name", ""),
                              f'will not able to create pod and service with invalid DNS '
                              f'label "{host}": ' + ", ".join(problems)))
    path = "spec.mpiReplicaSpecs"
    if specs is None:
        errors.append(required(path, "must have replica specs"))
    else:
        launcher = specs.get("Launcher")
        if launcher is None:
            errors.append(required(f"{path}[Launcher]", "must have Launcher replica spec"))
        else:
            errors.extend(_replica_errors(launcher, f"{path}[Launcher]"))
            if launcher.get("replicas") is not None and launcher["replicas"] != 1:
                errors.append(invalid(f"{path}[Launcher].replicas", launcher["replicas"],
                                      "must be 1"))
        if worker is not None:
            errors.extend(_replica_errors(worker, f"{path}[Worker]"))
            if worker.get("replicas") is not None and worker["replicas"] <= 0:
                errors.append(invalid(f"{path}[Worker].replicas", worker["replicas"],
                                      "must be greater than or equal to 1"))
    slots = spec.get("slotsPerWorker")
    if slots is None:
        errors.append(required("spec.slotsPerWorker", "must have number of slots per worker"))
    elif slots < 0:
        errors.append(invalid("spec.slotsPerWorker", slots,
                              "must be greater than or equal to 0"))
    clean = (spec.get("runPolicy") or {}).get("cleanPodPolicy")
    if clean not in ("None", "Running", "All"):
        errors.append(not_supported("spec.runPolicy.cleanPodPolicy", clean,
                                    ["All", "None", "Running"]))
    if spec.get("mpiImplementation") not in ("OpenMPI", "Intel", "MPICH"):
        errors.append(not_supported("spec.mpiImplementation", spec.get("mpiImplementation"),
                                    ["Intel", "MPICH", "OpenMPI"]))
    return errors
