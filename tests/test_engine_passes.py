"""The per-decision passes done in C loops or for fewer jobs, against the plain ones.

- `plan._call` hands back a copy of a placer's plain dict of non-empty tuples instead of
  rebuilding it entry by entry (the plain comprehension stays for anything else);
- `plan.diff` passes over the jobs handed their very tuple back in C (`plain_diff` looks
  at every job);
- `Scheduler._apply` looks for the jobs to mark waiting among the submitted jobs the
  decision gathered, not among every active job (`arrived=None`: every active job).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from voda.core.model import JobStatus
from voda.core.plan import _call, diff, plain_diff
from voda.engine import scheduler as engine
from voda.sim.cluster_file import parse_cluster
from voda.sim.presets import apply_preset
from voda.sim.runner import simulate


class _Tuple(tuple):  # type: ignore[type-arg]
    pass


class _Dict(dict):  # type: ignore[type-arg]
    pass


SHARDS = st.lists(st.tuples(st.sampled_from("abc"), st.integers(-1, 4)), max_size=3)
PLACEMENT = st.one_of(SHARDS.map(tuple), SHARDS, SHARDS.map(_Tuple), st.just(()))
PLACEMENTS = st.dictionaries(st.sampled_from(("j1", "j2", "j3", "j4")), PLACEMENT)


def plain(placement: Mapping[str, Any]) -> dict[str, Any]:
    return {name: tuple(p) for name, p in placement.items() if p}


@given(PLACEMENTS, st.booleans())
def test_call_gives_what_the_comprehension_gives(placement: dict[str, Any],
                                                 subclass: bool) -> None:
    handed = _Dict(placement) if subclass else placement

    def placer(*_: Any) -> Mapping[str, Any]:
        return handed

    got = _call(placer, {}, {}, parse_cluster("2x4"), {})  # type: ignore[arg-type]
    want = plain(handed)
    assert got == want and list(got) == list(want)
    assert all(type(p) is tuple for p in got.values())
    assert all(got[name] is p for name, p in handed.items() if type(p) is tuple and p)
    assert got is not handed


def _waiting_marks(monkeypatch: Any, every_job: bool) -> list[tuple[str, float]]:
    """Every (job, time) a SUBMITTED job became WAITING in a small simulation."""
    marks: list[tuple[str, float]] = []
    set_status = engine.Scheduler._set_status
    apply = engine.Scheduler._apply

    def noting(self: engine.Scheduler, record: engine.JobRecord, status: JobStatus,
               now: float) -> None:
        if record.status is JobStatus.SUBMITTED and status is JobStatus.WAITING:
            marks.append((record.name, now))
        set_status(self, record, status, now)

    def applying(self: engine.Scheduler, plan: Any, now: float, arrived: Any = None) -> Any:
        return apply(self, plan, now, None if every_job else arrived)

    monkeypatch.setattr(engine.Scheduler, "_set_status", noting)
    monkeypatch.setattr(engine.Scheduler, "_apply", applying)
    from tests.results_digest import philly_prefix
    simulate(philly_prefix(300), parse_cluster("8x4"),
             apply_preset(None, "ElasticFIFO", placement="naive"))
    return marks


def test_apply_marks_the_same_jobs_waiting_from_the_arrived_ones(monkeypatch: Any) -> None:
    every = _waiting_marks(monkeypatch, every_job=True)
    monkeypatch.undo()
    arrived = _waiting_marks(monkeypatch, every_job=False)
    assert every and arrived == every



NAMES = ("j1", "j2", "j3", "j4", "j5")
HELD = st.dictionaries(st.sampled_from(NAMES), st.one_of(SHARDS.map(tuple), SHARDS))


@given(HELD, HELD, st.sets(st.sampled_from(NAMES)))
def test_diff_gives_what_the_plain_loop_gives(old: dict[str, Any], drawn: dict[str, Any],
                                              same: set[str]) -> None:
    # Some jobs handed their very tuple back, the others what was drawn (equal or not).
    new = {name: old[name] if name in same and name in old else p
           for name, p in drawn.items()}
    assert diff(old, new) == plain_diff(old, new)
