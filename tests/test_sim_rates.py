"""The simulator's per-epoch rates and completion predictions, worked out once per change of
allocation (`SimJob.rates_by_epoch`, `progress.gains`), against the plain per-epoch model."""

from __future__ import annotations

import math
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from voda.core.model import Job, Node
from voda.sim.backend import SimBackend, SimJob, emulated_epoch_seconds
from voda.sim.profiles import load_profile, profile_names
from voda.sim.progress import gain, gains
from voda.sim.throughput import step_time
from voda.sim.workloads import JobSpec, load_workload

NODES = [Node(f"n{i}", 4, leaf=f"leaf-{i // 2}") for i in range(4)]
PROFILES = profile_names()


def plain_rate(sim: SimJob, epoch: int) -> float:
    """The rate at `epoch` as the model defines it, worked out from scratch."""
    if sim.spec.emulated_speed is not None and sim.profile is not None:
        return sim.spec.emulated_speed / emulated_epoch_seconds(sim.profile.name, sim.layout)
    if sim.profile is not None and sim.split is not None:
        step = sim.slowdown * step_time(sim.profile, sim.layout, sim.split, sim.spine)
        return gain(sim.profile, sim.split.effective_batch, epoch) / step
    return float(sum(sim.counts))


def plain_predict(sim: SimJob, integer_time: bool) -> float:
    """The completion time if nothing changes, one epoch after the other."""
    t = sim.t + sim.countdown
    progress = sim.progress
    for epoch in range(sim.epoch, len(sim.boundaries) - 1):
        r = plain_rate(sim, epoch)
        if r <= 0:
            return math.inf
        need = (sim.boundaries[epoch + 1] - progress) / r
        t += round(need) if integer_time else max(need, 0.0)
        progress = sim.boundaries[epoch + 1]
    return t


def spec_of(kind: str, profile: str, epochs: int, adaptive: bool) -> JobSpec:
    if kind == "work":
        return JobSpec("x", 0.0, 0, 1, 16, None, epochs=epochs, work=5000.0)
    emulated = 10.0 if kind == "emulated" else None
    return JobSpec("x", 0.0, 0, 1, 16, None, epochs=epochs, profile=profile,
                   adaptive=adaptive and emulated is None, emulated_speed=emulated)


placements = st.lists(st.tuples(st.sampled_from([n.name for n in NODES]), st.integers(1, 4)),
                      min_size=1, max_size=4, unique_by=lambda p: p[0])


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(["profiled", "emulated", "work"]),
       profile=st.sampled_from(PROFILES), epochs=st.integers(1, 12), adaptive=st.booleans(),
       moves=st.lists(st.tuples(placements, st.floats(0.0, 5000.0)), min_size=1, max_size=4),
       integer_time=st.booleans(), spine=st.sampled_from([1.0, 2.5]),
       layout_speed=st.sampled_from(["actual", "packed", "best"]))
def test_rates_and_predictions_match_the_plain_model(
    kind: str, profile: str, epochs: int, adaptive: bool,
    moves: list[tuple[list[tuple[str, int]], float]], integer_time: bool, spine: float,
    layout_speed: str,
) -> None:
    spec = spec_of(kind, profile, min(epochs, load_profile(profile).epochs), adaptive)
    backend = SimBackend(list(NODES), {"x": spec}, integer_time=integer_time,
                         spine_oversubscription=spine, layout_speed=layout_speed)
    for placement, wait in moves:
        sim = backend.jobs.get("x")
        if sim is not None and sim.finished is not None:
            break
        (backend.start if sim is None else backend.scale)(Job("x"), tuple(placement))
        sim = backend.jobs["x"]
        assert backend._predict(sim) == plain_predict(sim, integer_time)
        for epoch in range(len(sim.boundaries)):
            sim.epoch, saved = epoch, sim.epoch
            assert sim.rate() == plain_rate(sim, epoch)
            sim.epoch = saved
        backend.advance(backend.now + wait)
        backend.events()


@settings(max_examples=40, deadline=None)
@given(profile=st.sampled_from(PROFILES), batch=st.integers(1, 40000), epochs=st.integers(1, 120))
def test_gains_are_gain_at_each_epoch(profile: str, batch: int, epochs: int) -> None:
    p = load_profile(profile)
    batch = max(p.init_batch_size, min(batch, p.max_batch_size))
    table = gains(p.name, p.init_batch_size, batch, epochs)
    assert table == tuple(gain(p, batch, e) for e in range(epochs))


def test_a_workload_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text("arrival,max,duration\n0,1,100\n")
    first = load_workload(path)
    assert load_workload(path) == first
    path.write_text("arrival,max,duration\n0,1,100\n5,2,50\n")
    assert len(load_workload(path).jobs) == 2
