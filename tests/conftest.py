"""Shared fixtures: a throwaway PostgreSQL server, store URLs, and `voda serve` subprocesses.

The PostgreSQL server is real: initdb into a temporary folder as the `postgres`
user, pg_ctl on a free loopback port with its socket in that folder; one server
per test session, one fresh database per use.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import ssl
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings
from sqlalchemy.orm import Session, sessionmaker

from voda.store.db import make_engine, migrate, session_factory
from voda_testing.devices import hide_gpus
from voda_testing.serve import ServeProcess, free_port

# CI runs the same examples every time (a red CI must be reproducible); locally the
# property tests draw new examples on every run and keep exploring.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

hide_gpus()  # local backends in CPU slots, on a GPU machine too (see voda_testing.devices)


def _same_blas_kernels_everywhere() -> None:
    """OpenBLAS picks its kernels by CPU (SkylakeX on one x86-64 machine, Haswell on
    another), and the goodput fits' last bits, so the adaptive runs' decisions, follow
    them. Its Haswell kernels (AVX2) run on every x86-64 CPU of the last decade: with them
    the recorded digests (tests/test_decisions_unchanged.py) hold exactly wherever the
    suite runs. Set before any test imports NumPy; an explicit OPENBLAS_CORETYPE wins."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return
    if " avx2" in flags and " fma" in flags:
        os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")


_same_blas_kernels_everywhere()

ROOT = Path(__file__).resolve().parent.parent
# A real Chromium for the dashboard and report tests; the fake Kubernetes API server's fixtures
# (fake_api, namespace, kubeconfig).
pytest_plugins = ("browser", "voda_testing.kube.fixtures")
_db_counter = itertools.count()


def _pg_bin(name: str) -> str:
    for candidate in sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True):
        return candidate
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"PostgreSQL program {name!r} not found")
    return found


