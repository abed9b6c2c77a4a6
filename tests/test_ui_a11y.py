"""A dashboard anyone can read, on any screen: axe-core on every page (as a user and as
an administrator, in the light and the dark colour scheme), the pages at a phone's
width (390 x 844), the dark preference followed, and the cluster map's jobs told apart
without colour.

axe is injected from the test side, which the pages' Content-Security-Policy would
block: its contexts bypass the policy (`bypass_csp=True`), and only its contexts; the
other tests here and in test_ui_browser.py keep failing on anything the policy blocks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from browser import SCREENSHOTS, open_page, screenshot
from dashboard_server import dashboard_server, job, login, submit
from polling import wait_for

from tests.conftest import TOKENS, ServeProcess

pytestmark = pytest.mark.slow

SERIOUS = ("serious", "critical")
PHONE = {"width": 390, "height": 844}
JOBS: dict[str, str] = {}  # the jobs the server fixture submitted, by key


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """Alice's running and finished jobs (the job page's charts have measured points),
    Bob's running job (anonymous usage on Alice's map), a cordoned node and a lost one."""
    process = dashboard_server(tmp_path_factory.mktemp("a11y"))
    process.start()
    for key, user, fields in (("done", "alice", {"min": 1, "max": 1, "epochs": 4}),
                              ("train", "alice", {"min": 2, "max": 2}),
                              ("tune", "alice", {"min": 1, "max": 1}),
                              ("bob", "bob", {"min": 3, "max": 3}),
                              ("eval", "root", {"gpu_type": "a100", "min": 2, "max": 2})):
        JOBS[key] = submit(process, user, f"{user}-{key}", **fields)
    wait_for(lambda: job(process, "alice", JOBS["done"])["status"] == "Completed")
    wait_for(lambda: job(process, "bob", JOBS["bob"])["status"] == "Running")
    with process.client("root") as root:  # a cordoned node and a lost one are drawn too
        assert root.patch("/v1/nodes/b-1", json={"schedulable": False}).status_code == 200
        assert root.delete("/v1/nodes/b-0").status_code == 200
    yield process
    process.stop()


def pages_of(user: str) -> list[tuple[str, str]]:
    """(name, path) of every page `user` sees; `user`'s own job pages."""
    mine = JOBS["done"] if user == "alice" else JOBS["eval"]
    return [("cluster", "/ui/cluster"), ("cluster-a100", "/ui/cluster?gpu_type=a100"),
            ("jobs", "/ui/jobs"), ("job", f"/ui/jobs/{mine}"),
            ("scheduler", "/ui/scheduler"), ("job-unknown", "/ui/jobs/no-such-job"),
            ("history", "/ui/history"),
            ("history-a100-week", "/ui/history?gpu_type=a100&range=week"),
            ("queues", "/ui/queues"), ("queues-a100", "/ui/queues?gpu_type=a100"),
            ("node", "/ui/nodes/a-0"), ("node-cordoned", "/ui/nodes/b-1"),
            ("node-lost", "/ui/nodes/b-0"), ("node-unknown", "/ui/nodes/no-such-node")]


def settle(page) -> None:
    """Wait until what the page draws is drawn (charts) and its stream is open; open every
    chart's data table (a live update keeps them open), so that they are checked too."""
    for chart in page.locator("[data-chart]").all():
        chart.locator("canvas").first.wait_for(timeout=15000)
    if page.locator("#live").count():
        page.locator("#live-dot.on").wait_for(timeout=15000)
    for summary in page.locator("details.chart-data > summary").all():
        summary.click()
    wait_for(lambda: page.locator("details.chart-data:not([open])").count() == 0)


