"""The dashboard says why and when: the job page's reason in one line and its forecast
(assuming no new arrivals), the jobs table's reason column, the scheduler page's jobs
each decision moved (named only to who may see them); everything escaped. In process:
the pages' fragments rendered from a real service."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from polling import wait_for

from voda.api.service import Service
from voda.api.ui import routes, views
from voda.api.ui.views import JobFilters
from voda.backends.emulated import EmulatedBackend, parse_cluster
from voda.config import ServerSettings, User
from voda.core.allocation.reasons import Reason, ReasonCode
from voda.engine.scheduler import JobReason
from voda.spec import parse_submission

ALICE, BOB = User("alice", admin=True), User("bob")
NAMES: dict[str, str] = {}  # name -> uid (the scheduler's key, the pages' links)
HOSTILE = '<img src=x onerror="alert(1)">'


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    """alice's `big` holds the 4 GPUs; bob's `waits` is queued behind it."""
    settings = ServerSettings(db=f"sqlite:///{tmp_path / 'v.db'}", backend="emulated")
    s = Service(settings, EmulatedBackend(parse_cluster("1x4"), time_scale=0.001))
    s.start()
    for name, user, epochs in (("big", ALICE, 100), ("waits", BOB, 10)):
        job, _ = s.submit(parse_submission(
            f"name: {name}\ncommand: x\nmin: 4\nmax: 4\nepochs: {epochs}\n".encode()), user)
        NAMES[name] = job["uid"]
    s.tick()
    yield s
    s.close()


def test_the_job_page_says_why_in_one_line_and_when_assuming_no_new_arrivals(
        service: Service) -> None:
    assert service.scheduler.job_reasons[NAMES["waits"]].code is ReasonCode.QUEUED
    wait_for(lambda: service.get(NAMES["waits"], BOB)["forecast"] is not None, timeout=60)
    html = routes.job_fragment(service, BOB, NAMES["waits"])
    line = html.split('id="job-reason"', 1)[1].split("</p>", 1)[0]
    assert "<b>Queued</b>:" in line and "2nd of 2 in priority class" in line
    forecast = html.split('id="job-forecast"', 1)[1].split("</dd>", 1)[0]
    assert "starts " in forecast and "finishes " in forecast
    assert "assuming no new arrivals" in forecast
    running = routes.job_fragment(service, ALICE, NAMES["big"])
    assert 'id="job-reason"' not in running  # at its max: nothing to explain
    assert "running, finishes" in running


def test_the_jobs_table_has_a_reason_column(service: Service) -> None:
    html = routes.jobs_fragment(service, ALICE, JobFilters())
    assert "<th>reason</th>" in html
    row = html.split(f'data-job="{NAMES["waits"]}"', 1)[1].split("</tr>", 1)[0]
    assert ">Queued</span>" in row and 'title="Queued: 2nd of 2' in row
    big = html.split(f'data-job="{NAMES["big"]}"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="reason">-</td>' in big


def test_reasons_are_escaped(service: Service) -> None:
    record = service.scheduler.jobs[NAMES["waits"]]
    service.scheduler.job_reasons[NAMES["waits"]] = JobReason(
        Reason(ReasonCode.QUEUED, f"ahead of it {HOSTILE} holds 4 GPUs"), 0.0)
    for html in (routes.job_fragment(service, BOB, record.name),
                 routes.jobs_fragment(service, BOB, JobFilters())):
        assert HOSTILE not in html
        assert "&lt;img src=x onerror=" in html


def test_the_scheduler_page_names_the_jobs_a_decision_moved_to_who_may_see_them(
        service: Service) -> None:
    admin = routes.scheduler_fragment(service, ALICE)
    moved = admin.split('class="moved"', 1)[1].split("</td>", 1)[0]
    big = NAMES["big"]
    # Said by name, linked by uid.
    assert f'<a href="/ui/jobs/{big}">big</a>' in moved and "start 0→4" in moved
    other = routes.scheduler_fragment(service, BOB)
    moved = other.split('class="moved"', 1)[1].split("</td>", 1)[0]
    assert "big" not in moved and "1 other job" in moved


def test_a_decision_row_counts_what_it_does_not_name() -> None:
    from voda.api.activity import Decision, Moved
    decision = Decision(0.0, ("JOB_SUBMITTED",), {"start": 30}, 0.001, 0,
                        tuple(Moved(f"j{i}", "start", 0, 1) for i in range(20)))
    row = views.decision_row(decision, lambda name: name in ("j1", "j2"), {})
    assert [m["job"] for m in row["moved"]] == ["j1", "j2"] and row["hidden"] == 28
    html = routes.render("_scheduler.html", schedulers=[], refusals={}, decisions=[row],
                         errors=[], last_reschedule=None,
                         latency_chart={"labels": [], "counts": []})
    assert "28 other jobs" in html


def test_a_reason_names_other_users_jobs_only_to_admins(service: Service) -> None:
    big = NAMES["big"]
    assert big in service.scheduler.job_reasons[NAMES["waits"]].message  # "ahead of it big"
    for html in (routes.job_fragment(service, BOB, NAMES["waits"]),
                 routes.jobs_fragment(service, BOB, JobFilters())):
        assert big not in html and "ahead of it another user&#39;s job" in html
    admin = routes.job_fragment(service, ALICE, NAMES["waits"])
    assert "ahead of it big (4 GPUs)" in admin and big not in admin.split(
        'id="job-reason"', 1)[1].split("</p>", 1)[0]  # said by name, not uid


def test_the_rest_job_object_and_events_name_other_users_jobs_only_to_admins(
        service: Service) -> None:
    """What the REST API, `voda jobs` and `voda describe` read: the same redaction."""
    big, waits = NAMES["big"], NAMES["waits"]
    mine = service.get(waits, BOB)
    assert big not in mine["reason"]["message"]
    assert "another user's job" in mine["reason"]["message"]
    listed, _ = service.list(BOB, None, None, None, 0, 50)
    assert all(big not in (j.get("reason") or {}).get("message", "") for j in listed)
    for event in mine["events"] + service.job_history(waits, BOB):
        assert big not in (event["message"] or "")
    said = service.get(waits, ALICE)["reason"]["message"]
    assert "ahead of it big (4 GPUs)" in said and big not in said  # by name, not uid
    listed, _ = service.list(ALICE, None, None, None, 0, 50)
    assert [j["reason"]["message"] for j in listed if j["uid"] == waits] == [said]


def test_a_reason_says_uid_where_two_jobs_share_a_name(service: Service) -> None:
    """A finished job keeps its name; a new job may take it: a sentence naming both says
    each one's uid too."""
    big, waits = NAMES["big"], NAMES["waits"]
    other = "big-20261128120000-0a0b0c"
    service.job_names.add("big", other, live=False, owner="alice")
    service.scheduler.job_reasons[waits] = JobReason(
        Reason(ReasonCode.SHRUNK, f"its GPUs went to {big} (+2 GPUs), {other} (+2 GPUs)"),
        0.0)
    said = service.get(waits, ALICE)["reason"]["message"]
    assert said == f"its GPUs went to big ({big}) (+2 GPUs), big ({other}) (+2 GPUs)"


