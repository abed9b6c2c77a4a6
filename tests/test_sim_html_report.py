"""`voda simulate --report DIR`: a self-contained HTML report, opened from disk in Chromium."""

from __future__ import annotations

import html as html_lib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser import screenshot
from typer.testing import CliRunner

from tests.conftest import ROOT
from tests.test_sim_seeds_report import JOBS as SEEDS_JOBS
from voda.cli.main import app
from voda.core.allocation import registry
from voda.sim.html_report import gpus_in_use, render_report, step_at, timeline_jobs
from voda.sim.palette import styles
from voda.sim.report import JobResult, SimResult


def result(algorithm: str, timeline: tuple, jobs: tuple) -> SimResult:
    return SimResult(algorithm=algorithm, workload="w.csv", jobs=jobs, avg_jct=10.0,
                     p50_jct=10.0, p99_jct=10.0, makespan=20.0, utilization=0.5, rescales=1,
                     migrations=0, preemptions=0, unfinished=0, timeline=timeline,
                     queue=((0.0, 1, 0), (5.0, 0, 1)))


def test_gpus_in_use_adds_up_the_jobs_and_steps_are_sampled() -> None:
    r = result("A", ((0.0, "a", 2), (0.0, "b", 1), (5.0, "a", 4), (9.0, "b", 0)), ())
    assert gpus_in_use(r) == [(0.0, 3), (5.0, 5), (9.0, 4)]
    assert step_at([(1.0, 3.0), (5.0, 7.0)], [0.0, 1.0, 4.9, 5.0, 99.0]) == [0, 3, 3, 7, 7]


def test_the_chosen_job_is_embedded_even_beyond_the_limit(monkeypatch) -> None:
    import voda.sim.html_report as html_report

    monkeypatch.setattr(html_report, "MAX_TIMELINE_JOBS", 2)
    jobs = tuple(JobResult(f"j{i}", float(i), float(i + 10), 10.0) for i in range(5))
    r = result("A", (), jobs)
    assert timeline_jobs(r, None) == ["j0", "j1"]
    assert timeline_jobs(r, "j4") == ["j0", "j1", "j4"]
    with pytest.raises(ValueError, match="report_job: no job 'nope'"):
        render_report([r], {}, "nope")


def test_the_report_refers_to_nothing_outside_itself() -> None:
    jobs = (JobResult("a", 0.0, 10.0, 10.0), JobResult("b</script>", 1.0, None, None))
    html = render_report([result("A", ((0.0, "a", 2), (10.0, "a", 0)), jobs)],
                         {"seed": 0}, None)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert "b</script>" not in html  # embedded data cannot end its script element


@pytest.mark.slow
def test_simulate_writes_a_report_that_opens_from_disk(tmp_path: Path, page) -> None:
    folder = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "voda.cli.main", "simulate", "-w", "workload-1", "-c", "16x4",
         "-a", "all", "--report", str(folder), "--report-job", "imagenet-126"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    path = folder / "index.html"
    assert f"report written to {path}" in done.stdout

    requested: list[str] = []
    page.route("**/*", lambda route: (requested.append(route.request.url), route.continue_()))
    page.goto(path.as_uri())
    assert [u for u in requested if not u.startswith("file:")] == []
    rows = page.locator("#comparison tbody tr")
    assert rows.count() == len(registry.BUILTIN_NAMES)
    assert "★" in page.inner_text("#comparison")
    gpu_hours = [float(t.replace(",", "")) for t in
                 page.locator("#comparison td.gpu-hours").all_inner_texts()]
    assert len(gpu_hours) == rows.count() and min(gpu_hours) > 0
    for chart in ("cdf-chart", "gpus-chart", "queue-chart", "job-chart"):
        page.locator(f"#{chart}[data-drawn='1'] canvas").first.wait_for(timeout=10000)
    assert page.input_value("#job-select") == "imagenet-126"
    assert "GPUs held by imagenet-126" in page.inner_text("#job-chart")
    assert "ElasticFIFO: " in page.inner_text("#job-facts")
    settings = page.inner_text("#settings")
    assert "16x4" in settings and "workload-1" in settings and "restart penalty" in settings
    screenshot(page, "report")

    other = page.locator("#job-select option").nth(5).get_attribute("value")
    page.select_option("#job-select", other)
    page.wait_for_function(f"document.querySelector('#job-chart').innerText.includes("
                           f"'GPUs held by {other}')")
    page.locator("#job-chart[data-drawn='1'] canvas").first.wait_for()