def axe_violations(page) -> list[dict]:
    """axe-core's violations of impact serious or critical on the page as it is."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page).response
    return [v for v in results["violations"] if v["impact"] in SERIOUS]


def describe(violations: list[dict]) -> str:
    lines = []
    for v in violations:
        targets = "; ".join(", ".join(map(str, n["target"])) for n in v["nodes"][:5])
        lines.append(f"  {v['id']} ({v['impact']}, {len(v['nodes'])} elements): {v['help']} "
                     f"[{targets}]")
    return "\n".join(lines)


def luminance(css_color: str) -> float:
    """Relative luminance (WCAG) of an `rgb(r, g, b)` colour."""
    values = css_color[css_color.index("(") + 1:css_color.index(")")].replace(",", " ")
    r, g, b = (float(x) / 255 for x in values.split()[:3])

    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def record(name: str, found: dict[str, list[dict]]) -> None:
    """Counts of serious and critical violations per page, kept beside the screenshots."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    counts = {page: len(v) for page, v in found.items()}
    (SCREENSHOTS / f"axe-{name}.json").write_text(json.dumps(counts, indent=1) + "\n")


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("user", ["alice", "root"])
def test_no_page_has_serious_accessibility_violations(server: ServeProcess, browser, user: str,
                                                      scheme: str) -> None:
    found: dict[str, list[dict]] = {}
    with open_page(browser, bypass_csp=True, color_scheme=scheme) as page:
        if user == "alice":
            page.goto(f"{server.url}/ui/login")
            found["login"] = axe_violations(page)
        login(page, server, user)
        for name, path in pages_of(user):
            page.goto(f"{server.url}{path}")
            settle(page)
            found[name] = axe_violations(page)
            background = page.evaluate("getComputedStyle(document.body).backgroundColor")
            if scheme == "dark":  # the browser's dark preference is followed
                assert luminance(background) < 0.05, (name, background)
            else:
                assert luminance(background) > 0.8, (name, background)
            screenshot(page, f"a11y-{user}-{scheme}-{name}")
        # An action's confirmation, open: a job's cancel, and for an administrator a drain.
        dialogs = [("confirm-cancel", f"/ui/jobs/{pages_of(user)[3][1].rsplit('/', 1)[1]}",
                    "#cancel-job")]
        if user == "root":
            dialogs.append(("confirm-drain", "/ui/nodes/a-1", "#drain"))
        for name, path, button in dialogs:
            page.goto(f"{server.url}{path}")
            settle(page)
            page.click(button)
            page.locator("#confirm, #refused").first.wait_for()
            found[name] = axe_violations(page)
            screenshot(page, f"a11y-{user}-{scheme}-{name}")
    record(f"{user}-{scheme}", found)
    report = {page: describe(v) for page, v in found.items() if v}
    assert not report, "serious or critical accessibility violations:\n" + "\n".join(
        f"{page}:\n{text}" for page, text in report.items())


def test_every_page_fits_a_phone(server: ServeProcess, browser) -> None:
    """At 390 x 844 the page body does not scroll sideways (wide tables scroll in their
    own container) and the header keeps all its parts on the screen."""
    with open_page(browser, viewport=PHONE, is_mobile=True, has_touch=True) as page:
        page.goto(f"{server.url}/ui/login")
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        screenshot(page, "phone-login")
        login(page, server, "root")
        for name, path in pages_of("root"):
            page.goto(f"{server.url}{path}")
            settle(page)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], (name, width)
            for part in ("header .brand", "header nav a >> nth=2", "#user-name",
                         "form[action='/ui/logout'] button"):
                box = page.locator(part).bounding_box()
                assert box is not None and box["x"] >= 0, (name, part)
                assert box["x"] + box["width"] <= PHONE["width"], (name, part, box)
            screenshot(page, f"phone-{name}")


def test_the_cluster_map_tells_jobs_apart_without_colour(server: ServeProcess, browser,
                                                         ) -> None:
    """Every job's cells carry its number in the legend and a name for screen readers;
    pointing at one cell or focusing it from the keyboard highlights all of the job's
    cells."""
    with open_page(browser) as page:
        login(page, server, "root")
        legend = page.locator("#legend [data-job]")
        names = legend.evaluate_all("els => els.map(e => e.dataset.job)")
        assert {JOBS[k] for k in ("train", "tune", "bob", "eval")} <= set(names)
        marks = {}
        for name in names:
            entry = page.locator(f"#legend [data-job='{name}']")
            marks[name] = entry.locator(".sw").inner_text()
            cells = page.locator(f"#topology .gpu[data-job='{name}']")
            assert cells.count() >= 1
            assert {c.inner_text() for c in cells.all()} == {marks[name]}
            label = cells.first.get_attribute("aria-label")
            assert name in label and "node" in label
        assert len(set(marks.values())) == len(names)  # each job its own mark
        colours = page.locator("#legend .sw").evaluate_all(
            "els => els.map(e => getComputedStyle(e).backgroundColor)")
        assert len(set(colours[:8])) == min(8, len(colours))  # neighbours differ

        bob = JOBS["bob"]
        train = page.locator(f"#topology .gpu[data-job='{bob}']")
        train.first.hover()
        wait_for(lambda: page.locator("#topology .gpu.hl").count() == train.count())
        assert page.locator(f"#topology .gpu.hl:not([data-job='{bob}'])").count() == 0
        screenshot(page, "cluster-highlight")
        page.mouse.move(0, 0)
        wait_for(lambda: page.locator("#topology .gpu.hl").count() == 0)
        # From the keyboard: the cells take the focus in turn.
        page.locator("#topology .gpu[data-job]").first.focus()
        first = page.evaluate("document.activeElement.dataset.job")
        wait_for(lambda: page.locator("#topology .gpu.hl").count()
                 == page.locator(f"#topology .gpu[data-job='{first}']").count())
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.classList.contains('gpu')")


def test_alice_sees_her_own_marks_and_others_usage_named(server: ServeProcess, browser,
                                                         ) -> None:
    with open_page(browser) as page:
        login(page, server, "alice")
        anon = page.locator("#topology .gpu.anon").first
        assert "another user" in anon.get_attribute("aria-label")
        assert "bob" not in page.content()
        assert TOKENS["alice"] not in page.content()