def test_a_drain_and_a_switch_confirmation_say_jobs_by_name(service: Service) -> None:
    from voda.api.ui.actions import _drain_preview, _switch_preview

    node = service.scheduler.cluster.nodes[0].name
    drain = _drain_preview(service, ALICE, {"node": node})
    assert drain.items == ["big: 4 GPUs here"]
    # SRJF runs the shorter job first: big (100 epochs) makes way for waits (10).
    switch = _switch_preview(service, ALICE, {"gpu_type": "default", "algorithm": "SRJF"})
    assert switch.items == ["preempts big (4 → 0 GPUs)", "starts waits (0 → 4 GPUs)"]


def test_the_job_page_names_the_gpu_types_a_job_accepts(tmp_path: Path) -> None:
    settings = ServerSettings(db=f"sqlite:///{tmp_path / 'v.db'}", backend="emulated")
    s = Service(settings, EmulatedBackend(parse_cluster("1x4,1x4:a100"), time_scale=0.001))
    s.start()
    try:
        job, _ = s.submit(parse_submission(
            b"name: either\ncommand: x\nmin: 1\nmax: 2\nepochs: 5\n"
            b"gpu_types: [default, a100]\n"), ALICE)
        s.tick()
        html = routes.job_fragment(s, ALICE, job["uid"])
        shown = html.split('id="job-gpu-type">', 1)[1].split("</dd>", 1)[0]
        assert "accepts default, a100" in shown, shown
        one, _ = s.submit(parse_submission(
            b"name: one\ncommand: x\nmin: 1\nmax: 1\nepochs: 5\n"), ALICE)
        html = routes.job_fragment(s, ALICE, one["uid"])
        assert "accepts" not in html.split('id="job-gpu-type">', 1)[1].split("</dd>", 1)[0]
    finally:
        s.close()
