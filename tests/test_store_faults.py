"""Fault injection: kill -9 at random points, PostgreSQL stopped and started mid-run, a full
disk, a locked SQLite file. After each, every accepted job ends exactly once (none lost,
none run twice, no job that was refused), and the store agrees with the API.

Each test prints its counts (`pytest -s`): rounds, jobs, lost, replayed, ghosts, 503s.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import PostgresServer, ServeFactory, ServeProcess
from tests.faults import Ledger, Outcome
from tests.polling import wait_for
from voda.store.db import make_engine, migrate

# Jobs of 2 epochs at 0.5 s per epoch on one GPU: they finish while the faults go on.
ARGS = ("--cluster", "2x4", "--time-scale", "120", "--rate-limit", "0.1",
        "--step-interval", "0.1")


def _ledger(current: dict[str, ServeProcess]) -> Ledger:
    return Ledger(url=lambda: current["server"].url, token=lambda: current["server"].admin_token)


def _check(outcome: Outcome, name: str) -> None:
    print(f"\n{name}: {outcome}")
    assert (outcome.lost, outcome.replayed, outcome.ghosts) == (0, 0, 0), outcome


def _kill_rounds(serve: ServeFactory, store_url: str, rounds: int, seed: int) -> Outcome:
    rng = random.Random(seed)
    current = {"server": serve(store_url, *ARGS)}
    port = current["server"].port
    ledger = _ledger(current)
    for _ in range(rounds):
        stop = threading.Event()

        def work(stop: threading.Event = stop) -> None:
            while not stop.is_set():
                ledger.retry_pending()
                ledger.submit(ledger.new_job())
                ledger.observe()

        worker = threading.Thread(target=work)
        worker.start()
        time.sleep(rng.uniform(0.1, 1.5))
        current["server"].kill()  # SIGKILL at a random point of the work
        stop.set()
        worker.join()
        current["server"] = serve(store_url, *ARGS, port=port)
    ledger.settle()
    return ledger.verify(store_url, rounds)


@pytest.mark.slow
def test_kill_9_at_random_points(serve: ServeFactory, store_url: str) -> None:
    _check(_kill_rounds(serve, store_url, rounds=10, seed=20), "kill -9, 10 rounds")


def _ride_out(ledger: Ledger, server: ServeProcess, seconds: float,
              expected: str) -> list[str]:
    """Keep submitting and reading while a fault lasts: at least `seconds`, and until
    /readyz gives the `expected` reason (30 s at most); return its reasons."""
    reasons: list[str] = []
    began = time.monotonic()
    while time.monotonic() - began < 30 and (
        time.monotonic() - began < seconds or not any(expected in r for r in reasons)
    ):
        ledger.submit(ledger.new_job())
        ledger.observe()
        ready = httpx.get(f"{server.url}/readyz", timeout=5)
        assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
        if ready.status_code == 503:
            reasons += ready.json()["reasons"]
        time.sleep(0.1)
    return reasons


def _recovered(server: ServeProcess) -> None:
    wait_for(lambda: httpx.get(f"{server.url}/readyz", timeout=5).status_code == 200, 90)


def _metric(server: ServeProcess, name: str) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=5).text
    return float(next(line.split()[-1] for line in text.splitlines()
                      if line.startswith(f"{name} ")))


@pytest.mark.postgres
@pytest.mark.parametrize("outage", [3.0, pytest.param(10.0, marks=pytest.mark.slow)],
                         ids=["3 s", "10 s"])
def test_postgres_stopped_and_started_mid_run(serve: ServeFactory,
                                              own_postgres: PostgresServer,
                                              outage: float) -> None:
    url = own_postgres.create_database()
    current = {"server": serve(url, *ARGS)}
    server = current["server"]
    ledger = _ledger(current)
    ledger.submit_many(12)
    own_postgres.stop("fast")
    reasons = _ride_out(ledger, server, outage, "store: unreachable")
    assert any("store: unreachable" in r for r in reasons), reasons
    assert _metric(server, "voda_store_up") == 0
    own_postgres.start()
    _recovered(server)
    assert _metric(server, "voda_store_up") == 1
    ledger.submit_many(5)
    ledger.settle()
    outcome = ledger.verify(url, 1)
    assert outcome.unavailable > 0
    _check(outcome, f"PostgreSQL stopped for {outage:g} s")


def test_a_full_disk(serve: ServeFactory, tmp_path: Path) -> None:
    """The store file is limited (db_max_bytes); the test fills the room that is left with
    ballast of its own, then frees it."""
    path = tmp_path / "full.db"
    url = f"sqlite:///{path}"
    limit = 2_000_000
    current = {"server": serve(url, *ARGS, config=f"[server]\ndb_max_bytes = {limit}\n")}
    server = current["server"]
    ledger = _ledger(current)
    ledger.command = "train " + "x" * 4000  # every submission needs a new page
    ledger.submit_many(8)
    ballast = sqlite3.connect(path, timeout=10)
    ballast.execute("CREATE TABLE ballast (data BLOB)")
    while ballast.execute("PRAGMA page_count").fetchone()[0] * 4096 < limit + 100_000:
        ballast.execute("INSERT INTO ballast VALUES (zeroblob(50000))")
        ballast.commit()
    reasons = _ride_out(ledger, server, 2.0, "database or disk is full")
    assert any("database or disk is full" in r for r in reasons), reasons
    ballast.execute("DELETE FROM ballast")
    ballast.commit()
    ballast.close()
    _recovered(server)
    ledger.settle()
    _check(ledger.verify(url, 1), "a full disk")


def test_a_locked_sqlite_file(serve: ServeFactory, tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    url = f"sqlite:///{path}"
    current = {"server": serve(url, *ARGS)}
    server = current["server"]
    ledger = _ledger(current)
    ledger.submit_many(8)
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    reasons = _ride_out(ledger, server, 4.0, "store: locked")
    assert any("store: locked" in r for r in reasons), reasons
    with pytest.raises(RuntimeError, match="does not take writes: locked"):
        serve(url, *ARGS)  # a second service finds the store not writable and stops
    locker.execute("ROLLBACK")
    locker.close()
    _recovered(server)
    ledger.settle()
    _check(ledger.verify(url, 1), "a locked SQLite file")


def test_a_read_only_store_stops_the_service_at_start(serve: ServeFactory,
                                                      tmp_path: Path) -> None:
    path = tmp_path / "ro.db"
    engine = make_engine(f"sqlite:///{path}")
    migrate(engine)
    engine.dispose()
    with pytest.raises(RuntimeError, match="does not take writes: read-only"):
        serve(f"sqlite:///file:{path}?mode=ro&uri=true", *ARGS)


def test_a_sqlite_uri_makes_no_directories(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "db" / "ro.db"
    path.parent.mkdir()
    engine = make_engine(f"sqlite:///{path}")
    migrate(engine)
    engine.dispose()
    monkeypatch.chdir(tmp_path)
    make_engine(f"sqlite:///file:{path}?mode=ro&uri=true").dispose()
    assert not (tmp_path / "file:").exists()  # the URI is not a relative file name
