"""Voda's manifests as `kubectl kustomize deploy/` renders them, and a fake API server
that holds their RBAC and gives each component the token of its own ServiceAccount."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from voda_testing.kube.authz import load_rbac
from voda_testing.kube.server import FakeApiServer

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
VODA_NAMESPACE = "voda"  # Voda's own: its ServiceAccounts, Secrets and leader Lease
JOBS_NAMESPACE = "voda-jobs"  # where deploy/ lets Voda run training jobs
VODA_SA = "voda"
POD_SCHEDULER_SA = "voda-pod-scheduler"


@cache
def _rendered(path: str) -> tuple[dict[str, Any], ...]:
    if shutil.which("kubectl") is None and path == str(DEPLOY / "base"):
        return _plain(Path(path))
    out = subprocess.run(["kubectl", "kustomize", path], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return tuple(d for d in yaml.safe_load_all(out) if d)


def _plain(folder: Path) -> tuple[dict[str, Any], ...]:
    """deploy/base without kubectl: its files as they are (it has no transformer that
    changes what RBAC reads: each object names its namespace)."""
    listed = yaml.safe_load((folder / "kustomization.yaml").read_text())["resources"]
    return tuple(d for name in listed for d in yaml.safe_load_all((folder / name).read_text())
                 if d)


def rendered(path: Path = DEPLOY) -> list[dict[str, Any]]:
    """The rendered documents (one `kubectl kustomize` per path and process)."""
    import copy

    return copy.deepcopy(list(_rendered(str(path))))


def install_rbac(server: FakeApiServer, jobs_namespace: str = JOBS_NAMESPACE
                 ) -> dict[str, str]:
    """Turn RBAC on in `server`, load deploy/'s roles and bindings (its jobs namespace
    renamed to `jobs_namespace`), and return bearer tokens by who holds them: 'admin'
    (system:masters, for tests), 'voda' and 'pod-scheduler' (their ServiceAccounts)."""
    authorizer = server.enforce_rbac()
    load_rbac(server.store, rendered(DEPLOY / "base"), {JOBS_NAMESPACE: jobs_namespace})
    return {"admin": authorizer.admin_token(),
            "voda": authorizer.service_account_token(VODA_NAMESPACE, VODA_SA),
            "pod-scheduler": authorizer.service_account_token(VODA_NAMESPACE,
                                                              POD_SCHEDULER_SA)}
