"""How fast the dashboard's pages answer with 10,000 jobs in the service.

    python bench/ui.py [--jobs 10000] [--runs 20]

1. Writes `--jobs` waiting jobs straight into a fresh SQLite store and starts
   `voda serve` (emulated 4x4 cluster) on it.
2. For each page (the jobs list at its first and last page, a search, a status
   filter, the cluster, a node, a job, the scheduler, the History page over an hour and
   over a week of one-minute samples written into the store) and for the API's list at
   the same offset: the median and the 90th percentile of `--runs` full answers over
   loopback.
3. In Chromium (Playwright): the median time from navigation to the page's load
   event and to the first update pushed by its event stream.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests"))

from api import TOKEN, Server, stored_jobs  # noqa: E402  (the API benchmark's server, store)

from voda_testing.serve import dashboard_login  # noqa: E402

WEEK_OF_SAMPLES = 7 * 24 * 60  # one a minute, the default history_sample_seconds


def stored_samples(db: str, count: int, runs: int) -> None:
    """`count` one-minute samples of the default GPU type up to now, written straight into
    the store (as the service would have taken them over a week); then the CPU time of
    reading them back as the History page does (averaged into MAX_POINTS points)."""
    from voda.api.history import MAX_POINTS
    from voda.store.db import make_engine, migrate, session_factory
    from voda.store.history import add_samples, samples

    engine = make_engine(db)
    migrate(engine)
    now = time.time()
    rows = [{"time": now - 60.0 * i, "gpu_type": "default", "gpus": 16, "allocated": i % 17,
             "in_use": i % 13, "running": i % 5, "waiting": i % 40,
             "wait_mean_seconds": 30.0 * (i % 50), "wait_max_seconds": 90.0 * (i % 50)}
            for i in range(count)]
    sessions = session_factory(engine)
    with sessions.begin() as session:
        add_samples(session, rows, keep_after=now - 8 * 86400.0)
    cpu = []
    for _ in range(runs):
        started = time.process_time()
        with sessions() as session:
            points = samples(session, "default", now - 7 * 86400.0, now + 1, MAX_POINTS)
        cpu.append(time.process_time() - started)
    engine.dispose()
    print(f"store: a week of {count} samples read as {len(points)} points: CPU median "
          f"{statistics.median(cpu) * 1000:.1f} ms (target: under 50 ms, a page's budget)")


def timed(client: httpx.Client, path: str, runs: int) -> tuple[float, float, int]:
    """(median ms, p90 ms, bytes) of `runs` GETs of `path`."""
    seconds = []
    size = 0
    for _ in range(runs):
        started = time.perf_counter()
        answer = client.get(path)
        seconds.append(time.perf_counter() - started)
        if answer.status_code != 200:
            raise SystemExit(f"{path}: {answer.status_code} {answer.text[:300]}")
        size = len(answer.content)
    seconds.sort()
    return (statistics.median(seconds) * 1000, seconds[int(0.9 * (len(seconds) - 1))] * 1000,
            size)


def first_update(page, timeout: float = 15.0) -> float:  # type: ignore[no-untyped-def]
    """When the page got its first pushed update (ms since navigation). Polled from here: a
    predicate run in the page (wait_for_function) is an eval, which its policy blocks."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = page.evaluate("window.__first_update")
        if value is not None:
            return float(value)
        time.sleep(0.01)
    raise SystemExit(f"{page.url}: no update pushed in {timeout:.0f} s")


def browser_times(url: str, paths: list[str], runs: int) -> dict[str, tuple[float, float]]:
    """Median ms to the load event and to the first pushed update, per page (logged in as
    the benchmark's administrator through the login cookie)."""
    from browser import CHROMIUM_ARGS, chromium_path
    from playwright.sync_api import sync_playwright

    out = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(),
                                             args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1300, "height": 900})
        context.add_cookies([{"name": name, "value": value, "url": url}
                             for name, value in dashboard_login(url, TOKEN).items()])
        page = context.new_page()
        page.add_init_script("""
            window.__first_update = null;
            document.addEventListener('htmx:sseMessage', () => {
              if (window.__first_update === null) window.__first_update = performance.now();
            });""")
        for path in paths:
            loads, updates = [], []
            for _ in range(runs):
                page.goto(url + path, wait_until="load")
                loads.append(page.evaluate(
                    "performance.getEntriesByType('navigation')[0].loadEventEnd"))
                updates.append(first_update(page))
            out[path] = (statistics.median(loads), statistics.median(updates))
        browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--browser-runs", type=int, default=10)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="voda-bench-ui-"))
    db = f"sqlite:///{folder / 'bench.db'}"
    stored_jobs(db, args.jobs)
    stored_samples(db, WEEK_OF_SAMPLES, args.runs)
    server = Server(db, folder / "serve.log")
    server.start()
    try:
        # The API takes the bearer token, the pages the dashboard's login cookie.
        with httpx.Client(base_url=server.url, timeout=60,
                          cookies=dashboard_login(server.url, TOKEN),
                          headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            total = client.get("/v1/jobs", params={"limit": 1}).json()["total"]
            name = client.get("/v1/jobs", params={"limit": 1, "offset": total // 2}
                              ).json()["items"][0]["name"]
            last = (total + 49) // 50
            node = client.get("/v1/cluster").json()["nodes"][0]["name"]
            pages = {
                "jobs, first page (50 per page)": "/ui/jobs",
                f"jobs, last page ({last})": f"/ui/jobs?page={last}",
                "jobs, search 'stored-0999'": "/ui/jobs?q=stored-0999",
                "jobs, status Running": "/ui/jobs?status=Running",
                "cluster": "/ui/cluster",
                "a node": f"/ui/nodes/{node}",
                "history, last hour": "/ui/history?range=hour",
                f"history, last week ({WEEK_OF_SAMPLES} samples)": "/ui/history?range=week",
                "a job": f"/ui/jobs/{name}",
                "scheduler": "/ui/scheduler",
                "API list, 50 at the last offset": f"/v1/jobs?limit=50&offset={total - 50}",
            }
            print(f"{total} jobs in the service; {args.runs} answers per page over loopback")
            print(f"{'page':40} {'median ms':>10} {'p90 ms':>8} {'KiB':>6}")
            for label, path in pages.items():
                median, p90, size = timed(client, path, args.runs)
                print(f"{label:40} {median:10.1f} {p90:8.1f} {size / 1024:6.1f}")
        paths = ["/ui/jobs", f"/ui/jobs?page={last}", "/ui/cluster", f"/ui/jobs/{name}"]
        print(f"\nin Chromium, median of {args.browser_runs} loads")
        print(f"{'page':40} {'load event ms':>14} {'first push ms':>14}")
        for path, (load, update) in browser_times(server.url, paths, args.browser_runs).items():
            print(f"{path[:40]:40} {load:14.0f} {update:14.0f}")
    finally:
        server.kill()


if __name__ == "__main__":
    main()
