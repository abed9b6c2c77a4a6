"""What the dashboard pages show, from the service's views (no server, no browser)."""

from __future__ import annotations

import asyncio

import pytest

from voda.api.activity import ErrorEntry, histogram
from voda.api.errors import NotFound
from voda.api.history import RANGES
from voda.api.ui import views
from voda.api.ui.routes import _events, epoch_chart, latency_chart, render
from voda.web import TEMPLATES_DIR, environment
from voda.web.filters import chart_text, duration, to_json


def node(name: str, gpus: int, jobs: dict[str, int], state: str = "ready",
         leaf: str = "leaf-1", spine: str = "spine", gpu_type: str = "default",
         others: int = 0) -> dict:
    used = sum(jobs.values()) + others
    return {"name": name, "gpu_type": gpu_type, "gpus": gpus, "used": used, "free": gpus - used,
            "leaf": leaf, "spine": spine, "state": state, "jobs": jobs, "others": others,
            "schedulable": state == "ready"}


def cluster_view(nodes: list[dict], jobs: dict[str, dict], lost: list[dict] = ()) -> dict:
    types = sorted({n["gpu_type"] for n in nodes})
    return {"nodes": nodes, "lost_nodes": list(lost), "jobs": jobs, "last_reschedule": None,
            "last_error": None, "errors": {},
            "gpu_types": [{"gpu_type": t, "total": 8, "used": 2, "free": 6,
                           "algorithm": "ElasticFIFO", "waiting_jobs": 1, "utilization": 0.25,
                           "fragmentation": 0.5, "error": None} for t in types]}


def test_a_node_shows_one_cell_per_gpu_jobs_first_then_others_then_free() -> None:
    cells = views.gpu_cells(node("n", 5, {"b": 1, "a": 2}, others=1),
                            {"a": {"user": "u", "workers": 3}})
    assert [c.job for c in cells] == ["a", "a", "b", None, None]
    assert [c.kind for c in cells] == ["job", "job", "job", "others", "free"]
    assert cells[0].owner == "u" and cells[0].workers == 3
    lost = views.gpu_cells(node("gone", 2, {}, state="lost"), {})
    assert [c.kind for c in lost] == ["gone", "gone"]


def test_nodes_are_grouped_by_spine_then_leaf_and_filtered_by_gpu_type() -> None:
    view = cluster_view([node("n1", 4, {}, leaf="l1", spine="s1"),
                         node("n2", 4, {}, leaf="l2", spine="s1"),
                         node("n3", 8, {}, leaf="l3", spine="s2", gpu_type="a100")], {})
    page = views.cluster_page(view, None)
    assert {s: list(leaves) for s, leaves in page["spines"].items()} == {
        "s1": ["l1", "l2"], "s2": ["l3"]}
    only = views.cluster_page(view, "a100")
    assert list(only["spines"]) == ["s2"] and only["selected"] == "a100"
    assert only["counts"]["ready"] == 1 and page["counts"]["ready"] == 3  # of the tab's type
    assert views.cluster_page(view, "unknown")["selected"] is None


def test_cordoned_and_lost_nodes_and_anonymous_usage_are_marked() -> None:
    view = cluster_view([node("ok", 4, {"mine": 1}, others=2),
                         node("drained", 4, {}, state="cordoned")],
                        {"mine": {"user": "alice", "workers": 1, "status": "Running"}},
                        lost=[node("gone", 4, {}, state="lost")])
    html = render("_cluster.html", **views.cluster_page(view, None))
    assert 'class="node cordoned" data-node="drained"' in html
    assert 'class="node lost" data-node="gone"' in html
    assert '<span class="badge cordoned">cordoned</span>' in html
    assert html.count('class="gpu anon"') == 2 and html.count('class="gpu gone"') == 4
    assert "mine · owner alice · 1 workers" in html
    assert "other users' jobs (2 GPUs)" in html
    assert "1 cordoned · 1 lost" in html
    assert "style=" not in html  # the Content-Security-Policy allows no inline style


