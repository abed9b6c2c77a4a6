"""The dashboard in a real Chromium against a running `voda serve --backend emulated`.

Each page is loaded, its content checked, a live update awaited without a reload
(the page keeps a marker set in its window object), and a screenshot saved to
out/screenshots/. The pages run under their Content-Security-Policy: anything it
blocks fails the test (tests/browser.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from browser import screenshot
from dashboard_server import (
    cookies,
    form_token,
    job,
    login,
    mark_no_reload,
    not_reloaded,
    running_dashboard,
    submit,
)
from polling import wait_for

from tests.conftest import TOKENS, ServeProcess

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with running_dashboard(tmp_path_factory.mktemp("ui")) as process:
        yield process


def test_pages_need_a_login_and_a_bad_token_is_refused(server: ServeProcess, page) -> None:
    page.goto(f"{server.url}/ui/jobs")
    assert "/ui/login" in page.url and "next=/ui/jobs" in page.url
    page.fill("input[name=token]", "not-a-token")
    page.click("button[type=submit]")
    assert "unknown token" in page.inner_text("#login-error")
    # Streams and fragments refuse a caller without the cookie; the bearer API is unchanged.
    assert httpx.get(f"{server.url}/ui/stream/cluster").status_code == 401
    assert httpx.get(f"{server.url}/v1/jobs").status_code == 401
    # A cookie the service does not know is forgotten, not presented again and again.
    cookie = f"voda_session_{server.port}"
    stale = httpx.get(f"{server.url}/ui/stream/cluster", cookies={cookie: "old"})
    assert stale.status_code == 401 and f"{cookie}=;" in stale.headers["set-cookie"]
    # The guard's wall stands before the dashboard too: another Host (DNS rebinding).
    assert httpx.get(f"{server.url}/ui/login",
                     headers={"Host": "evil.example"}).status_code == 403
    screenshot(page, "login-refused")


@pytest.mark.parametrize(("query", "status", "field"), [
    ("/ui/jobs?status=Bogus", 422, "status"), ("/ui/jobs?per_page=7", 422, "per_page"),
    ("/ui/jobs?page=0", 422, "page"), ("/ui/jobs?q=" + "x" * 201, 422, "q"),
    ("/ui/stream/jobs?page=abc", 422, "page"), ("/ui/cluster?gpu_type=" + "h" * 5000, 404,
                                                "gpu_type"),
    ("/ui/jobs/no-such-job", 404, "no-such-job")])
def test_bad_page_arguments_are_named_4xx(server: ServeProcess, query: str, status: int,
                                          field: str) -> None:
    answer = httpx.get(f"{server.url}{query}", cookies=server.dashboard_cookies("alice"))
    assert answer.status_code == status and field in answer.text
    assert len(answer.content) < 2000  # what was sent is not echoed whole


def test_pages_run_only_the_vendored_scripts(server: ServeProcess, page) -> None:
    login(page, server, "alice")
    answer = httpx.get(f"{server.url}/ui/cluster", cookies=cookies(page))
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe" not in policy
    assert "frame-ancestors 'none'" in policy
    scripts = page.eval_on_selector_all("script[src]", "els => els.map(e => e.src)")
    assert scripts and all(src.startswith(f"{server.url}/ui/static/") for src in scripts)
    assert page.eval_on_selector_all("script:not([src]):not([type='application/json'])",
                                     "els => els.length") == 0
    # A script a page would try to run inline is blocked (and said on the console).
    blocked: list[str] = []
    page.on("console", lambda message: blocked.append(message.text))
    page.evaluate("""() => { const s = document.createElement('script');
        s.textContent = 'window.__ran = true'; document.body.appendChild(s); }""")
    wait_for(lambda: any("Content Security Policy" in m for m in blocked), timeout=60)
    assert page.evaluate("window.__ran === undefined")
    page.errors.clear()  # the block this test caused on purpose


def test_cluster_page_groups_gpus_by_spine_and_leaf_and_updates_live(
        server: ServeProcess, page) -> None:
    mine = submit(server, "alice", "alice-cluster", min=2, max=2)
    theirs = submit(server, "bob", "bob-cluster", min=3, max=3)
    wait_for(lambda: job(server, "bob", theirs)["status"] == "Running")
    login(page, server, "alice")
    assert page.locator(".spine").count() == 2
    assert page.locator("[data-leaf=rack-a] .node").count() == 2
    assert page.locator("[data-node=c-0] .gpu").count() == 8
    tabs = page.inner_text("#gpu-tabs")
    assert "a100" in tabs and "default" in tabs
    cell = page.locator(f".gpu[data-job='{mine}']").first
    cell.wait_for()
    assert page.locator(f".gpu[data-job='{mine}']").count() == 2
    title = cell.get_attribute("title")
    assert mine in title and "owner alice" in title and "2 workers" in title
    # Bob's job is anonymous usage for alice: three hatched cells, no name.
    assert page.locator("#topology .gpu.anon").count() == 3
    assert theirs not in page.content()
    assert "fragmentation" in page.inner_text("#cluster-stats")

    mark_no_reload(page)
    pushed = submit(server, "alice", "alice-live", min=1, max=1)
    page.locator(f".gpu[data-job='{pushed}']").wait_for(timeout=15000)
    assert not_reloaded(page)
    assert page.locator("#live-dot.on").count() == 1
    screenshot(page, "cluster")

    page.click("#gpu-tabs a[data-gpu-type=a100]")
    page.wait_for_url(re.compile("gpu_type=a100"))
    assert page.locator(".node").count() == 2
    screenshot(page, "cluster-a100")


def test_jobs_page_filters_searches_and_pages(server: ServeProcess, page) -> None:
    for i in range(30):
        submit(server, "bob", f"bob-batch-{i:02d}", epochs=10_000, priority=1)
    submit(server, "alice", "alice-needle", epochs=10_000)
    login(page, server, "bob", "/ui/jobs?per_page=25")
    total = int(page.inner_text("#job-total b"))
    assert total >= 31
    assert "page 1 of 2" in page.inner_text("#page-of")
    assert page.locator("#jobs-table tbody tr").count() == 25
    # Bob sees only his jobs.
    assert "alice-needle" not in page.content()
    header = page.inner_text("#jobs-table thead")
    for column in ("owner", "min\u2013max", "priority", "queue", "attained GPU-h",
                   "remaining (est.)"):
        assert column in header

    page.click("a[rel=next]")
    page.wait_for_url(re.compile("page=2"))
    assert "page 2 of 2" in page.inner_text("#page-of")

    page.goto(f"{server.url}/ui/jobs?per_page=25")
    mark_no_reload(page)
    page.fill("input[type=search]", "batch-07")
    page.locator("#jobs-table tbody tr").first.wait_for()
    wait_for(lambda: page.locator("#jobs-table tbody tr").count() == 1, timeout=60)
    assert "bob-batch-07" in page.inner_text("#jobs-table")
    assert not_reloaded(page)  # filtered in place, and the stream follows the filter
    page.select_option("select[name=status]", "Completed")
    wait_for(lambda: "no jobs match" in page.inner_text("#jobs-table"), timeout=60)
    screenshot(page, "jobs-filtered")

    page.goto(f"{server.url}/ui/jobs?per_page=25&q=bob-batch")
    mark_no_reload(page)
    added = submit(server, "bob", "bob-batch-new", epochs=10_000)
    page.locator(f"tr[data-job='{added}']").wait_for(timeout=15000)
    assert not_reloaded(page)
    screenshot(page, "jobs")


def test_job_page_draws_its_charts_and_follows_the_job_to_the_end(
        server: ServeProcess, page) -> None:
    name = submit(server, "alice", "alice-short", min=1, max=1, epochs=4)
    login(page, server, "alice", f"/ui/jobs/{name}")
    for chart in ("allocation-chart", "epoch-chart", "speedup-chart"):
        page.locator(f"#{chart}[data-drawn='1'] canvas").first.wait_for(timeout=10000)
    mark_no_reload(page)
    wait_for(lambda: page.inner_text("#job-status") == "Completed", timeout=60)
    assert not_reloaded(page)
    history = page.inner_text("#job-history")
    assert "start" in history and "Running → Completed" in history
    page.locator("#allocation-chart[data-drawn='1'] canvas").first.wait_for()
    screenshot(page, "job")
    # Another user's job is not found, as in the API.
    page.context.clear_cookies()
    login(page, server, "bob", "/ui/jobs")
    assert page.goto(f"{server.url}/ui/jobs/{name}").status == 404


def test_scheduler_page_switches_the_algorithm_for_admins_only(
        server: ServeProcess, page) -> None:
    login(page, server, "alice", "/ui/scheduler")
    assert page.locator("#algorithms form").count() == 0
    assert "Only administrators" in page.inner_text("#switch-result")
    page.locator("#latency-chart[data-drawn='1'] canvas").first.wait_for(timeout=10000)
    fields = {"gpu_type": "a100", "algorithm": "AFS-L", "confirm": "yes"}
    refused = httpx.post(f"{server.url}/ui/actions/algorithm", cookies=cookies(page),
                         data={**fields, "form_token": form_token(page)})
    assert refused.status_code == 403 and "administrator" in refused.text
    page.context.clear_cookies()

    login(page, server, "root", "/ui/scheduler")
    assert page.locator("#decisions tbody tr").count() >= 1
    mark_no_reload(page)
    row = page.locator("#algorithms tr[data-gpu-type=a100]")
    row.locator("select").select_option("AFS-L")
    # The first click only says what the switch would do; Cancel changes nothing.
    row.locator("button").click()
    page.locator("#confirm").wait_for()
    assert "Switch a100 from" in page.inner_text("#confirm-title")
    assert "Switching to AFS-L now" in page.inner_text("#confirm-text")
    assert page.evaluate("document.activeElement.id") == "confirm-no"
    page.click("#confirm-no")
    assert page.locator("#confirm").count() == 0
    with server.client("root") as client:
        assert client.get("/v1/schedulers/a100").json()["algorithm"] != "AFS-L"
    row.locator("button").click()
    page.click("#confirm-yes")
    page.locator("#action-done").wait_for()
    assert "a100: now AFS-L" in page.inner_text("#action-done")
    assert "AFS-L" in row.locator(".algorithm").inner_text()
    with server.client("root") as client:
        assert client.get("/v1/schedulers/a100").json()["algorithm"] == "AFS-L"
    wait_for(lambda: "a100: AFS-L" in page.inner_text("#algorithm-now"), timeout=60)
    assert not_reloaded(page)
    # A form posted from another site is refused even with the cookie and the form token;
    # one without the form token is refused whatever its Origin.
    fields["algorithm"] = "FIFO"
    forged = httpx.post(f"{server.url}/ui/actions/algorithm", cookies=cookies(page),
                        data={**fields, "form_token": form_token(page)},
                        headers={"Origin": "http://evil.example"})
    assert forged.status_code == 403 and "Origin" in forged.text
    untokened = httpx.post(f"{server.url}/ui/actions/algorithm", cookies=cookies(page),
                           data=fields)
    assert untokened.status_code == 403 and "form_token" in untokened.text
    as_text = httpx.post(f"{server.url}/ui/actions/algorithm", cookies=cookies(page),
                         content=b"gpu_type=a100&algorithm=FIFO&confirm=yes",
                         headers={"Content-Type": "text/plain"})
    assert as_text.status_code == 415
    with server.client("root") as client:
        assert client.get("/v1/schedulers/a100").json()["algorithm"] == "AFS-L"
    screenshot(page, "scheduler")


def test_jobs_show_their_tiresias_queue(server: ServeProcess, page) -> None:
    with server.client("root") as client:
        assert client.put("/v1/schedulers/a100", json={"algorithm": "Tiresias"}).status_code \
            == 200
    name = submit(server, "alice", "alice-queued", gpu_type="a100", min=1, max=1)
    submit(server, "alice", "alice-fifo", min=1, max=1)
    wait_for(lambda: job(server, "alice", name)["queue"] == 0)
    login(page, server, "alice", "/ui/jobs?gpu_type=a100")
    row = page.locator(f"tr[data-job='{name}']")
    assert row.locator("td").nth(7).inner_text() == "0"
    with server.client("alice") as client:  # other algorithms keep no queue
        others = client.get("/v1/jobs", params={"gpu_type": "default"}).json()["items"]
    assert others and {j["queue"] for j in others} == {None}


def test_job_page_tails_the_log_on_the_local_backend(serve, tmp_path, page) -> None:
    server = serve(f"sqlite:///{tmp_path / 'local.db'}", "--backend", "local", "--slots", "2",
                   "--run-dir", str(tmp_path / "runs"), "--rate-limit", "0.2")
    script = "import time\nfor i in range(100):\n    print('step', i, flush=True)\n" \
             "    time.sleep(0.2)\n"
    with server.client() as client:
        answer = client.post("/v1/jobs", json={"name": "logged", "min": 1, "max": 1,
                                               "command": ["python", "-c", script]})
        assert answer.status_code == 201, answer.text
        name = answer.json()["name"]
    # The token `voda serve` generated (no tokens were configured) logs in as its
    # administrator, "local".
    login(page, server, "local", f"/ui/jobs/{name}", token=server.admin_token)
    mark_no_reload(page)
    # Polled from here: a predicate string run in the page would be an eval, which the
    # page's Content-Security-Policy blocks.
    wait_for(lambda: page.locator("#job-log").count() == 1
             and "step 3" in page.inner_text("#job-log"), timeout=60)
    assert not_reloaded(page)
    assert "No epoch measured yet" in page.inner_text("#no-epochs")
    screenshot(page, "job-local-log")
    with server.client() as client:
        client.delete(f"/v1/jobs/{name}")


def test_drained_and_removed_nodes_show_cordoned_and_lost_live(
        server: ServeProcess, page) -> None:
    login(page, server, "alice")
    assert "0 cordoned · 0 lost" in page.inner_text("#cluster-stats")
    mark_no_reload(page)
    with server.client("root") as root:
        assert root.patch("/v1/nodes/b-1", json={"schedulable": False}).status_code == 200
        page.locator(".node.cordoned[data-node=b-1] .badge.cordoned").wait_for(timeout=15000)
        assert page.get_attribute("[data-node=b-1]", "data-used") == "0"  # its jobs left
        assert root.delete("/v1/nodes/b-0").status_code == 200
        page.locator(".node.lost[data-node=b-0] .badge.lost").wait_for(timeout=15000)
        assert page.locator("[data-node=b-0] .gpu.gone").count() == 4
        assert "1 cordoned · 1 lost" in page.inner_text("#cluster-stats")
        assert not_reloaded(page)
        screenshot(page, "cluster-nodes-changed")
        # Back in service: both ready again.
        assert root.post("/v1/nodes", json={"name": "b-0", "gpus": 4, "leaf": "rack-b",
                                            "spine": "spine-1"}).status_code == 201
        assert root.patch("/v1/nodes/b-1", json={"schedulable": True}).status_code == 200
    wait_for(lambda: "0 cordoned · 0 lost" in page.inner_text("#cluster-stats"), timeout=60)
    assert page.locator("[data-node=b-0] .gpu.gone").count() == 0
    assert page.locator(".node.ready, .node.cordoned, .node.lost").count() >= 6
    assert not_reloaded(page)


def test_scheduler_page_shows_refusals_per_gpu_type(serve, tmp_path, page) -> None:
    path = "tests.custom_algorithm:over_capacity"
    server = serve(f"sqlite:///{tmp_path / 'refused.db'}", "--cluster", "1x4,1x4:a100",
                   "--time-scale", "30", "--rate-limit", "0.2", "--step-interval", "0.2",
                   tokens=True, config=f'[server]\nalgorithm_paths = "{path}"\n')
    with server.client("root") as root:
        assert root.put("/v1/schedulers/a100", json={"algorithm": path}).status_code == 200
    for user in ("alice", "bob"):
        submit(server, user, f"{user}-a100", gpu_type="a100", min=1, max=4)
    wait_for(lambda: _refused(server) == {"a100"})
    login(page, server, "root", "/ui/scheduler")
    row = page.locator("#refusals tr[data-gpu-type=a100]")
    row.wait_for()
    assert page.locator("#refusals tr[data-gpu-type]").count() == 1  # default goes on
    reason = row.locator("td.error").inner_text()
    assert reason and "details for administrators" not in reason
    assert "a100" in page.inner_text("#errors")
    screenshot(page, "scheduler-refused")
    page.context.clear_cookies()
    login(page, server, "alice", "/ui/scheduler")  # the reason may name bob's job
    reason = page.locator("#refusals tr[data-gpu-type=a100]").inner_text()
    assert "details for administrators" in reason and "bob" not in page.content()
    login_cluster = page.goto(f"{server.url}/ui/cluster")
    assert login_cluster.status == 200
    assert "refused:" in page.inner_text("#cluster-stats")


def _refused(server: ServeProcess) -> set[str]:
    with server.client("root") as root:
        return set(root.get("/v1/cluster").json()["errors"])


def test_failed_logins_are_held_back_as_failed_tokens_are(serve, tmp_path, page) -> None:
    server = serve(f"sqlite:///{tmp_path / 'limited.db'}", tokens=True,
                   config="[server]\nauth_failures_per_minute = 3\n")
    page.goto(f"{server.url}/ui/login")
    for _ in range(3):
        page.fill("input[name=token]", "guess")
        page.click("button[type=submit]")
        assert "unknown token" in page.inner_text("#login-error")
    page.fill("input[name=token]", "guess")  # guessing is held back for a while
    page.click("button[type=submit]")
    assert "too many failed attempts" in page.inner_text("#login-error")
    with server.client(anonymous=True) as client:  # the API holds the same client back
        assert client.get("/v1/jobs", headers={"Authorization": "Bearer guess"}
                          ).status_code == 429
    screenshot(page, "login-held-back")
    # The right token is not refused for others' failures: the login works, as the API.
    with server.client("alice") as client:
        assert client.get("/v1/jobs").status_code == 200
    page.fill("input[name=token]", TOKENS["alice"])
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/ui/cluster"))
    assert page.inner_text("#user-name").startswith("alice")


def test_logging_out_ends_the_session_a_copied_cookie_is_refused(server: ServeProcess,
                                                                 page) -> None:
    login(page, server, "alice", "/ui/jobs")
    copied = cookies(page)
    assert set(copied) == {f"voda_session_{server.port}"}
    assert TOKENS["alice"] not in copied.values()  # the cookie is a session, not the token
    assert httpx.get(f"{server.url}/ui/jobs", cookies=copied).status_code == 200
    page.click("form[action='/ui/logout'] button")
    page.wait_for_url(re.compile(r"/ui/login"))
    assert not cookies(page)
    replayed = httpx.get(f"{server.url}/ui/jobs", cookies=copied)
    assert replayed.status_code == 303 and "/ui/login" in replayed.headers["location"]
    assert httpx.get(f"{server.url}/ui/stream/jobs", cookies=copied).status_code == 401
    page.context.add_cookies([{"name": n, "value": v, "url": server.url}
                              for n, v in copied.items()])
    page.goto(f"{server.url}/ui/jobs")
    assert "/ui/login" in page.url
