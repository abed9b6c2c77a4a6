"""Parsing of job submissions: the Voda compact spec and Kubeflow MPIJob / PyTorchJob."""

from voda.spec.errors import FieldError, SpecError
from voda.spec.parse import JobSpec, parse_document, parse_submission

__all__ = ["FieldError", "JobSpec", "SpecError", "parse_document", "parse_submission"]