def test_report_job_needs_a_known_job_and_a_report(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "voda.cli.main", "simulate", "-w", "workload-1", "-a", "FIFO"]
    unknown = subprocess.run([*base, "--report", str(tmp_path), "--report-job", "nope"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert unknown.returncode == 2 and "report-job: no job 'nope'" in unknown.stderr
    alone = subprocess.run([*base, "--report-job", "cifar10-0"], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
    assert alone.returncode == 2 and "report-job: needs --report DIR" in alone.stderr


# ----- several algorithms and seeds: intervals, per-job table, distributions, fairness ------
JOBS = "\n".join(SEEDS_JOBS.strip("\n").splitlines()[:8]) + "\n"  # eight of the ten
ALGORITHMS = ("FIFO", "ElasticFIFO", "Voda")
SEEDS = 2


@pytest.fixture(scope="module")
def seeded_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """`voda simulate --report` of 8 jobs under 3 algorithms and 2 seeds, and its JSON."""
    folder = tmp_path_factory.mktemp("seeded")
    workload = folder / "jobs.yaml"
    workload.write_text(JOBS)
    args = ["simulate", "-w", str(workload), "-c", "2x4", "-a", ",".join(ALGORITHMS),
            "--seeds", str(SEEDS), "--report", str(folder / "report"), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return folder / "report" / "index.html", json.loads(result.stdout)


def test_the_report_has_intervals_a_per_job_table_cdfs_and_fairness(seeded_report) -> None:
    path, out = seeded_report
    page = path.read_text()
    for chart in ("cdf-chart", "wait-chart", "slowdown-chart", "rho-mean-chart",
                  "rho-max-chart"):
        assert f'id="{chart}"' in page
    specs = {m.group(1): json.loads(html_lib.unescape(m.group(2))) for m in re.finditer(
        r'id="([a-z-]+)" data-chart data-spec="([^"]*)"', page)}
    assert specs["wait-chart"]["title"] == "Wait CDF"
    assert specs["slowdown-chart"]["title"] == "Slowdown CDF"
    look = styles(list(ALGORITHMS))
    for chart in ("cdf-chart", "wait-chart", "slowdown-chart", "rho-mean-chart"):
        series = specs[chart]["series"]
        assert [s["label"] for s in series] == list(ALGORITHMS)
        assert [s["color"] for s in series] == [look[a].color for a in ALGORITHMS]
    # The fairness bars are the summary's means, one algorithm each.
    summary = {s["algorithm"]: s["metrics"] for s in out["summary"]}
    for i, series in enumerate(specs["rho-max-chart"]["series"]):
        assert series["values"][i] == pytest.approx(summary[series["label"]]["rho_max"]["mean"])
        assert [v for j, v in enumerate(series["values"]) if j != i] == [None] * 2
    # The comparison: means with their intervals, fairness figures included.
    comparison = page[page.index('id="comparison"'):page.index("</table>",
                                                             page.index('id="comparison"'))]
    assert "over 2 seeds" in page and "Student t, 1 degrees of freedom" in page
    for algorithm in ALGORITHMS:
        rho = summary[algorithm]["rho_mean"]
        assert f"{rho['mean']:.2f}" in comparison and f"±{rho['half_width']:.2f}" in comparison
    # The per-job table: a row per job, algorithm and seed.
    table = page[page.index('id="per-job"'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr data-algorithm=") == 8 * len(ALGORITHMS) * SEEDS
    assert "slowdown" in table and "\u03c1" in table  # rho


def test_the_seeded_report_opens_and_the_checkboxes_pick_algorithms(seeded_report,
                                                                      page) -> None:
    path, _ = seeded_report
    page.goto(path.as_uri())
    for chart in ("cdf-chart", "wait-chart", "slowdown-chart", "rho-mean-chart",
                  "rho-max-chart", "gpus-chart", "queue-chart", "job-chart"):
        page.locator(f"#{chart}[data-drawn='1'] canvas").first.wait_for(timeout=10000)
    rows = page.locator("#per-job tbody tr")
    assert rows.count() == 8 * len(ALGORITHMS) * SEEDS
    assert "±" in page.inner_text("#comparison")
    screenshot(page, "report-seeds")

    def shown(chart: str) -> dict:
        return page.evaluate(
            f"() => Object.fromEntries(document.querySelector('#{chart}')._voda_chart.series"
            ".slice(1).map(s => [s.label, s.show]))")

    page.uncheck("#algorithm-picker input[value='Voda']")
    page.wait_for_function("document.querySelectorAll('#per-job tr.hidden-algorithm')"
                           f".length === {8 * SEEDS}")
    assert page.locator("#per-job tbody tr:visible").count() == 8 * 2 * SEEDS
    assert not page.locator("#comparison tr[data-algorithm='Voda']").is_visible()
    for chart in ("cdf-chart", "wait-chart", "rho-max-chart", "job-chart"):
        assert shown(chart) == {"FIFO": True, "ElasticFIFO": True, "Voda": False}
    other = page.locator("#job-select option").nth(3).get_attribute("value")
    page.select_option("#job-select", other)  # a new timeline keeps the choice
    page.wait_for_function(f"document.querySelector('#job-chart').innerText.includes("
                           f"'GPUs held by {other}')")
    page.locator("#job-chart[data-drawn='1'] canvas").first.wait_for()
    assert shown("job-chart")["Voda"] is False
    page.click("#algorithm-picker button[data-pick='none']")
    page.wait_for_function("document.querySelectorAll('#per-job tr.hidden-algorithm')"
                           f".length === {8 * len(ALGORITHMS) * SEEDS}")
    page.click("#algorithm-picker button[data-pick='all']")
    page.wait_for_function("document.querySelectorAll('tr.hidden-algorithm').length === 0")
    assert set(shown("slowdown-chart").values()) == {True}
