"""The service's writes: one bad row never blocks the others; an unexpected error is a
JSON 500 that closes the connection; /readyz notices a scheduler lock held too long."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from voda.api import reads as reads_module
from voda.api.app import create_app
from voda.api.service import Service
from voda.api.writes import Batch, StoreWriter
from voda.backends.emulated import EmulatedBackend, parse_cluster
from voda.config import ServerSettings, User, hash_token
from voda.engine.scheduler import JobRecord
from voda.store import jobs as store
from voda.store.db import make_engine, migrate, session_factory

META = {"user": "alice", "kind": "VodaJob", "spec": {"name": "a"}, "command": "x"}


def _entry(job: str, new: str) -> dict:
    return {"job": job, "time": 1.0, "field": "status", "old": None, "new": new,
            "message": None}


def test_one_bad_row_never_blocks_the_others(store_url: str) -> None:
    engine = make_engine(store_url)
    migrate(engine)
    writer = StoreWriter(session_factory(engine))
    record = JobRecord(name="a-1", epochs=5, category="alice/cat")
    submitted = writer.enqueue(Batch(
        inserts=[store.new_job_values(record, META, 1.0)], states=[],
        history=[_entry("a-1", "Submitted")], category=[], backend_state=None, now=1.0,
        submission=True))
    bad = store.state_values(record, 2.0)
    bad["epoch_time_by_workers"] = {"1": {1.0, 2.0}}  # nothing a database can hold
    changes = writer.enqueue(Batch(
        inserts=[], states=[bad], history=[_entry("a-1", "Waiting")],
        category=[(("alice/cat", "default"), 1, 5.0)], backend_state=None, now=2.0))
    writer.write_through(changes.seq)
    assert writer.health.ok and writer.health.rejected_rows == 1
    assert submitted.error is None and writer.unwritten == 0
    with engine.connect() as connection:
        assert connection.execute(sa.text("SELECT name FROM jobs")).scalars().all() == ["a-1"]
        assert connection.execute(sa.text(
            "SELECT new FROM job_history ORDER BY id")).scalars().all() == [
            "Submitted", "Waiting"]
        assert connection.execute(sa.text(
            "SELECT epoch_seconds FROM category_speed")).scalars().all() == [5.0]
    engine.dispose()


def test_an_unexpected_error_is_a_json_500_that_closes_the_connection() -> None:
    def broken() -> None:
        raise RuntimeError("boom")

    app = create_app(ServerSettings(tokens={hash_token("a-long-enough-token"): User("a")}))
    app.add_api_route("/x", broken)

    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            return await c.get("/x")

    response = asyncio.run(call())
    assert response.status_code == 500
    assert response.json()["error"] == "internal error: RuntimeError"
    assert response.headers["connection"] == "close"


def test_readyz_fails_while_the_scheduler_lock_is_held_too_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reads_module, "LOCK_STALL_SECONDS", 0.2)
    settings = ServerSettings(db=f"sqlite:///{tmp_path / 'v.db'}", backend="emulated")
    service = Service(settings, EmulatedBackend(parse_cluster("1x2")))
    service.start()
    assert service.readiness() == (True, [])
    held = threading.Event()

    def hold() -> None:
        with service._locked():
            held.set()
            time.sleep(0.6)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait()
    time.sleep(0.35)
    ready, reasons = service.readiness()  # never waits for the lock itself
    assert not ready and "scheduler: the lock has been held" in reasons[0]
    thread.join()
    assert service.readiness() == (True, [])
    service.close()
