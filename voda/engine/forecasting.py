"""Forecasts refreshed after each decision, off the decision path.

`Forecaster.after_decision` takes a snapshot of the scheduler (copies of the active jobs'
frozen views, the placement, the settings: what decide() was just given) on the caller's
thread and hands the forecast itself (voda.engine.forecast) to one background thread.
While one runs, later snapshots replace each other: when it ends, only the newest is
forecast. Readers get the last finished forecast; a decision never waits for one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from voda.core.model import Job
from voda.core.placement.base import Placer
from voda.engine.forecast import (
    BASIS,
    DEFAULT_MAX_DECISIONS,
    DEFAULT_PENALTY,
    Forecast,
    ForecastInput,
    JobForecast,
    forecast,
    snapshot,
)
from voda.engine.scheduler import Scheduler

log = logging.getLogger(__name__)

# Wall-clock seconds a forecast may take before it stops where it got to (jobs it did not
# reach show no start or finish): one in the background, and a what-if, which a request
# waits for. 1,000 jobs on 4,096 GPUs take about 1 s (bench/forecast.py).
BACKGROUND_SECONDS = 30.0
WHAT_IF_SECONDS = 10.0


def forecast_view(f: JobForecast | None, computed_at: float | None) -> dict[str, Any] | None:
    """A job's forecast as the REST job object shows it (None: none yet)."""
    if f is None or computed_at is None:
        return None
    return {"start": f.start, "finish": f.finish, "running": f.running, "basis": BASIS,
            "computed_at": computed_at}


class Forecaster:
    def __init__(self, penalty: float = DEFAULT_PENALTY,
                 max_decisions: int | None = DEFAULT_MAX_DECISIONS,
                 run: Callable[[ForecastInput], Forecast] | None = None,
                 placer: Placer | None = None) -> None:
        self.penalty = penalty
        self.placer = placer
        self.max_decisions = max_decisions
        self._run = run or (lambda given: forecast(
            given, max_decisions=self.max_decisions, stop=self._stop_after(BACKGROUND_SECONDS)))
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._busy = False
        self._next: ForecastInput | None = None
        self.latest: Forecast | None = None
        self.failures = 0

    # ----- refresh ---------------------------------------------------------------
    def after_decision(self, scheduler: Scheduler, now: float) -> None:
        """Called on the decision's thread once its plan is applied: snapshot and queue."""
        given = snapshot(scheduler, now, self.penalty, self.placer)
        with self._lock:
            if self._busy:
                self._next = given  # the newest replaces any not yet started
                return
            self._busy = True
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="voda-forecast")
            self._executor.submit(self._work, given)

    def _work(self, given: ForecastInput) -> None:
        while True:
            try:
                result = self._run(given)
            except Exception:  # a forecast never takes the service down
                log.exception("forecast failed; the last one stays")
                self.failures += 1
            else:
                with self._lock:
                    if self.latest is None or result.computed_at >= self.latest.computed_at:
                        self.latest = result
            with self._lock:
                if self._next is None:
                    self._busy = False
                    return
                given, self._next = self._next, None

    def wait(self, timeout: float = 10.0) -> bool:
        """Tests: wait until no forecast is under way or queued."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._busy:
                    return True
            time.sleep(0.005)
        return False

    def close(self) -> None:
        """Stop: a forecast under way ends at its next step, none queued starts."""
        self._closed.set()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def _stop_after(self, seconds: float) -> Callable[[], bool]:
        deadline = time.monotonic() + seconds
        return lambda: self._closed.is_set() or time.monotonic() > deadline

    # ----- read --------------------------------------------------------------------
    def of(self, name: str) -> dict[str, Any] | None:
        latest = self.latest
        if latest is None:
            return None
        return forecast_view(latest.jobs.get(name), latest.computed_at)

    def what_if(self, scheduler: Scheduler, job: Job, now: float) -> dict[str, Any]:
        """When `job` would start and finish if submitted now (no other arrivals)."""
        given = snapshot(scheduler, now, self.penalty, self.placer)
        result = forecast(given, extra=[job], max_decisions=self.max_decisions,
                          stop=self._stop_after(WHAT_IF_SECONDS))
        view = forecast_view(result.jobs[job.name], now)
        assert view is not None
        return view
