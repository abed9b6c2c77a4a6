"""The emulated cluster behind `voda serve`: speed, events, state across restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from voda.api.backends import BACKENDS, create_backend
from voda.backends.emulated import ClusterSpecError, EmulatedBackend, parse_cluster
from voda.config import ServerSettings
from voda.core.model import Job
from voda.engine.backend import Backend, SupportsAdoption, SupportsDelete
from voda.engine.events import EventKind


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def backend(clock: Clock, **kwargs: object) -> EmulatedBackend:
    return EmulatedBackend(parse_cluster("2x4"), time_scale=10.0, clock=clock,
                           default_epoch_seconds=40.0, **kwargs)  # type: ignore[arg-type]


def test_it_is_a_backend_that_deletes_and_adopts() -> None:
    b = backend(Clock())
    assert isinstance(b, Backend) and isinstance(b, SupportsDelete)
    assert isinstance(b, SupportsAdoption)
    assert "emulated" in BACKENDS
    made = create_backend(ServerSettings(backend="emulated", cluster="3x2", db="sqlite://"))
    assert sum(n.gpus for n in made.nodes()) == 6


def test_linear_speedup_without_a_profile_then_completion() -> None:
    clock = Clock()
    b = backend(clock)
    b.start(Job("a", 1, 2, epochs=3), (("node-0", 2),))
    # 40 s per epoch on one GPU, 2 GPUs, 10x faster: 2 wall seconds per epoch.
    clock.now += 4.1
    events = b.events()
    assert [(e.kind, e.data.get("epoch")) for e in events] == [
        (EventKind.EPOCH_REPORTED, 1), (EventKind.EPOCH_REPORTED, 2)]
    assert events[0].data["epoch_seconds"] == pytest.approx(20.0)  # in emulated seconds
    assert events[0].data["workers"] == 2
    clock.now += 2.0
    kinds = [e.kind for e in b.events()]
    assert kinds == [EventKind.EPOCH_REPORTED, EventKind.JOB_COMPLETED]
    assert b.running() == {}


def test_rescaling_keeps_progress_and_changes_speed() -> None:
    clock = Clock()
    b = backend(clock)
    b.start(Job("a", 1, 4, epochs=100), (("node-0", 1),))
    clock.now += 2.0  # half an epoch at 4 s per epoch
    b.scale(Job("a", 1, 4, epochs=100), (("node-0", 4),))
    clock.now += 0.5  # the other half at 1 s per epoch
    assert [e.data["epoch"] for e in b.events()] == [1]


def test_a_profiled_job_runs_at_the_profile_speed() -> None:
    clock = Clock()
    seen: list[tuple[str, tuple[int, ...]]] = []

    def speed(profile: str, per_node: tuple[int, ...]) -> float:
        seen.append((profile, per_node))
        return 100.0

    b = backend(clock, profile_epoch_seconds=speed)
    b.profiles["a"] = "cifar10"
    b.start(Job("a", 1, 8, epochs=5), (("node-0", 3), ("node-1", 4)))
    assert seen == [("cifar10", (4, 3))]
    assert b.runs["a"].epoch_seconds == pytest.approx(10.0)


def test_state_survives_a_new_process() -> None:
    clock = Clock()
    b = backend(clock)
    b.start(Job("a", 1, 2, epochs=10), (("node-1", 2),))
    clock.now += 3.0
    b.events()
    state = b.export_state()
    clock.now += 3.0  # the emulated cluster kept running while the service was away
    again = backend(clock)
    again.import_state(state)
    assert again.running() == {"a": (("node-1", 2),)}
    assert [e.data["epoch"] for e in again.events()] == [2, 3]


def test_halt_resumes_from_the_last_epoch() -> None:
    clock = Clock()
    b = backend(clock)
    b.start(Job("a", 1, 1, epochs=10), (("node-0", 1),))
    clock.now += 6.0  # 1.5 epochs at 4 s
    b.halt(Job("a", 1, 1, epochs=10))
    assert b.running() == {}
    b.start(Job("a", 1, 1, epochs=10, completed_epochs=1.0), (("node-0", 1),))
    clock.now += 4.0
    assert [e.data["epoch"] for e in b.events()] == [2]


def test_capacity_is_checked() -> None:
    b = backend(Clock())
    b.start(Job("a", 4, 4), (("node-0", 4),))
    with pytest.raises(ValueError, match="over capacity"):
        b.start(Job("b", 1, 1), (("node-0", 1),))
    with pytest.raises(ValueError, match="no node"):
        b.start(Job("c", 1, 1), (("node-9", 1),))


def test_cluster_specs(tmp_path: Path) -> None:
    nodes = parse_cluster("2x8:a100,1x4")
    assert [(n.gpu_type, n.gpus) for n in nodes] == [("a100", 8), ("a100", 8), ("default", 4)]
    assert len({n.name for n in nodes}) == 3
    path = tmp_path / "cluster.yaml"
    path.write_text("nodes:\n  - {name: big, gpus: 8, gpu_type: a100, leaf: r1}\n"
                    "  - {count: 2, gpus: 4, leaf: r2}\n")
    nodes = parse_cluster(str(path))
    assert [(n.name, n.gpus, n.leaf) for n in nodes] == [
        ("big", 8, "r1"), ("node-1", 4, "r2"), ("node-2", 4, "r2")]
    for bad in ("4", "0x4", "4x", "axb"):
        with pytest.raises(ClusterSpecError, match="NODESxGPUS"):
            parse_cluster(bad)
