"""Validation of Kubeflow objects against the real CRD openAPIV3Schema.

The CRDs ship in voda/data/crds (Apache-2.0, see the LICENSE there). They are
large, so they are read once, on first use.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

from voda.spec.errors import FieldError

CRD_DIR = Path(__file__).resolve().parent.parent / "data" / "crds"

# (apiVersion, kind) -> (file, version name)
KINDS: dict[tuple[str, str], tuple[str, str]] = {
    ("kubeflow.org/v2beta1", "MPIJob"): ("kubeflow.org_mpijobs.yaml", "v2beta1"),
    ("kubeflow.org/v1", "PyTorchJob"): ("kubeflow.org_pytorchjobs.yaml", "v1"),
}


@cache
def validator(api_version: str, kind: str) -> Any:
    """A jsonschema Draft7Validator for the kind's openAPIV3Schema (loaded on first use)."""
    from jsonschema import Draft7Validator

    filename, version = KINDS[(api_version, kind)]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load((CRD_DIR / filename).read_text(), Loader=loader)
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            schema: dict[str, Any] = entry["schema"]["openAPIV3Schema"]
            return Draft7Validator(schema)
    raise LookupError(f"{filename} has no version {version}")


def _path(error: Any) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "(object)"


def schema_errors(obj: dict[str, Any], limit: int = 5) -> list[FieldError]:
    """Where `obj` breaks its CRD schema, deepest errors first (empty when valid)."""
    v = validator(str(obj.get("apiVersion")), str(obj.get("kind")))
    errors = sorted(v.iter_errors(obj), key=lambda e: (-len(e.absolute_path), _path(e)))
    return [FieldError(_path(e), e.message) for e in errors[:limit]]
