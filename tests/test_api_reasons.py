"""The reason reaches the REST job object, `voda jobs` / `voda describe` and Prometheus."""

from __future__ import annotations

from builders import make_cluster, make_job

from voda.api import views
from voda.api.metrics import ServiceMetrics
from voda.api.schemas import JobDetail
from voda.backends.memory import InMemoryBackend
from voda.cli.jobs import conditions_table, jobs_table
from voda.cli.table import Table
from voda.engine.scheduler import Scheduler, SchedulerSettings


def queued() -> Scheduler:
    backend = InMemoryBackend(make_cluster().nodes(1, gpus=4).node_list())
    s = Scheduler(backend, SchedulerSettings(algorithm="FIFO"))
    s.submit(make_job("a").rigid(4).submitted_at(0).obj())
    s.submit(make_job("b").rigid(4).submitted_at(0).obj())
    s.step(0.0)
    return s


def text(table: Table) -> str:
    return table.render()


def test_the_job_object_carries_the_reason_code_message_and_since() -> None:
    s = queued()
    b = s.jobs["b"]
    doc = views.describe(b, 1.0, s.accounted_until, s.cluster, None,
                         reason=s.job_reasons.get("b"))
    JobDetail.model_validate({**doc, "user": "u", "kind": "k"})
    assert doc["reason"]["code"] == "Queued"
    assert "ahead of it a (4 GPUs)" in doc["reason"]["message"]
    assert doc["reason"]["since"] == 0.0
    assert views.summary(s.jobs["a"], reason=s.job_reasons.get("a"))["reason"] is None


def test_voda_jobs_has_a_reason_column_and_wide_adds_the_sentence() -> None:
    s = queued()
    items = [views.summary(r, reason=s.job_reasons.get(r.name)) for r in s.jobs.values()]
    narrow, wide = text(jobs_table(items)), text(jobs_table(items, wide=True))
    assert "REASON" in narrow and "Queued" in narrow and "ahead of it" not in narrow
    assert "MESSAGE" in wide and "ahead of it a (4 GPUs)" in wide


def test_describe_shows_the_reason_as_a_condition() -> None:
    s = queued()
    doc = views.summary(s.jobs["b"], reason=s.job_reasons.get("b"))
    shown = text(conditions_table(doc))
    assert "AtMax" in shown and "False" in shown and "Queued" in shown


def test_prometheus_counts_waiting_jobs_by_reason() -> None:
    s = queued()
    metrics = ServiceMetrics()
    metrics.reasons(s.job_reasons, s.active)
    body = metrics.render().decode()
    assert 'voda_jobs_waiting_by_reason{gpu_type="default",reason="Queued"} 1.0' in body
    s.delete("a", 1.0)
    s.step(60.0)
    metrics.reasons(s.job_reasons, s.active)
    body = metrics.render().decode()
    assert 'voda_jobs_waiting_by_reason{gpu_type="default",reason="Queued"} 0.0' in body
