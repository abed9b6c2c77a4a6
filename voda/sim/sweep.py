"""`voda sweep`: run a grid of simulations on a local process pool or a Ray cluster.

Each run is a whole simulation plus its jobs' run times alone (slowdown and fairness,
voda.sim.isolated), done where it runs; the driver only appends each finished run to
the output directory (voda.sim.sweep_store), so a sweep killed at any point and started
again redoes only the runs that had not finished. The table and report are built from
the directory at the end (voda.sim.sweep_table).

Ray (`pip install voda[ray]`): `ray_address` is "local" (a private instance on this
machine with `workers` CPUs, stopped at the end), "auto" (the cluster this machine is a
node of) or a cluster's address (host:port or ray://host:port). Voda must be installed,
at the same version, on every node of the cluster: the tasks import it there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from voda.sim.compare import RunRequest, completed, run_one, with_details
from voda.sim.sweep_store import RunStore, result_record, run_key

MAX_WORKERS = 1024
LOCAL = "local"


class SweepSetupError(RuntimeError):
    """The executor could not be had (Ray missing, unreachable, or without voda)."""


@dataclass(frozen=True)
class Finished:
    """One run just finished (what progress reports show)."""

    request: RunRequest
    record: dict[str, Any]
    done: int  # runs of the grid done, this one included
    total: int


def run_record(request: RunRequest) -> dict[str, Any]:
    """Run one simulation and time its jobs alone: the line the output directory keeps."""
    start = time.perf_counter()
    result = with_details(request, run_one(request))
    return {"key": run_key(request), "request": asdict(request),
            "seconds": time.perf_counter() - start, "result": result_record(result)}


def check_workers(workers: int) -> int:
    if not 1 <= workers <= MAX_WORKERS:
        raise ValueError(f"workers: must be between 1 and {MAX_WORKERS}, got {workers}")
    return workers


def run_sweep(runs: Sequence[RunRequest], store: RunStore, workers: int,
              ray_address: str | None = None,
              on_start: Callable[[int, int], None] | None = None) -> Iterator[Finished]:
    """Run what `store` lacks of `runs`, appending each as it finishes; yields each."""
    check_workers(workers)
    pending = [r for r in runs if not store.done(run_key(r))]
    done = len(runs) - len(pending)
    if on_start is not None:
        on_start(done, len(pending))
    if not pending:
        return
    results = (ray_completed(run_record, pending, ray_address, workers) if ray_address
               else completed(run_record, pending, workers))
    for i, record in results:
        store.add(record)
        done += 1
        yield Finished(pending[i], record, done, len(runs))


def ray_completed(task: Callable[[RunRequest], Any], requests: Sequence[RunRequest],
                  address: str, workers: int) -> Iterator[tuple[int, Any]]:
    """(index, task(request)) as each finishes on Ray, one CPU per task."""
    ray = _ray()
    started = False
    if address not in (LOCAL, "auto") and not address.startswith("ray://"):
        check_reachable(address)
    if not ray.is_initialized():
        try:
            if address == LOCAL:
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise SweepSetupError(f"ray: cannot connect to {address!r}: {exc}") from None
        started = True
    try:
        _check_voda_on_workers(ray)
        remote = ray.remote(num_cpus=1, max_retries=0)(task)
        refs = {remote.remote(r): i for i, r in enumerate(requests)}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                yield refs[ref], ray.get(ref)
    finally:
        if started:
            ray.shutdown()


def check_reachable(address: str, timeout: float = 10.0) -> None:
    """Fail at once when nothing answers at a cluster's host:port (ray.init would retry
    for minutes)."""
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SweepSetupError(f"ray: expected HOST:PORT, 'auto', 'local' or ray://HOST:PORT,"
                              f" got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise SweepSetupError(f"ray: nothing answers at {address} ({exc}); start the "
                              "cluster's head there with `ray start --head`") from None


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise SweepSetupError("ray: not installed; install it with `pip install "
                              "'voda[ray]'`") from None
    return ray


def _voda_version() -> str:
    import voda

    return voda.__version__


def _check_voda_on_workers(ray: Any) -> None:
    """Fail early, and plainly, when the cluster's workers cannot import this voda."""
    from voda import __version__

    try:
        theirs = ray.get(ray.remote(num_cpus=0, max_retries=0)(_voda_version).remote(),
                         timeout=300)
    except Exception as exc:  # a worker without voda fails on unpickling the task
        raise SweepSetupError(
            "ray: the cluster's workers cannot run voda (install voda, with the same "
            f"version, on every node): {type(exc).__name__}: {exc}") from None
    if theirs != __version__:
        raise SweepSetupError(f"ray: the workers have voda {theirs}, this machine "
                              f"{__version__}: install the same version on every node")
