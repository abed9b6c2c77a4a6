"""`voda simulate --report DIR`: a self-contained HTML report, opened from disk in Chromium."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser import screenshot

from tests.conftest import ROOT
from voda.core.allocation import registry
from voda.sim.html_report import gpus_in_use, render_report, step_at, timeline_jobs
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
