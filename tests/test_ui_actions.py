"""The dashboard's History page, its page per node, and its actions, in a real Chromium
against a running `voda serve --backend emulated` (tests/dashboard_server.py).

Each action is tried both ways: Cancel in its confirmation changes nothing, Confirm does
it. A viewer (read-only token) is shown no action and is refused by the server when it
posts one anyway, as the API refuses its writes; a non-administrator is refused the
administrators' actions."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from browser import screenshot
from dashboard_server import (
    VIEWER,
    VIEWER_TOKEN,
    cookies,
    form_token,
    job,
    login,
    running_dashboard,
    submit,
)
from polling import wait_for

from tests.conftest import ServeProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with running_dashboard(tmp_path_factory.mktemp("actions")) as process:
        yield process


def running(server: ServeProcess, user: str, name: str) -> bool:
    return job(server, user, name)["status"] == "Running"


def test_history_shows_the_chosen_time_range_and_gpu_type(server: ServeProcess, page) -> None:
    name = submit(server, "alice", "hist", max=4)
    wait_for(lambda: running(server, "alice", name))
    login(page, server, "alice", "/ui/history?gpu_type=default")
    page.locator("#history-chart-1 canvas").first.wait_for(timeout=15000)
    assert page.get_attribute("#range-tabs [data-range=hour]", "aria-current") == "page"
    assert "default GPUs, last hour" in page.get_attribute("#history-chart-1 .plot",
                                                           "aria-label")
    # The data behind each chart is a table, for those who do not see it.
    page.click("#history-chart-1-data summary")
    rows = page.locator("#history-chart-1-data tbody tr")
    assert rows.count() >= 1
    assert page.locator("#history-chart-1-data thead th").all_inner_texts() == [
        "time", "in service", "allocated", "in use"]
    # The charts redraw by themselves as samples come (no reload), the table kept open.
    about = page.inner_text("#history-about")
    wait_for(lambda: page.inner_text("#history-about") != about, timeout=45)
    page.locator("#history-chart-1 canvas").first.wait_for(timeout=15000)
    assert page.get_attribute("#history-chart-1-data", "open") is not None
    wait_for(lambda: float(page.locator(
        "#history-chart-1-data tbody tr >> nth=-1 >> td >> nth=2").inner_text()) >= 1,
        timeout=30)
    page.click("#range-tabs [data-range=week]")
    page.wait_for_url(re.compile(r"range=week"))
    assert page.get_attribute("#range-tabs [data-range=week]", "aria-current") == "page"
    assert "last week" in page.get_attribute("#history-chart-2 .plot", "aria-label")
    page.click("#gpu-tabs [data-gpu-type=a100]")
    page.wait_for_url(re.compile(r"gpu_type=a100.*range=week"))
    assert "a100 queue length, last week" in page.get_attribute("#history-chart-2 .plot",
                                                                "aria-label")
    screenshot(page, "history")
    # A range the page does not offer is a 422 naming the field.
    answer = httpx.get(f"{server.url}/ui/history?range=year", cookies=cookies(page))
    assert answer.status_code == 422 and "range" in answer.text


def test_the_queues_page_draws_each_queue_over_the_chosen_range(server: ServeProcess,
                                                                 page) -> None:
    login(page, server, "alice", "/ui/queues?gpu_type=default")
    page.locator("#queue-history-chart-1 canvas").first.wait_for(timeout=15000)
    assert page.get_attribute("#range-tabs [data-range=hour]", "aria-current") == "page"
    assert page.get_attribute("#queue-history-chart-1 .plot", "aria-label") == (
        "research: default GPUs, last hour")
    page.click("#queue-history-chart-1-data summary")  # research: borrowing limited to 4
    assert page.locator("#queue-history-chart-1-data thead th").all_inner_texts() == [
        "time", "held", "guarantee", "guarantee + borrowing limit"]
    assert page.locator("#queue-history-chart-1-data tbody tr >> nth=-1 >> td >> nth=3"
                        ).inner_text() == "4"
    page.click("#range-tabs [data-range=day]")
    page.wait_for_url(re.compile(r"gpu_type=default.*range=day"))
    assert "last day" in page.get_attribute("#queue-history-chart-2 .plot", "aria-label")
    answer = httpx.get(f"{server.url}/ui/queues?range=year", cookies=cookies(page))
    assert answer.status_code == 422 and "range" in answer.text


def test_a_node_page_opens_from_the_cluster_map(server: ServeProcess, page) -> None:
    name = submit(server, "alice", "onnode", max=8)
    wait_for(lambda: running(server, "alice", name))
    login(page, server, "alice", "/ui/cluster")
    node = job(server, "alice", name)["placement"][0]["node"]
    page.click(f".node[data-node='{node}'] a.name")
    page.wait_for_url(re.compile(f"/ui/nodes/{node}$"))
    assert page.inner_text("h1") == f"Node {node}"
    assert page.locator(f"#node-jobs tr[data-job='{name}']").count() == 1
    assert page.locator(f"#topology .gpu[data-job='{name}']").count() >= 1
    assert page.locator("#node-actions").count() == 0  # nodes are the administrators'
    # A GPU cell that holds no job of hers opens its node's page too.
    page.goto(f"{server.url}/ui/cluster?gpu_type=a100")
    free = page.locator("#topology .gpu.free").first
    target = free.evaluate("el => el.closest('.node').dataset.node")
    free.click()
    page.wait_for_url(re.compile(f"/ui/nodes/{target}$"))
    screenshot(page, "node")
    # An unknown node is the dashboard's 404 page, not JSON.
    page.goto(f"{server.url}/ui/nodes/no-such-node")
    assert page.inner_text("h1") == "Node not found"
    assert page.locator("header nav").count() == 1


def test_cancel_and_priority_are_confirmed_first(server: ServeProcess, page) -> None:
    name = submit(server, "alice", "act", max=2)
    wait_for(lambda: running(server, "alice", name))
    login(page, server, "alice", f"/ui/jobs/{name}")
    page.fill("#new-priority", "7")
    page.click("#change-priority")
    page.locator("#confirm").wait_for()
    assert "From 0 to 7" in page.inner_text("#confirm-text")
    page.click("#confirm-no")
    assert page.locator("#confirm").count() == 0
    assert job(server, "alice", name)["priority"] == 0
    page.click("#change-priority")
    page.click("#confirm-yes")
    page.locator("#action-done").wait_for()
    assert job(server, "alice", name)["priority"] == 7

    page.click("#cancel-job")
    page.locator("#confirm").wait_for()
    assert "ends as Canceled" in page.inner_text("#confirm-text")
    page.click("#confirm-no")
    assert running(server, "alice", name)
    page.click("#cancel-job")
    page.click("#confirm-yes")
    page.locator("#action-done").wait_for()
    assert job(server, "alice", name)["status"] == "Canceled"
    wait_for(lambda: page.inner_text("#job-status") == "Canceled", timeout=30)
    # Now there is nothing to cancel: the confirmation says so instead (409).
    page.click("#cancel-job")
    assert "Canceled" in page.locator("#refused").inner_text()
    # Another user's job is not found, as in the API; a better priority than allowed: 403.
    other = submit(server, "bob", "bobs", max=1)
    token = form_token(page)
    answer = httpx.post(f"{server.url}/ui/actions/cancel", cookies=cookies(page),
                        data={"form_token": token, "job": other, "confirm": "yes"})
    assert answer.status_code == 404
    assert job(server, "bob", other)["status"] != "Canceled"
    answer = httpx.post(f"{server.url}/ui/actions/priority", cookies=cookies(page),
                        data={"form_token": token, "job": name, "priority": "x"})
    assert answer.status_code == 422 and "priority" in answer.text
    screenshot(page, "job-actions")


def test_drain_and_uncordon_say_which_jobs_stop(server: ServeProcess, page) -> None:
    name = submit(server, "alice", "drained", gpu_type="a100", min=8, max=8)
    wait_for(lambda: running(server, "alice", name))
    node = job(server, "alice", name)["placement"][0]["node"]
    login(page, server, "root", f"/ui/nodes/{node}")
    page.click("#drain")
    page.locator("#confirm").wait_for()
    assert "drained: 8 GPUs here" in page.inner_text("#confirm-items")  # by name
    assert name not in page.inner_text("#confirm-items")
    page.click("#confirm-no")
    assert running(server, "alice", name)
    page.click("#drain")
    page.click("#confirm-yes")
    page.locator("#action-done").wait_for()
    wait_for(lambda: page.inner_text("#node-state") == "cordoned", timeout=30)
    assert job(server, "alice", name)["workers"] == 0 or \
        job(server, "alice", name)["placement"][0]["node"] != node
    assert "drained" in page.inner_text("#node-events")
    page.locator("#uncordon").click()
    page.locator("#confirm").wait_for()
    assert "back in service" in page.inner_text("#confirm-title")
    page.click("#confirm-yes")
    wait_for(lambda: page.inner_text("#node-state") == "ready", timeout=30)
    assert "in service" in page.inner_text("#node-events")
    screenshot(page, "node-actions")
    # A user who is not an administrator is refused, whatever the page showed.
    page.context.clear_cookies()
    login(page, server, "alice", f"/ui/nodes/{node}")
    answer = httpx.post(f"{server.url}/ui/actions/drain", cookies=cookies(page),
                        data={"form_token": form_token(page), "node": node, "confirm": "yes"})
    assert answer.status_code == 403 and "administrator" in answer.text


def test_a_viewer_sees_no_action_and_the_server_refuses_its_posts(server: ServeProcess,
                                                                  page) -> None:
    name = submit(server, "alice", "watched", max=1)
    login(page, server, VIEWER, "/ui/scheduler", token=VIEWER_TOKEN)
    assert page.locator("#algorithms form").count() == 0
    page.goto(f"{server.url}/ui/nodes/a-0")
    assert page.locator("#node-actions").count() == 0
    page.goto(f"{server.url}/ui/history")
    assert page.locator("#range-tabs a").count() == 3
    token = form_token(page)
    for action, fields in (("cancel", {"job": name}), ("priority", {"job": name,
                                                                    "priority": "1"}),
                           ("drain", {"node": "a-0"}), ("uncordon", {"node": "a-0"}),
                           ("algorithm", {"gpu_type": "default", "algorithm": "FIFO"})):
        for confirm in ("", "yes"):
            answer = httpx.post(f"{server.url}/ui/actions/{action}", cookies=cookies(page),
                                data={"form_token": token, "confirm": confirm, **fields})
            assert answer.status_code == 403 and "viewer" in answer.text, (action, answer.text)
    # The API refuses its writes too, and answers its reads.
    with server.client(VIEWER) as client:
        assert client.get("/v1/jobs").status_code == 200
        refused = client.put("/v1/schedulers/default", json={"algorithm": "FIFO"})
        assert refused.status_code == 403 and "viewer" in refused.text
        assert client.post("/v1/jobs", json={"name": "v", "command": "x", "min": 1, "max": 1,
                                             "epochs": 1}).status_code == 403
    assert job(server, "alice", name)["status"] != "Canceled"


def test_a_switch_says_which_jobs_it_preempts_and_then_does_so(tmp_path, page) -> None:
    """Under FIFO a long job holds every default GPU and a short one waits; SRJF would run
    the short one: the confirmation names both, and Confirm does what it said."""
    with running_dashboard(tmp_path) as server:
        with server.client("root") as root:
            assert root.put("/v1/schedulers/default",
                            json={"algorithm": "FIFO"}).status_code == 200
        long = submit(server, "alice", "long", min=16, max=16, epochs=1000)
        wait_for(lambda: running(server, "alice", long))
        short = submit(server, "alice", "short", min=16, max=16, epochs=1)
        wait_for(lambda: job(server, "alice", short)["status"] == "Waiting")
        login(page, server, "root", "/ui/scheduler")
        row = page.locator("#algorithms tr[data-gpu-type=default]")
        row.locator("select").select_option("SRJF")
        row.locator("button").click()
        page.locator("#confirm").wait_for()
        assert "Switching to SRJF now preempts 1 job, starts 1 job" in page.inner_text(
            "#confirm-text")
        assert page.locator("#confirm-items li").all_inner_texts() == [
            "preempts long (16 → 0 GPUs)", "starts short (0 → 16 GPUs)"]  # by name
        screenshot(page, "switch-confirm")
        page.click("#confirm-yes")
        page.locator("#action-done").wait_for()
        # The short job ran (it may be done already: one epoch); the long one was preempted.
        wait_for(lambda: job(server, "alice", short)["status"] in ("Running", "Completed"),
                 timeout=30)
        assert job(server, "alice", long)["preemptions"] == 1
