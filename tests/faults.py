"""A client that keeps a ledger of what the service accepted, for fault injection.

It submits jobs the way a careful client does (an Idempotency-Key per job, retried
after a 503 or a lost connection), watches their statuses, and at the end checks
that every accepted job ended exactly once and that the store agrees with the API.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import sqlalchemy as sa

from voda.store.db import make_engine

TERMINAL = {"Completed", "Failed", "Canceled"}


@dataclass
class Outcome:
    rounds: int = 0
    jobs: int = 0
    lost: int = 0
    replayed: int = 0
    ghosts: int = 0
    unavailable: int = 0  # 503 answers seen

    def __str__(self) -> str:
        return (f"rounds {self.rounds}, jobs {self.jobs}, lost {self.lost}, replayed "
                f"{self.replayed}, ghosts {self.ghosts}, 503 answers {self.unavailable}")


@dataclass
class Ledger:
    url: Callable[[], str]
    token: Callable[[], str]
    epochs: int = 2
    command: str = "train"
    pending: dict[str, dict] = field(default_factory=dict)  # key -> job document
    accepted: dict[str, str] = field(default_factory=dict)  # key -> job uid
    seen: dict[str, list[str]] = field(default_factory=dict)  # uid -> statuses seen
    replayed: set[str] = field(default_factory=set)
    unavailable: int = 0
    bad_503: list[str] = field(default_factory=list)
    _counter: itertools.count = field(default_factory=itertools.count)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url(), timeout=10.0,
                            headers={"Authorization": f"Bearer {self.token()}"})

    def new_job(self) -> str:
        key = f"fault-{uuid.uuid4()}"
        i = next(self._counter)
        self.pending[key] = {"name": f"f{i}", "command": self.command, "min": 1, "max": 2,
                             "epochs": self.epochs}
        return key

    def submit(self, key: str) -> bool:
        """One try; True once the job is accepted (now or before)."""
        if key in self.accepted:
            return True
        try:
            with self.client() as client:
                response = client.post("/v1/jobs", json=self.pending[key],
                                       headers={"Idempotency-Key": key})
        except httpx.HTTPError:
            return False
        if response.status_code in (200, 201):
            job = response.json()
            assert job["name"] == self.pending[key]["name"], "the job keeps its name"
            self.accepted[key] = job["uid"]  # the store's key
            del self.pending[key]
            return True
        if response.status_code == 503:
            self.note_503(response)
            return False
        if response.status_code == 409:  # the same key still in flight: try again
            assert response.json()["errors"][0]["field"] == "Idempotency-Key", response.text
            return False
        raise AssertionError(f"submission refused: {response.status_code} {response.text}")

    def note_503(self, response: httpx.Response) -> None:
        self.unavailable += 1
        body = response.json()
        if not (body["error"].startswith("store: ") and "retry-after" in response.headers
                and response.headers.get("connection") == "close"):
            self.bad_503.append(f"{response.headers} {body}")

    def submit_many(self, count: int) -> None:
        for _ in range(count):
            self.submit(self.new_job())

    def retry_pending(self) -> None:
        for key in list(self.pending):
            self.submit(key)

    def observe(self) -> bool:
        """Note every job's status; True when the service answered."""
        try:
            with self.client() as client:
                response = client.get("/v1/jobs", params={"limit": 1000})
        except httpx.HTTPError:
            return False
        if response.status_code == 503:
            self.note_503(response)
            return False
        assert response.status_code == 200, response.text
        for job in response.json()["items"]:
            statuses = self.seen.setdefault(job["uid"], [])
            if statuses and statuses[-1] in TERMINAL and job["status"] != statuses[-1]:
                self.replayed.add(job["uid"])
            statuses.append(job["status"])
        return True

    def settle(self, timeout: float = 90.0) -> None:
        """Retry what is pending and wait until every accepted job has ended."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.retry_pending()
            if not self.pending and self.observe():
                names = set(self.accepted.values())
                if all(self.seen.get(n) and self.seen[n][-1] in TERMINAL for n in names):
                    return
            time.sleep(0.3)
        raise AssertionError(f"not settled: {len(self.pending)} pending, "
                             f"{sum(1 for n in self.accepted.values() if not self.seen.get(n) or self.seen[n][-1] not in TERMINAL)} running")  # noqa: E501

    def verify(self, db_url: str, rounds: int) -> Outcome:
        """Every accepted job once, ended once; no job nobody was told of; store == API."""
        with self.client() as client:
            listed = {j["uid"]: j["status"] for j in client.get(
                "/v1/jobs", params={"limit": 1000}).json()["items"]}
        engine = make_engine(db_url)
        try:
            with engine.connect() as connection:
                stored = dict(connection.execute(sa.text("SELECT name, status FROM jobs")).all())
                history = connection.execute(sa.text(
                    "SELECT job, old, new FROM job_history WHERE field = 'status' "
                    "ORDER BY id")).all()
        finally:
            engine.dispose()
        names = set(self.accepted.values())
        assert len(names) == len(self.accepted), "two keys got one job"
        ended: dict[str, int] = {}
        for job, old, new in history:
            if new in TERMINAL:
                ended[job] = ended.get(job, 0) + 1
            if old in TERMINAL:
                self.replayed.add(job)
        self.replayed.update(n for n, count in ended.items() if count > 1)
        assert stored == listed, "the store and the API disagree"
        assert not self.bad_503, self.bad_503[:3]
        return Outcome(
            rounds=rounds, jobs=len(names),
            lost=len(names - set(listed)) + sum(1 for n in names if listed.get(n) not in
                                                TERMINAL),
            replayed=len(self.replayed), ghosts=len(set(listed) - names),
            unavailable=self.unavailable)
