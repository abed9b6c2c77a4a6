"""A node's change list (the dashboard's node page) has the changes the backend makes as
well as the administrators': a node it stops offering is noted lost, and noted again
when it comes back. In process: a real service and store over an in-memory backend that
loses and regains a node by itself, as a Kubernetes node deleted or gone NotReady."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from voda.api.service import Service
from voda.backends.emulated import EmulatedBackend, parse_cluster
from voda.config import ServerSettings, User
from voda.core.model import Node
from voda.engine.events import Event, EventKind

ADMIN = User("root", admin=True)


class LosingBackend(EmulatedBackend):
    """The emulated cluster, with nodes that leave and come back by themselves and say so
    in events, as the Kubernetes backend's do."""

    def lose(self, name: str) -> Node:
        node = next(n for n in self.nodes() if n.name == name)
        self.remove_node(name)
        self._outbox.append(Event(EventKind.NODE_REMOVED, self.clock(), node=node))
        return node

    def regain(self, node: Node) -> None:
        self.add_node(node)
        self._outbox.append(Event(EventKind.NODE_ADDED, self.clock(), node=node))


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[Service, LosingBackend]]:
    backend = LosingBackend(parse_cluster("2x4"), time_scale=0.001)
    s = Service(ServerSettings(db=f"sqlite:///{tmp_path / 'v.db'}", backend="emulated"),
                backend)
    s.start()
    s.tick()
    yield s, backend
    s.close()


def states(service: Service, node: str) -> list[tuple[str, str | None]]:
    return [(e["state"], e["message"]) for e in service.node_events(node)]


def test_a_node_the_backend_loses_and_offers_again_is_in_its_change_list(
        service: tuple[Service, LosingBackend]) -> None:
    s, backend = service
    name = backend.nodes()[1].name
    assert states(s, name) == []
    node = backend.lose(name)
    s.tick()
    s.tick()  # noted once, not at every step
    assert states(s, name) == [("lost", "the backend no longer offers this node")]
    assert name in {n["name"] for n in s.cluster_view(ADMIN)["lost_nodes"]
                    if n.get("state") == "lost"}
    backend.regain(node)
    s.tick()
    assert states(s, name)[-1] == ("active", "the backend offers this node")
    assert states(s, backend.nodes()[0].name) == []


def test_an_administrators_change_is_noted_once(
        service: tuple[Service, LosingBackend]) -> None:
    s, backend = service
    name = backend.nodes()[0].name
    s.drain_node(name)
    s.tick()
    s.add_node(s.drained[name])  # uncordoned
    s.tick()
    assert states(s, name) == [("drained", None), ("active", None)]
    other = backend.nodes()[1].name
    s.remove_node(other)
    s.tick()
    assert states(s, other) == [("removed", None)]  # not "lost" as well