def test_jobs_are_numbered_and_coloured_in_the_order_the_map_shows_them() -> None:
    """Not by a hash of the name (two jobs could share a colour): in order, so jobs side by
    side differ; each cell carries its job's number, its name and its node for screen
    readers, and takes the keyboard's focus."""
    jobs = {name: {"user": "alice", "workers": 1} for name in "abcdefghij"}
    view = cluster_view([node("n1", 8, {"z": 1, "b": 1}, leaf="l1", spine="s2"),
                         node("n2", 8, {"a": 1}, leaf="l2", spine="s1"),
                         node("n3", 8, dict.fromkeys("cdefghij", 1), leaf="l1",
                              spine="s2")],
                        {**jobs, "z": {"user": "bob", "workers": 1}})
    page = views.cluster_page(view, None)
    order = [name for name, _ in page["legend"]]
    assert order == ["b", "z", "c", "d", "e", "f", "g", "h", "i", "j", "a"]  # s2 first
    marks = page["marks"]
    assert [marks[name].number for name in order] == list(range(1, 12))
    assert [marks[name].colour for name in order[:8]] == [f"job-c{i}" for i in range(8)]
    assert marks["i"].colour == "job-c0"  # the ninth: colours repeat, numbers do not
    html = render("_cluster.html", **page)
    assert ('<a class="gpu job-c1" id="gpu-n1-2" data-job="z" href="/ui/jobs/z"' in html)
    assert 'aria-label="job 2, z: GPU 2 of node n1, owner bob, 1 workers"' in html
    assert '<li data-job="z"><span class="sw job-c1">2</span>' in html
    assert 'aria-label="GPU 3 of node n1: free"' in html


def test_a_chart_says_what_it_shows_in_words_and_as_a_table() -> None:
    speed = views.speed_series({1: 100.0, 2: 60.0}, max_workers=3)
    spec = epoch_chart(speed)
    text = chart_text(spec)
    assert text["name"] == "Epoch time by workers"
    assert text["columns"] == ["workers", "model (Amdahl fit)", "measured"]
    assert text["rows"][0] == ["1", "100", "100"] and text["rows"][2][2] == "-"
    assert "measured from 60 to 100 (2 points, workers 1 to 2)" in text["summary"]
    page = environment().from_string(
        '{% from "_chart.html" import chart %}{{ chart("c", spec) }}').render(spec=spec)
    assert 'role="img" aria-label="Epoch time by workers" aria-describedby="c-summary"' in page
    assert '<p class="vh" id="c-summary">' in page and "<table>" in page
    bars = chart_text(latency_chart([("1", 3), ("10", 0), (">10", 1)]))
    assert bars["summary"] == ("Decision latency (recent decisions), decisions by decision "
                               "time, ms (bucket's upper bound): 1: 3; >10: 1.")
    assert chart_text({"title": "Empty", "xs": [], "series": []})["summary"] == \
        "Empty: no data yet."


def test_a_long_chart_keeps_its_latest_rows() -> None:
    spec = {"kind": "lines", "title": "t", "x": {"time": True}, "xs": list(range(500)),
            "series": [{"label": "GPUs", "values": [1] * 500}]}
    text = chart_text(spec)
    assert len(text["rows"]) == 200 and text["dropped"] == 300


def test_a_stream_whose_job_is_gone_says_so_and_ends_on_purpose() -> None:
    """The page's stream (sse-close="end" in live.html) is told to stop, rather than
    reconnect again and again to a job that is no longer there."""

    class Request:
        async def is_disconnected(self) -> bool:
            return False

    def produce() -> str:
        raise NotFound("job 'gone' not found")

    async def collect() -> list[str]:
        return [message async for message in _events(Request(), produce)]

    messages = asyncio.run(collect())
    assert messages[-2] == "event: update\ndata: <p class=\"error\">job 'gone' not found</p>\n\n"
    assert messages[-1] == "event: end\ndata: gone\n\n"
    assert 'sse-close="end"' in (TEMPLATES_DIR / "live.html").read_text()


def test_a_refused_gpu_type_is_shown_on_the_cluster_page() -> None:
    view = cluster_view([node("a", 4, {}), node("b", 4, {}, gpu_type="a100")], {})
    view["gpu_types"][1]["error"] = "too many migrations"
    html = render("_cluster.html", **views.cluster_page(view, None))
    assert html.count("refused:") == 1 and "refused: too many migrations" in html


