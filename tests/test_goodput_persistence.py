"""Goodput reports survive a restart (SQLite file and PostgreSQL), and a store fault during
a report keeps it whole or refuses it, never half, with the service up throughout."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.conftest import PostgresServer, ServeFactory
from tests.goodput_reports import SYNC_BOUND, body
from tests.polling import wait_for
from tests.test_api_goodput import report_of, start_job, submit
from voda.api.service import FIT_ADMISSIONS, Busy, Service
from voda.api.writes import StoreUnavailable
from voda.backends.emulated import EmulatedBackend, parse_cluster
from voda.config import ServerSettings, User
from voda.core.goodput_report import model_of, model_to_dict
from voda.spec import parse_submission
from voda.store.db import make_engine

ARGS = ("--cluster", "4x4", "--time-scale", "0.001", "--rate-limit", "0.2",
        "--step-interval", "0.2")


def stored(url: str) -> tuple[dict[str, Any], dict[tuple[str, str], tuple[Any, int]]]:
    """The goodput models in the store: by job, and by (category, GPU type)."""
    engine = make_engine(url)
    with engine.connect() as connection:
        jobs = {name: model for name, model in connection.execute(sa.text(
            "SELECT name, goodput FROM jobs WHERE goodput IS NOT NULL"))}
        categories = {(c, t): (m, g) for c, t, m, g in connection.execute(sa.text(
            "SELECT category, gpu_type, model, measured_gpus FROM category_goodput"))}
    engine.dispose()
    return ({k: _json(v) for k, v in jobs.items()},
            {k: (_json(m), g) for k, (m, g) in categories.items()})


def _json(value: Any) -> Any:
    import json

    return json.loads(value) if isinstance(value, str) else value


def test_reports_survive_a_restart_for_the_job_and_its_category(
        serve: ServeFactory, store_url: str) -> None:
    first = serve(store_url, *ARGS, tokens=True)
    doc = body(configs=[(1, 1, 64), (1, 2, 64), (1, 4, 64), (1, 4, 128)])
    with first.client("alice") as client:
        name = start_job(client, "kept", max=4, category="shared")
        answer = client.post(f"/v1/jobs/{name}/goodput", json=doc)
        assert answer.status_code == 200, answer.text
    first.kill()  # SIGKILL: what was answered is in the store
    expected = model_to_dict(model_of(report_of(doc), 4))
    jobs, categories = stored(store_url)
    assert jobs == {name: expected}
    assert categories == {("alice/shared", "default"): (expected, 4)}

    second = serve(store_url, *ARGS, tokens=True)
    with second.client("alice") as client, second.client("bob") as bob:
        kept = client.get(f"/v1/jobs/{name}").json()["goodput"]
        assert kept["reported"] and kept["measured_gpus"] == 4
        assert kept["category_measured_gpus"] == 4 and kept["throughput_from"] == "job"
        newcomer = submit(client, "newcomer", max=4, category="shared")
        seen = client.get(f"/v1/jobs/{newcomer}").json()["goodput"]
        assert seen is not None and not seen["reported"]
        assert seen["category_measured_gpus"] == 4 and seen["throughput_from"] == "category"
        others = submit(bob, "others", max=4, category="shared")  # bob's history is his own
        assert bob.get(f"/v1/jobs/{others}").json()["goodput"] is None


@contextlib.contextmanager
def sqlite_locked(path: Path) -> Iterator[None]:
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        locker.execute("ROLLBACK")
        locker.close()


@contextlib.contextmanager
def postgres_stopped(server: PostgresServer) -> Iterator[None]:
    server.stop("fast")
    try:
        yield
    finally:
        server.start()


@pytest.mark.parametrize("fault", ["sqlite-locked", pytest.param(
    "postgres-stopped", marks=pytest.mark.postgres)],
    ids=["a locked SQLite file", "PostgreSQL stopped"])
def test_a_report_during_a_store_fault_is_refused_and_the_service_stays_up(
        serve: ServeFactory, tmp_path: Path, request: pytest.FixtureRequest,
        fault: str) -> None:
    if fault == "sqlite-locked":
        url = f"sqlite:///{tmp_path / 'locked.db'}"
        outage = sqlite_locked(tmp_path / "locked.db")
        reason = "store: locked"
    else:
        postgres: PostgresServer = request.getfixturevalue("own_postgres")
        url = postgres.create_database()
        outage = postgres_stopped(postgres)
        reason = "store: unreachable"
    server = serve(url, *ARGS, tokens=True)
    with server.client("alice") as client:
        name = start_job(client, "faulty", max=4)
        with outage:
            refused = client.post(f"/v1/jobs/{name}/goodput", json=body())
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"].startswith(reason)
            assert "Retry-After" in refused.headers
            assert client.get("/healthz").status_code == 200  # the service is up
        wait_for(lambda: client.get("/readyz").status_code == 200, timeout=60)
        shown = client.get(f"/v1/jobs/{name}").json()["goodput"]
        jobs, categories = stored(url)
        if shown is None:  # refused before anything changed: nothing was stored either
            assert jobs == {} and categories == {}
        else:  # made before the write failed: kept, and stored whole once the store was back
            assert shown["reported"] and set(jobs) == {name} and len(categories) == 1
        again = client.post(f"/v1/jobs/{name}/goodput", json=body())
        assert again.status_code == 200 and again.json()["goodput"]["reported"]
    server.kill()
    jobs, categories = stored(url)
    assert set(jobs) == {name} and len(categories) == 1


def running_job(tmp_path: Path) -> tuple[Service, str, User]:
    """An in-process service on a SQLite file with one running job of alice's."""
    settings = ServerSettings(db=f"sqlite:///{tmp_path / 'v.db'}", backend="emulated")
    service = Service(settings, EmulatedBackend(parse_cluster("1x4"), time_scale=0.001))
    service.start()
    alice = User("alice", admin=True)
    job, _ = service.submit(parse_submission(
        b"name: fault\ncommand: x\nmin: 1\nmax: 4\nepochs: 100\ncategory: cat\n"), alice)
    service.tick()
    assert service.scheduler.jobs[job["uid"]].current_workers > 0
    return service, job["uid"], alice


