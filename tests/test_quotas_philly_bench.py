"""bench/quotas_philly.py's parts: the teams' guarantees, the windows of the trace, and the
idle GPUs while jobs wait (the simulations themselves are the bench's)."""

from __future__ import annotations

from bench_modules import load_bench

from voda.sim.report import SimResult

bench = load_bench("quotas_philly")


def test_guarantees_add_up_to_the_cluster_by_share_and_equal() -> None:
    shares = {"a": 0.5, "b": 0.3, "c": 0.2}
    assert bench.guarantees(shares, 10, equal=False) == {"a": 5, "b": 3, "c": 2}
    by_share = bench.guarantees(shares, 7, equal=False)  # 3.5, 2.1, 1.4: a's remainder wins
    assert by_share == {"a": 4, "b": 2, "c": 1}
    assert bench.guarantees(shares, 7, equal=True) == {"a": 3, "b": 2, "c": 2}


def test_the_busy_virtual_clusters_are_those_with_half_a_percent_of_the_gpu_time() -> None:
    rows = [{"cluster": "x", "gpu_time": "990"}, {"cluster": "y", "gpu_time": "6"},
            {"cluster": "z", "gpu_time": "4"}]
    assert bench.busy_clusters(rows) == {"x": 0.99, "y": 0.006}


def test_windows_hold_the_jobs_arriving_within_the_hours_of_their_start() -> None:
    rows = [{"timestamp": f"2017-10-0{d} {h:02d}:00:00"} for d in (1, 2, 3) for h in range(24)]
    found = bench.windows(rows, hours=2.0, most=50, count=3, seed=0)
    assert len(found) == 0  # a 2-hour window holds 2 jobs, fewer than MIN_WINDOW_JOBS
    found = bench.windows(rows, hours=30.0, most=25, count=2, seed=0)
    assert len(found) == 2 and all(len(w) == 25 for w in found)
    for window in found:
        stamps = [bench._seconds(r["timestamp"]) for r in window]
        assert stamps == sorted(stamps) and stamps[-1] - stamps[0] < 30 * 3600


def test_idle_gpus_are_averaged_over_the_time_jobs_wait_only() -> None:
    # 8 GPUs; job a holds 4 from 0 to 100, b 8 from 100; someone waits from 0 to 50 and
    # from 150 to 200: idle 4 GPUs for 50 s, then 0 for 50 s
    result = SimResult(algorithm="x", workload="w", jobs=(), avg_jct=0.0, p50_jct=0.0,
                       p99_jct=0.0, makespan=0.0,
                       utilization=0.0, rescales=0, migrations=0, preemptions=0,
                       unfinished=0, timeline=((0.0, "a", 4), (100.0, "a", 0),
                                               (100.0, "b", 8)),
                       queue=((0.0, 1, 1), (50.0, 0, 1), (150.0, 1, 1), (200.0, 0, 1)))
    assert bench.idle_while_waiting(result, 8) == 2.0
