"""One workload under several arrival jitterings (`voda simulate --seeds N`): each
algorithm's metrics as a mean and a 95 % interval across the seeds.

Seed k moves every arrival by up to the jitter, uniformly (voda.sim.workloads.
jitter_arrivals); the runs are independent samples of a metric, and the interval is
Student's t with N - 1 degrees of freedom: mean +- t(0.975, N - 1) * s / sqrt(N), s the
sample standard deviation (N - 1 in its denominator). One seed has no interval. A run
whose metric is undefined (NaN: no job finished, no job's run time alone known) is left
out of that metric's interval, and `n` says how many counted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from voda.sim.report import SimResult

DEFAULT_JITTER = 300.0  # seconds, for --seeds without --jitter
MIN_SEEDS, MAX_SEEDS = 1, 100
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    mean: float  # NaN when no run counted
    low: float | None  # None with fewer than two runs
    high: float | None
    n: int  # the runs that counted

    @property
    def half_width(self) -> float | None:
        return None if self.high is None else self.high - self.mean

    def to_dict(self) -> dict[str, Any]:
        return {"mean": _json_number(self.mean), "low": self.low, "high": self.high,
                "half_width": self.half_width, "n": self.n}


def _json_number(x: float) -> float | None:
    return None if math.isnan(x) else x


def json_ready(value: Any) -> Any:
    """NaN and infinities are not JSON: report them as null (at any depth)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    return value


def t_interval(values: Iterable[float | None], confidence: float = CONFIDENCE) -> Interval:
    """The mean of `values` and its Student-t interval (None and NaN left out)."""
    known = [float(v) for v in values if v is not None and not math.isnan(v)]
    n = len(known)
    if n == 0:
        return Interval(float("nan"), None, None, 0)
    mean = math.fsum(known) / n
    if n == 1:
        return Interval(mean, None, None, 1)
    from scipy.stats import t

    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in known) / (n - 1))
    half = float(t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


# The metrics summarised across seeds: (key, label, value of one run).
METRICS: tuple[tuple[str, str, Callable[[SimResult], float]], ...] = (
    ("avg_jct", "average JCT (s)", lambda r: r.avg_jct),
    ("p50_jct", "median JCT (s)", lambda r: r.p50_jct),
    ("p99_jct", "p99 JCT (s)", lambda r: r.p99_jct),
    ("makespan", "makespan (s)", lambda r: r.makespan),
    ("utilization", "utilization", lambda r: r.utilization),
    ("gpu_hours", "GPU-hours", lambda r: r.gpu_hours),
    ("rescales", "rescales", lambda r: float(r.rescales)),
    ("migrations", "migrations", lambda r: float(r.migrations)),
    ("preemptions", "preemptions", lambda r: float(r.preemptions)),
    ("mean_slowdown", "mean slowdown", lambda r: r.mean_slowdown),
    ("rho_mean", "mean finish-time fairness", lambda r: r.rho_mean),
    ("rho_max", "max finish-time fairness", lambda r: r.rho_max),
    ("unfinished", "unfinished jobs", lambda r: float(r.unfinished)),
)


@dataclass(frozen=True)
class AlgorithmSummary:
    algorithm: str
    runs: tuple[SimResult, ...]  # one per seed, ascending
    metrics: dict[str, Interval]

    @property
    def seeds(self) -> list[int]:
        return [r.seed for r in self.runs]

    @property
    def jobs(self) -> int:
        return len(self.runs[0].jobs)

    def to_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "seeds": self.seeds,
                "jitter": self.runs[0].jitter, "confidence": CONFIDENCE,
                "metrics": {k: v.to_dict() for k, v in self.metrics.items()}}


def by_algorithm(results: Sequence[SimResult]) -> dict[str, list[SimResult]]:
    """The runs of each algorithm (in the order algorithms first appear), by seed."""
    out: dict[str, list[SimResult]] = {}
    for r in results:
        out.setdefault(r.algorithm, []).append(r)
    return {a: sorted(runs, key=lambda r: r.seed) for a, runs in out.items()}


def metric_intervals(runs: Sequence[SimResult]) -> dict[str, Interval]:
    """Each metric of METRICS across `runs`: its mean and interval."""
    return {key: t_interval(value(r) for r in runs) for key, _, value in METRICS}


def summarize(results: Sequence[SimResult]) -> list[AlgorithmSummary]:
    return [AlgorithmSummary(a, tuple(runs), metric_intervals(runs))
            for a, runs in by_algorithm(results).items()]


def check_seeds(count: int) -> int:
    if not MIN_SEEDS <= count <= MAX_SEEDS:
        raise ValueError(f"seeds: must be between {MIN_SEEDS} and {MAX_SEEDS}, got {count}")
    return count
