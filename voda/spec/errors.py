"""Errors that name the offending field and the reason."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FieldError:
    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


class SpecError(ValueError):
    """A submission that cannot become a job; `errors` lists every field at fault."""

    def __init__(self, errors: list[FieldError], status: int = 422) -> None:
        self.errors = errors
        self.status = status
        super().__init__("; ".join(str(e) for e in errors))


def fail(field: str, reason: str, status: int = 422) -> SpecError:
    return SpecError([FieldError(field, reason)], status)