def test_a_report_made_before_a_write_fails_is_kept_and_written_whole(
        tmp_path: Path) -> None:
    """In process, so the store fails exactly between the change and its write: the answer
    is 503, the report stays queued and is written whole (job and category together) when
    the store is back; a report while the store is known to fail changes nothing."""
    service, name, alice = running_job(tmp_path)
    path, url, settings = tmp_path / "v.db", service.settings.db, service.settings
    first = body()
    second = body(SYNC_BOUND, configs=[(1, 1, 64), (1, 2, 64), (1, 4, 64)])
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreUnavailable, match="the change is made but not stored yet"):
            service.report_goodput(name, report_of(first), alice)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="nothing was changed"):
            service.report_goodput(name, report_of(second), alice)
        assert time.monotonic() - started < 1.0  # refused at once, not fitted or waited on
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    kept = model_of(report_of(first), 4)
    assert service.scheduler.jobs[name].goodput == kept
    time.sleep(service.writer.health.retry_after())
    service.flush()
    assert service.writer.health.ok and service.writer.unwritten == 0
    jobs, categories = stored(url)
    assert jobs == {name: model_to_dict(kept)}
    assert categories == {("alice/cat", "default"): (model_to_dict(kept), 2)}
    service.close()

    restarted = Service(settings, EmulatedBackend(parse_cluster("1x4"), time_scale=0.001))
    restarted.start()
    assert restarted.scheduler.jobs[name].goodput == kept
    assert restarted.scheduler.goodput_history == {("alice/cat", "default"): kept}
    assert restarted.scheduler.jobs[name].category_goodput == kept
    restarted.close()


def test_reports_past_the_fits_in_hand_are_429_at_once(tmp_path: Path) -> None:
    service, name, alice = running_job(tmp_path)
    service.fits.acquire()  # a fit in progress
    waiting = [threading.Thread(target=service.report_goodput,
                                args=(name, report_of(body()), alice))
               for _ in range(FIT_ADMISSIONS)]
    for thread in waiting:
        thread.start()
    def full() -> bool:  # every admission taken (a probe that gets one gives it back)
        if service.fit_admissions.acquire(blocking=False):
            service.fit_admissions.release()
            return False
        return True

    wait_for(full, timeout=60)
    started = time.monotonic()
    with pytest.raises(Busy) as busy:
        service.report_goodput(name, report_of(body()), alice)
    assert time.monotonic() - started < 1.0 and busy.value.field == "observations"
    service.fits.release()
    for thread in waiting:
        thread.join(30)
    assert service.scheduler.jobs[name].goodput is not None  # the waiting ones went through
    service.report_goodput(name, report_of(body()), alice)  # and room is back
    service.close()


def test_the_dashboards_job_page_shows_the_model(tmp_path: Path) -> None:
    from voda.api.ui.routes import job_fragment

    service, name, alice = running_job(tmp_path)
    assert 'id="job-goodput"' not in job_fragment(service, alice, name)
    service.report_goodput(name, report_of(body()), alice)
    html = job_fragment(service, alice, name)
    assert "reported, measured on 2 GPUs" in html and "sized by the job" in html
    service.close()
