"""pytest fixtures for the fake API server (loaded by tests/conftest.py)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from voda_testing.kube.server import FakeApiServer

_namespaces = itertools.count()


@pytest.fixture(scope="module")
def fake_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeApiServer]:
    """One fake API server per test module, with a kubeconfig at `fake_api.kubeconfig`."""
    server = FakeApiServer(bookmark_interval=0.2).start()
    server.kubeconfig = server.write_kubeconfig(  # type: ignore[attr-defined]
        tmp_path_factory.mktemp("kube") / "kubeconfig")
    yield server
    server.stop()


@pytest.fixture
def namespace(fake_api: FakeApiServer) -> str:
    """A fresh namespace on the module's fake server, so tests do not see each other."""
    name = f"t{next(_namespaces)}"
    fake_api.store.create("namespaces", "", {"metadata": {"name": name}})
    return name


@pytest.fixture
def kubeconfig(fake_api: FakeApiServer) -> Path:
    return fake_api.kubeconfig  # type: ignore[attr-defined,no-any-return]
