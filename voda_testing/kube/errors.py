"""API errors as the real server reports them: a `Status` object with code and reason."""

from __future__ import annotations

from typing import Any

REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
           409: "Conflict", 410: "Expired", 415: "UnsupportedMediaType", 422: "Invalid",
           429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}


class ApiError(Exception):
    def __init__(self, code: int, message: str, reason: str | None = None,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                "status": "Failure", "message": self.message,
                                "reason": self.reason, "code": self.code}
        if self.details:
            body["details"] = self.details
        return body


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    shown = f"{resource}.{group}" if group else resource
    return ApiError(404, f'{shown} "{name}" not found',
                    details={"name": name, "group": group, "kind": resource})


def conflict(resource: str, name: str, why: str, group: str = "") -> ApiError:
    shown = f"{resource}.{group}" if group else resource
    return ApiError(409, f'Operation cannot be fulfilled on {shown} "{name}": {why}',
                    details={"name": name, "group": group, "kind": resource})


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    shown = f"{resource}.{group}" if group else resource
    return ApiError(409, f'{shown} "{name}" already exists', reason="AlreadyExists",
                    details={"name": name, "group": group, "kind": resource})


def invalid(kind: str, name: str, causes: list[tuple[str, str]]) -> ApiError:
    text = "; ".join(f"{f}: {m}" for f, m in causes)
    return ApiError(422, f'{kind} "{name}" is invalid: {text}',
                    details={"name": name, "kind": kind,
                             "causes": [{"field": f, "message": m} for f, m in causes]})
