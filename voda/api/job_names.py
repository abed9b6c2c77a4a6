"""Job names: the name a job is submitted with, unique among live jobs, and its uid.

A job keeps the name it was given (or, with `generate_name`, the prefix and five random
characters, as Kubernetes' generateName). Two live jobs never share a name; a name is
free again once its job has finished (Completed, Failed, Canceled), and its finished
jobs keep it, with their history.

Every job also has a uid, unique for ever: `NAME-YYYYMMDDhhmmss-xxxxxx`. It keys the job
in the scheduler, the store and the backends (processes, MPIJobs, PyTorchJobs), so that
a name used again never meets the leftovers of the job that had it before.

A job is found by (`resolve`): the live job of that name; else the job of that uid;
else the newest finished job of that name. See docs/design/004-service.md.

`JobNames` is the index; the service keeps it under its inbox lock. The store holds the
same rule atomically (a unique index on the names of live jobs, voda.store.models).
"""

from __future__ import annotations

import secrets
from collections.abc import Container
from datetime import UTC, datetime

from voda.api.errors import Conflict
from voda.spec.parse import GENERATED_LENGTH

# Kubernetes' generateName alphabet (k8s.io/apimachinery util/rand): no vowels, no
# look-alikes; five characters give 27^5 (14 million) names per prefix.
GENERATED_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# A generated name taken by a live job is drawn again, at most this many times.
GENERATE_TRIES = 20


def new_uid(name: str, now: float) -> str:
    """A uid for a job named `name` submitted at `now` (at most 22 characters longer than
    the name: the spec's 40 make 62, within a DNS-1123 label)."""
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%d%H%M%S")
    return f"{name}-{stamp}-{secrets.token_hex(3)}"


def generated_name(prefix: str) -> str:
    return prefix + "".join(secrets.choice(GENERATED_ALPHABET) for _ in range(GENERATED_LENGTH))


class JobNames:
    """Which live job holds each name, and the uids every name was given to, in order."""

    def __init__(self) -> None:
        self.live: dict[str, str] = {}  # name -> uid of the live job holding it
        self.uids: dict[str, list[str]] = {}  # name -> uids of all its jobs, oldest first
        self.name_of: dict[str, str] = {}  # uid -> name
        self.owner_of: dict[str, str] = {}  # uid -> its user (who may see the uid in a 409)

    def add(self, name: str, uid: str, live: bool, owner: str = "") -> None:
        """A job known already (recovered from the store), oldest first."""
        self.uids.setdefault(name, []).append(uid)
        self.name_of[uid] = name
        self.owner_of[uid] = owner
        if live:
            self.live[name] = uid

    def claim(self, name: str, uid: str, owner: str = "") -> str | None:
        """Give `name` to the new job `uid`; if a live job holds it, nothing is claimed
        and that job's uid is returned (the caller answers 409: `name_taken`)."""
        holder = self.live.get(name)
        if holder is not None:
            return holder
        self.add(name, uid, live=True, owner=owner)
        return None

    def claim_generated(self, prefix: str, now: float, owner: str = "") -> tuple[str, str]:
        """A free name made of `prefix` and five random characters, and its new uid."""
        for _ in range(GENERATE_TRIES):
            name = generated_name(prefix)
            if name not in self.live:
                uid = new_uid(name, now)
                self.add(name, uid, live=True, owner=owner)
                return name, uid
        raise Conflict("generate_name", f"no free name found for the prefix {prefix!r} in "
                       f"{GENERATE_TRIES} tries; use a longer prefix")

    def release(self, uid: str) -> None:
        """The job `uid` has finished: its name is free for a new job."""
        name = self.name_of.get(uid)
        if name is not None and self.live.get(name) == uid:
            del self.live[name]

    def forget(self, uid: str) -> None:
        """A submission that was refused: as if it never was."""
        self.release(uid)
        self.owner_of.pop(uid, None)
        name = self.name_of.pop(uid, None)
        uids = self.uids.get(name, []) if name is not None else []
        if uid in uids:
            uids.remove(uid)
            if not uids:
                del self.uids[str(name)]

    def resolve(self, key: str, known: Container[str]) -> str | None:
        """The uid `key` means: the live job named `key`, else the job whose uid is `key`
        (among `known` uids), else the newest job named `key`; None: no such job."""
        holder = self.live.get(key)
        if holder is not None and holder in known:  # else not admitted yet
            return holder
        if key in known:
            return key
        uids = [u for u in self.uids.get(key, ()) if u in known]
        return uids[-1] if uids else None


def name_taken(name: str, holder: str | None) -> str:
    """Why a name is refused; `holder`: the uid of the live job that has it, when the
    caller may see that job (None: another user's)."""
    whose = f"a live job (uid {holder})" if holder else "another user's live job"
    return (f"{name!r} is the name of {whose}; names are unique among jobs that have not "
            "finished: choose another name, wait for that job to finish or delete it, or "
            "use generate_name for a generated one")