def test_only_administrators_read_why_a_decision_was_refused() -> None:
    uid = "secret-x-20261128120000-0a0a0a"
    entry = ErrorEntry(1.0, "a100", f"rescheduling refused: job {uid} cannot move")
    name_of = {uid: "secret-x"}
    assert views.error_row(entry, True, "hidden", name_of)["message"] == (
        "rescheduling refused: job secret-x cannot move")  # said by name
    shown = views.error_row(entry, False, "hidden", name_of)
    assert shown == {"time": 1.0, "gpu_type": "a100", "message": "hidden"}


def test_allocation_series_steps_through_starts_rescales_migrations_and_preemptions() -> None:
    job = {"submit_time": 100.0, "finish_time": 200.0}
    history = [
        {"time": 100.0, "field": "status", "old": None, "new": "Submitted"},
        {"time": 110.0, "field": "start", "old": "0", "new": "2"},
        {"time": 120.0, "field": "scale-out", "old": "2", "new": "4"},
        {"time": 130.0, "field": "migrate", "old": "4", "new": "4"},
        {"time": 140.0, "field": "halt", "old": "4", "new": "0"},
        {"time": 150.0, "field": "priority", "old": "1", "new": "0"},
        {"time": 160.0, "field": "start", "old": "0", "new": "1"},
        {"time": 200.0, "field": "status", "old": "Running", "new": "Completed"},
    ]
    series = views.allocation_series(job, history, now=999.0)
    assert series["times"] == [100.0, 110.0, 120.0, 130.0, 140.0, 160.0, 200.0, 200.0]
    assert series["gpus"] == [0, 2, 4, 4, 0, 1, 0, 0]
    assert series["events"] == {"start": [(110.0, 2), (160.0, 1)], "rescale": [(120.0, 4)],
                                "migration": [(130.0, 4)], "preemption": [(140.0, 4)]}


def test_a_running_job_is_drawn_up_to_now() -> None:
    series = views.allocation_series({"submit_time": 0.0, "finish_time": None},
                                     [{"time": 5.0, "field": "start", "old": "0", "new": "3"}],
                                     now=50.0)
    assert series["times"][-1] == 50.0 and series["gpus"][-1] == 3


def test_speed_series_puts_measurements_beside_the_model() -> None:
    speed = views.speed_series({1: 100.0, 2: 60.0, "4": 40.0}, max_workers=6)
    assert speed["workers"] == [1, 2, 3, 4, 5, 6]
    assert speed["measured"] == [100.0, 60.0, None, 40.0, None, None]
    # Amdahl's law fitted to the measurements: decreasing epoch time, a speed-up that grows.
    assert all(a > b for a, b in zip(speed["model"], speed["model"][1:], strict=False))
    assert speed["speedup_model"][0] == pytest.approx(1.0)
    assert speed["speedup_measured"][1] == pytest.approx(100.0 / 60.0)
    unknown = views.speed_series({}, max_workers=3)
    assert unknown["model"] == [] and unknown["speedup_model"] == [1.0, 2.0, 3.0]


def test_history_rows_are_newest_first_and_in_words() -> None:
    rows = views.history_rows([{"time": 1.0, "field": "start", "old": "0", "new": "2"},
                               {"time": 2.0, "field": "priority", "old": "1", "new": "0"}])
    assert [r["text"] for r in rows] == ["priority: 1 → 0", "start (start): 0 → 2 GPUs"]


def test_latency_histogram_buckets() -> None:
    counts = dict(histogram([0.0001, 0.001, 0.002, 5.0], (0.001, 0.01)))
    assert counts == {"1": 2, "10": 1, ">10": 1}


def test_json_in_a_page_cannot_close_its_script_element() -> None:
    text = str(to_json({"name": "</script><script>alert(1)</script>"}))
    assert "</script>" not in text
    with pytest.raises(ValueError):
        to_json({"x": float("nan")})


@pytest.mark.parametrize(("seconds", "text"), [(None, "-"), (59, "59s"), (185, "3m05s"),
                                               (7300, "2h01m"), (200000, "2d07h")])
