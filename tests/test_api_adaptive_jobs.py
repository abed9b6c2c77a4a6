"""Batch-adaptive jobs over HTTP on the emulated cluster (`adaptive: true`).

The emulated cluster runs them with the simulator's adaptive job model in emulated time
(voda.backends.emulated_adaptive): they declare their batch limits, then report goodput
models and epochs. Bad values get a 422 naming the field.
"""

from __future__ import annotations

import pytest

from voda.backends.emulated import EmulatedBackend, parse_cluster
from voda.core.model import Job
from voda.engine.events import EventKind
from voda.sim.backend import SimBackend
from voda.sim.workloads import load_workload
from voda_testing.serve import ServeProcess

BAD_ADAPTIVE = [
    ("adaptive that is not a boolean", {"adaptive": "yes", "profile": "cifar10"}, "adaptive"),
    ("a batch size without adaptive", {"batch_size": 128, "profile": "cifar10"}, "batch_size"),
    ("an adaptive job without a profile", {"adaptive": True}, "profile"),
    ("a batch size outside the profile's range",
     {"adaptive": True, "profile": "cifar10", "batch_size": 10}, "batch_size"),
    ("a batch size over the bound", {"adaptive": True, "profile": "cifar10",
                                     "batch_size": 10**12}, "batch_size"),
    ("more GPUs than the batch range allows",
     {"adaptive": True, "profile": "cifar10", "batch_size": 128, "max": 8}, "max"),
    ("more epochs than profiled", {"adaptive": True, "profile": "cifar10", "epochs": 100_000},
     "epochs"),
]


@pytest.mark.parametrize(("extra", "field"), [(e, f) for _, e, f in BAD_ADAPTIVE],
                         ids=[f"refuses {what}" for what, *_ in BAD_ADAPTIVE])
def test_bad_adaptive_fields_get_a_422_naming_the_field(api_server: ServeProcess,
                                                       extra: dict[str, object],
                                                       field: str) -> None:
    with api_server.client("alice") as client:
        response = client.post("/v1/jobs", json={"name": "adapt", "command": "x", **extra})
    assert response.status_code == 422, response.text
    assert field in [e["field"] for e in response.json()["errors"]], response.text


def test_an_adaptive_job_declares_its_batch_limits_once_admitted(
        api_server: ServeProcess) -> None:
    import time

    with api_server.client("alice") as client:
        created = client.post("/v1/jobs", json={
            "name": "adapt", "command": "train", "profile": "cifar10", "adaptive": True,
            "min": 1, "max": 4, "epochs": 2})
        assert created.status_code == 201, created.text
        name = created.json()["name"]
        deadline = time.monotonic() + 10
        goodput = None
        while goodput is None and time.monotonic() < deadline:
            time.sleep(0.2)
            goodput = client.get(f"/v1/jobs/{name}").json()["goodput"]
        assert goodput is not None
        client.delete(f"/v1/jobs/{name}")


def test_the_emulated_adaptive_job_is_the_simulators_in_emulated_time() -> None:
    """The same job, placement and measurements: its reports come at the simulator's
    times divided by the time scale, in the simulator's (emulated) seconds."""
    spec = load_workload("workload-1", job_model="adaptive").jobs[0]
    job = Job(spec.name, spec.min_workers, spec.max_workers, epochs=3)
    spec = spec.__class__(**{**{f: getattr(spec, f) for f in spec.__slots__}, "epochs": 3})
    scale, origin = 100.0, 50.0
    now = [origin]
    emulated = EmulatedBackend(parse_cluster("2x4"), time_scale=scale, clock=lambda: now[0])
    emulated.profiles[spec.name] = str(spec.profile)
    emulated.specs[spec.name] = {"adaptive": True}
    declared = emulated.events()
    assert [e.kind for e in declared] == [EventKind.GOODPUT_REPORTED]
    assert declared[0].data["goodput"].perf is None  # batch limits only
    assert emulated.job_resumes_within_epoch(spec.name)
    placement = (("node-0", 4), ("node-1", 2))
    emulated.start(job, placement)
    sim = SimBackend(parse_cluster("2x4"), {spec.name: spec}, penalty=0.0,
                     start=0.0)
    sim.start(job, placement)
    seen: list = []
    expected: list = []
    for k in range(1, 200):
        now[0] = origin + k * 0.5
        seen += emulated.events()
        sim.advance((now[0] - origin) * scale)
        expected += sim.events()
        if any(e.kind is EventKind.JOB_COMPLETED for e in seen):
            break
    assert [e.kind for e in seen] == [e.kind for e in expected]
    assert EventKind.JOB_COMPLETED in {e.kind for e in seen}
    assert [(e.time - origin) * scale for e in seen] == pytest.approx([e.time for e in expected])
    epochs = [e for e in seen if e.kind is EventKind.EPOCH_REPORTED]
    assert [e.data["epoch_seconds"] for e in epochs] == pytest.approx(
        [e.data["epoch_seconds"] for e in expected if e.kind is EventKind.EPOCH_REPORTED])
    assert emulated.running() == {} and emulated.specs == {}


