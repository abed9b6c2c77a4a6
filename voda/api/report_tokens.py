"""Report tokens: credentials that let one job's training processes report, and nothing else.

A report token names its job's owner, the job, and the job's incarnation (its submit
time, so the pods of a job deleted and submitted again under a name it once had
cannot report into the new one), signed with HMAC-SHA256 under a key kept outside the
store (VODA_REPORT_KEY, or an owner-only key file the service generates once:
voda.api.token_file), so that reading the store is no way to sign one; every replica
given the same key and every restart derives the same token, and nothing per job is
stored. Only the report routes accept one, for that
job while it has not ended (voda.api.routes, Service.report_epoch / report_goodput);
every other route refuses it with 403. The signature is compared in constant time;
a token that does not verify is an unknown token (401, counted as a failed attempt).

    vr1.<base64url of ["owner", "job", "incarnation"]>.<base64url of the HMAC>
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass

from voda.config import User

PREFIX = "vr1."
SECRET_BYTES = 32
# The service's names (owners: 64 ASCII characters, jobs: 40) fit many times over; mint
# refuses a longer payload rather than sign a token verify would refuse.
MAX_PAYLOAD = 1024


@dataclass(frozen=True, slots=True)
class Reporter(User):
    """The caller a valid report token makes: the job's owner, for `job` only."""

    job: str = ""
    incarnation: str = ""


def new_secret() -> str:
    return secrets.token_urlsafe(SECRET_BYTES)


def incarnation_of(submit_time: float) -> str:
    """A job's incarnation: its submit time, exactly (repr round-trips a float)."""
    return repr(float(submit_time))


def is_report_token(token: str) -> bool:
    return token.startswith(PREFIX)


class ReportKeys:
    def __init__(self, secret: str) -> None:
        if len(secret) < 16:
            raise ValueError("report secret: at least 16 characters")
        self._key = hashlib.sha256(b"voda report token\0" + secret.encode()).digest()

    def mint(self, owner: str, job: str, incarnation: str) -> str:
        payload = _b64(json.dumps([owner, job, incarnation], separators=(",", ":")).encode())
        if len(payload) > MAX_PAYLOAD:
            raise ValueError(f"report token: owner and job names too long to sign "
                             f"({len(payload)} characters encoded, at most {MAX_PAYLOAD})")
        return f"{PREFIX}{payload}.{_b64(self._sign(payload))}"

    def verify(self, token: str) -> Reporter | None:
        """The reporter a token names, or None when it is no report token of this service."""
        if not is_report_token(token):
            return None
        payload, dot, signature = token[len(PREFIX):].partition(".")
        if not dot or not 0 < len(payload) <= MAX_PAYLOAD or len(signature) > 64:
            return None
        try:
            given = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
        except ValueError:
            return None
        if not hmac.compare_digest(given, self._sign(payload)):
            return None
        try:
            owner, job, incarnation = json.loads(
                base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except (TypeError, ValueError):
            return None
        if not all(isinstance(v, str) for v in (owner, job, incarnation)):
            return None
        return Reporter(owner, admin=False, job=job, incarnation=incarnation)

    def _sign(self, payload: str) -> bytes:
        return hmac.new(self._key, payload.encode(), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")