def test_durations(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


def test_the_queues_page_shows_usage_against_guarantee_and_borrowing_per_queue() -> None:
    from voda.api.ui.queues import held_chart, queue_rows

    def usage(gpu_type: str, used: int, guarantee: int, **more: int | None) -> dict:
        return {"gpu_type": gpu_type, "used": used, "guarantee": guarantee,
                "borrowed": max(0, used - guarantee), "lent": 0, "waiting_jobs": 0,
                "borrowing_limit": None, "lending_limit": None, "reclaimed_by_shrinking": 0,
                "reclaimed_by_preemption": 0, **more}

    queues = [{"name": "team-a", "weight": 2.0, "source": "config",
               "usage": [usage("a100", 1, 4, lent=3), usage("default", 0, 0)]},
              {"name": "default", "weight": 1.0, "source": "implicit",
               "usage": [usage("a100", 7, 0, borrowing_limit=8, reclaimed_by_shrinking=2,
                               reclaimed_by_preemption=1, waiting_jobs=1)]}]
    rows = queue_rows(queues, "a100")
    page = render("queues.html", title="Queues", page="queues", user=None, form_field="f",
                  form_token="t", gpu_types=["a100", "default"], selected="a100", rows=rows,
                  chart=held_chart(rows, "a100"), ranges=RANGES, time_range="hour",
                  every=60.0, refresh=60.0, history_charts=[])
    assert 'id="queue-history-empty"' in page
    team_a = page.split('data-queue="team-a"')[1].split("</tr>")[0]
    assert '"num held">1 / 4<' in team_a and '"num lent">3<' in team_a
    assert 'class="num">2<' in team_a  # its weight, as given
    default = page.split('data-queue="default"')[1].split("</tr>")[0]
    assert "(implicit)" in default and '"num borrowed">7<' in default
    assert '"num reclaimed">2 / 1<' in default and 'class="num">8<' in default
    assert '"num waiting">1<' in default
    assert [r["name"] for r in queue_rows(queues, "default")] == ["team-a"]


def test_the_queues_page_draws_each_queue_s_usage_against_guarantee_and_borrowing_over_time(
        ) -> None:
    from voda.api.ui.queues import queue_history_chart

    def point(t: float, used: float, limit: float | None) -> dict:
        return {"time": t, "used": used, "guarantee": 4.0, "borrowed": max(0.0, used - 4),
                "lent": 0.0, "waiting": 0.0, "borrowing_limit": limit}

    limited = queue_history_chart("team-a", [point(60.0, 2.0, 2.0), point(120.0, 5.0, 2.0),
                                             point(180.0, 6.0, None)], "a100", "last hour")
    assert limited["title"] == "team-a: a100 GPUs, last hour"
    assert limited["xs"] == [60.0, 120.0, 180.0]
    assert [s["label"] for s in limited["series"]] == [
        "held", "guarantee", "guarantee + borrowing limit"]
    assert limited["series"][0]["values"] == [2.0, 5.0, 6.0]
    assert limited["series"][2]["values"] == [6.0, 6.0, None]  # unlimited: a gap
    unlimited = queue_history_chart("team-b", [point(60.0, 0.0, None)], "a100", "last day")
    assert [s["label"] for s in unlimited["series"]] == ["held", "guarantee"]
    page = render("queues.html", title="Queues", page="queues", user=None, form_field="f",
                  form_token="t", gpu_types=["a100"], selected="a100", rows=[],
                  chart={"kind": "bars", "series": [], "xs": []}, ranges=RANGES,
                  time_range="day", every=60.0, refresh=60.0,
                  history_charts=[limited, unlimited])
    drawn = page.split('id="queue-history-charts"')[1]
    assert 'id="queue-history-chart-1"' in drawn and 'id="queue-history-chart-2"' in drawn
    assert 'aria-label="team-a: a100 GPUs, last hour"' in drawn
    assert "held from 2 to 6" in drawn  # the screen-reader summary
    assert "guarantee + borrowing limit" in drawn.split('id="queue-history-chart-1-data"')[1]
    day = page.split('data-range="day"')[0].rsplit("<a ", 1)[1]
    assert 'aria-current="page"' in day and "gpu_type=a100&amp;range=day" in day