def test_an_adaptive_job_survives_a_restart_of_the_service() -> None:
    spec = load_workload("workload-1", job_model="adaptive").jobs[0]
    job = Job(spec.name, spec.min_workers, spec.max_workers, epochs=spec.epochs)
    now = [10.0]
    first = EmulatedBackend(parse_cluster("2x4"), time_scale=100.0, clock=lambda: now[0])
    first.profiles[spec.name] = str(spec.profile)
    first.specs[spec.name] = {"adaptive": True}
    first.events()
    first.start(job, (("node-0", 4),))
    now[0] += 2.0
    reported = [e for e in first.events() if e.kind is EventKind.EPOCH_REPORTED]
    assert reported
    state = first.export_state()
    again = EmulatedBackend(parse_cluster("2x4"), time_scale=100.0, clock=lambda: now[0])
    again.import_state(state)
    again.profiles[spec.name] = str(spec.profile)
    again.specs[spec.name] = {"adaptive": True}
    assert again.running() == {spec.name: (("node-0", 4),)}
    assert again.events() == []  # nothing declared again: it has measured
    now[0] += 1.0
    later = [e.data["epoch"] for e in again.events() if e.kind is EventKind.EPOCH_REPORTED]
    assert later and later[0] == reported[-1].data["epoch"] + 1


class ProcessCluster:
    """A backend that runs what a job's command does (as the local and Kubernetes ones)."""

    name = "process"

    def start(self, job: Job, placement: object) -> None: ...
    def scale(self, job: Job, placement: object) -> None: ...
    def halt(self, job: Job) -> None: ...

    def nodes(self) -> list:  # type: ignore[type-arg]
        return parse_cluster("1x4")

    def events(self) -> list:  # type: ignore[type-arg]
        return []


def test_a_backend_that_does_not_emulate_jobs_refuses_adaptive(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """On a backend that runs real processes `adaptive` would do nothing: it is refused,
    naming the field (a real batch-adaptive process reports its goodput itself)."""
    from voda.api.service import Service
    from voda.config import ServerSettings, User
    from voda.spec.errors import SpecError
    from voda.spec.parse import parse_document

    settings = ServerSettings(backend="emulated", cluster="1x4",
                              db=f"sqlite:///{tmp_path / 'voda.db'}")
    service = Service(settings, ProcessCluster())
    service.start()
    try:
        spec = parse_document({"name": "a", "command": "x", "profile": "cifar10",
                               "adaptive": True})
        with pytest.raises(SpecError) as refused:
            service.submit(spec, User("root", admin=True))
        assert [e.field for e in refused.value.errors] == ["adaptive"]
    finally:
        service.close()


def test_a_job_forgotten_mid_epoch_leaves_the_others_reporting() -> None:
    """A deleted (or ended) job's state goes while its next epoch end is still due: the
    emulated cluster must skip that entry, not fail every later step, which lost the
    other jobs' reports and completions with it."""
    specs = load_workload("workload-1", job_model="adaptive").jobs[:2]
    now = [10.0]
    emulated = EmulatedBackend(parse_cluster("2x4"), time_scale=100.0, clock=lambda: now[0])
    jobs = []
    for spec, epochs in zip(specs, (50, 2), strict=True):  # the first outlives its delete
        emulated.profiles[spec.name] = str(spec.profile)
        emulated.specs[spec.name] = {"adaptive": True}
        jobs.append(Job(spec.name, spec.min_workers, spec.max_workers, epochs=epochs))
    emulated.events()
    emulated.start(jobs[0], (("node-0", 4),))
    emulated.start(jobs[1], (("node-1", 4),))
    now[0] += 0.2
    emulated.events()
    assert set(emulated.running()) == {jobs[0].name, jobs[1].name}
    emulated.delete(jobs[0].name)
    deleted_at = now[0]
    seen: list = []
    for _ in range(400):
        now[0] += 0.5
        seen += emulated.events()
        if any(e.kind is EventKind.JOB_COMPLETED for e in seen):
            break
    # What the deleted job did before its delete may still be told; nothing after it.
    assert all(e.time <= deleted_at for e in seen if e.job == jobs[0].name)
    assert {e.job for e in seen if e.time > deleted_at} == {jobs[1].name}
    assert EventKind.JOB_COMPLETED in {e.kind for e in seen}
    assert emulated.running() == {}


def test_events_made_before_a_failure_part_way_are_handed_over_by_the_next_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulated cluster makes its events in parts (declarations, the adaptive jobs',
    the epoch-time jobs'); one part raising must not lose what the parts before it made,
    since their state (a declaration made) has moved on and will not make them again."""
    spec = load_workload("workload-1", job_model="adaptive").jobs[0]
    emulated = EmulatedBackend(parse_cluster("2x4"), time_scale=100.0, clock=lambda: 10.0)
    emulated.profiles[spec.name] = str(spec.profile)
    emulated.specs[spec.name] = {"adaptive": True}
    working = emulated.adaptive_jobs.events

    def broken(wall: float) -> list:
        raise KeyError("the emulated cluster broke")

    monkeypatch.setattr(emulated.adaptive_jobs, "events", broken)
    with pytest.raises(KeyError):
        emulated.events()
    monkeypatch.setattr(emulated.adaptive_jobs, "events", working)
    declared = emulated.events()
    assert [(e.kind, e.job) for e in declared] == [(EventKind.GOODPUT_REPORTED, spec.name)]
    assert emulated.events() == [], "handed over once"
