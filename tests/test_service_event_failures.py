"""An event the engine cannot apply, in the service: it is dropped, counted in /metrics and
shown among the recent errors, and the job's other events (its completion) still count."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.polling import wait_for
from voda.api.service import Service
from voda.backends.emulated import EmulatedBackend, parse_cluster
from voda.config import ServerSettings, User
from voda.engine.events import Event
from voda.engine.scheduler import JobRecord
from voda.spec import parse_submission


def failed_events(service: Service) -> dict[str, float]:
    return {s.labels["kind"]: s.value
            for family in text_string_to_metric_families(service.metrics.render().decode())
            for s in family.samples if s.name == "voda_scheduler_events_failed_total"}


def serve(settings: ServerSettings) -> Service:
    # 60 s epochs (the emulated default) at 600x: an epoch each 0.1 s of wall time.
    service = Service(settings, EmulatedBackend(parse_cluster("1x4"), time_scale=600.0))
    service.start()
    return service


def test_an_epoch_report_that_breaks_is_dropped_and_the_job_still_completes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = ServerSettings(db=f"sqlite:///{tmp_path / 'v.db'}", backend="emulated",
                              rate_limit_seconds=0.0)
    alice = User("alice", admin=True)
    service = serve(settings)
    try:
        job, _ = service.submit(parse_submission(
            b"name: brittle\ncommand: x\nmin: 1\nmax: 4\nepochs: 3\n"), alice)
        name = job["uid"]  # the activity log names jobs by uid

        def broken(record: JobRecord, event: Event) -> None:
            raise ValueError("cannot read this report")

        monkeypatch.setattr(service.scheduler, "_record_epoch", broken)

        def completed() -> bool:
            service.tick()
            return bool(service.get(name, alice)["status"] == "Completed")

        wait_for(completed, timeout=60)
        counted = failed_events(service)
        assert counted.pop("epoch-reported") == 3.0
        assert counted and set(counted.values()) == {0.0}, "every other kind at 0"
        assert service.scheduler.failed_events == 3
        messages = [e.message for e in service.activity.errors()]
        assert any(m.startswith(f"epoch-reported of job {name} dropped: ValueError: cannot "
                                "read this report") for m in messages), messages
    finally:
        service.close()
    again = serve(settings)  # the completion was stored: a restart does not run it again
    try:
        assert again.get(name, alice)["status"] == "Completed"
        assert name not in again.scheduler.active
    finally:
        again.close()