def _as_postgres(args: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return args
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", "postgres", "--", *args]
    return ["su", "postgres", "-c", " ".join(args)]


@dataclass
class PostgresServer:
    """A throwaway PostgreSQL cluster in a temporary folder; it can be stopped and started
    again (fault injection)."""

    port: int
    socket_dir: str
    base: str

    @property
    def data(self) -> str:
        return os.path.join(self.base, "data")

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        name = f"voda_{os.getpid()}_{next(_db_counter)}"
        subprocess.run(_as_postgres([_pg_bin("createdb"), "-h", self.socket_dir, "-p",
                                     str(self.port), name]), check=True, capture_output=True)
        return self.url(name)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -F"
        subprocess.run(_as_postgres([_pg_bin("pg_ctl"), "-D", self.data, "-l",
                                     os.path.join(self.base, "log"), "-o", options, "-w",
                                     "start"]), check=True, capture_output=True)

    def stop(self, mode: str = "fast") -> None:
        subprocess.run(_as_postgres([_pg_bin("pg_ctl"), "-D", self.data, "-m", mode, "-w",
                                     "stop"]), capture_output=True)


def start_postgres() -> PostgresServer:
    base = tempfile.mkdtemp(prefix="voda-pg-")
    os.chmod(base, 0o755)
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    server = PostgresServer(free_port(), base, base)
    subprocess.run(_as_postgres([_pg_bin("initdb"), "-D", server.data, "-U", "postgres",
                                 "--auth=trust", "-E", "UTF8", "--no-sync"]),
                   check=True, capture_output=True)
    server.start()
    return server


def _postgres() -> Iterator[PostgresServer]:
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop("immediate")
        shutil.rmtree(server.base, ignore_errors=True)


postgres_server = pytest.fixture(scope="session", name="postgres_server")(_postgres)
# A PostgreSQL server of the test's own, which it may stop and start.
own_postgres = pytest.fixture(name="own_postgres")(_postgres)


STORES = ["sqlite", "postgres"]


def make_store_url(kind: str, request: pytest.FixtureRequest, folder: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{folder / f'voda-{next(_db_counter)}.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty store: a SQLite file, then a database on the real PostgreSQL server."""
    return make_store_url(request.param, request, tmp_path)


@pytest.fixture
def sessions(store_url: str) -> Iterator[sessionmaker[Session]]:
    """Sessions on a fresh store (`store_url`) migrated to the head revision."""
    engine = make_engine(store_url)
    migrate(engine)
    yield session_factory(engine)
    engine.dispose()


# ----- `voda serve` as a real subprocess (voda_testing.serve) ------------------------------
# Tokens have at least 16 characters (voda.config.MIN_TOKEN_LENGTH).
TOKENS = {"alice": "tok-alice-4f9c2e7a1b", "bob": "tok-bob1-8d3a6f0c2e",
          "root": "tok-root-5b7e9d1c3a"}
TOKENS_ENV = f"alice:{TOKENS['alice']},bob:{TOKENS['bob']},root:{TOKENS['root']}:admin"

ServeFactory = Callable[..., ServeProcess]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[ServeFactory]:
    """Start `voda serve` subprocesses; every one is killed at teardown."""
    started: list[ServeProcess] = []

    def factory(db: str, *extra: str, tokens: bool = False, port: int | None = None,
                host: str = "127.0.0.1", config: str = "", scheme: str = "http",
                verify: ssl.SSLContext | bool = True) -> ServeProcess:
        """`config`: the text of the server's config.toml."""
        port = port or free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
        config_file = tmp_path / f"config-{port}.toml"
        config_file.write_text(config)
        env["VODA_CONFIG"] = str(config_file)
        env["VODA_TOKEN_FILE"] = str(tmp_path / "token")
        if tokens:
            env["VODA_TOKENS"] = TOKENS_ENV
        process = ServeProcess(url=f"{scheme}://127.0.0.1:{port}", port=port,
                               args=["--db", db, *extra], env=env, verify=verify,
                               log_path=tmp_path / f"serve-{port}.log",
                               tokens=TOKENS if tokens else {}, host=host,
                               token_file=tmp_path / "token")
        started.append(process)
        return process.start()

    yield factory
    for process in started:
        process.kill()


@pytest.fixture(scope="session", params=STORES)
def api_server(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """One long-lived `voda serve` (with tokens) per store kind, shared by the API tests."""
    folder = tmp_path_factory.mktemp("api")
    url = make_store_url(request.param, request, folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
    env["VODA_CONFIG"] = str(folder / "no-config.toml")
    env["VODA_TOKENS"] = TOKENS_ENV
    port = free_port()
    process = ServeProcess(url=f"http://127.0.0.1:{port}", port=port,
                           args=["--db", url, "--cluster", "4x4,2x8:a100", "--time-scale", "1",
                                 "--rate-limit", "0.2", "--step-interval", "0.2"],
                           env=env, log_path=folder / "serve.log", tokens=TOKENS)
    process.start()
    yield process
    process.kill()


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path, Path]:
    import trustme

    authority = trustme.CA()
    cert = authority.issue_cert("127.0.0.1", "localhost")
    ca, chain, key = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    authority.cert_pem.write_to_path(str(ca))
    cert.private_key_pem.write_to_path(str(key))
    with chain.open("wb") as out:
        for blob in cert.cert_chain_pems:
            out.write(blob.bytes())
    return ca, chain, key


def read_example(name: str) -> bytes:
    return (ROOT / "examples" / "jobs" / name).read_bytes()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Name a failing test the moment it fails: a run stopped by CI's clock still says
    which tests failed and how long they took (the quiet progress line does not)."""
    if report.failed:
        print(f"\nFAILED {report.nodeid} ({report.when}, {report.duration:.1f} s)", flush=True)


_exit_status: list[int] = []


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _exit_status.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """A thread some test left running would hold the interpreter's exit (it joins worker
    threads) until CI's clock ran out, hiding the summary above: name such threads, show
    where they are, and leave with the suite's own status."""
    import faulthandler
    import sys
    import threading

    left = [t for t in threading.enumerate()
            if t is not threading.main_thread() and t.is_alive()]
    if not left or not _exit_status:
        return
    names = ", ".join(f"{t.name}{'' if t.daemon else ' (non-daemon)'}" for t in left)
    sys.__stderr__.write(f"\nthreads still running after the suite: {names}\n")
    faulthandler.dump_traceback(file=sys.__stderr__, all_threads=True)
    sys.__stderr__.flush()
    sys.__stdout__.flush()
    os._exit(_exit_status[0])
