"""One configuration (GPU type, GPU count) per job, at least cost, within each type's GPUs:
the program Sia's and Voda's heterogeneity policies solve, as a mixed-integer program
(SciPy's milp, HiGHS)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import tempfile
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix


def solve_rows(rows: Sequence[tuple[int, str, int]], cost: np.ndarray, jobs: int,
               types: Sequence[str], free: Mapping[str, int], fixed: Collection[int] = (),
               gap: float = 1e-4, time_limit: float = 30.0, presolve: bool = True
               ) -> np.ndarray:
    """Which rows (job index, type, GPUs) to take, at most one per job, minimising the sum of
    their `cost` with no type given more than its `free` GPUs; the rows of the jobs in
    `fixed` (held where they are) must be taken, unless no choice can take them all."""
    columns = np.arange(len(rows))
    one_each = coo_matrix((np.ones(len(rows)), ([i for i, _, _ in rows], columns)),
                          shape=(jobs, len(rows)))
    type_row = {t: k for k, t in enumerate(types)}
    gpus = coo_matrix(([float(n) for _, _, n in rows],
                       ([type_row[t] for _, t, _ in rows], columns)),
                      shape=(len(types), len(rows)))
    constraints = [LinearConstraint(one_each, -np.inf, 1.0),
                   LinearConstraint(gpus, -np.inf, [float(free[t]) for t in types])]
    lower = np.array([1.0 if i in fixed else 0.0 for i, _, _ in rows])
    with _without_solver_debug_lines():
        result = milp(cost, constraints=constraints, integrality=np.ones(len(rows)),
                      bounds=Bounds(lower, 1),
                      options={"mip_rel_gap": gap, "time_limit": time_limit,
                               "presolve": presolve})
    if result.x is None:
        if fixed:  # the held jobs' GPUs are no longer there: decide without holding them
            return solve_rows(rows, cost, jobs, types, free, (), gap, time_limit, presolve)
        return np.zeros(len(rows), dtype=bool)
    return np.round(result.x).astype(bool)


_STDOUT = threading.Lock()
_SOLVER_DEBUG_LINE = b"HighsMipSolverData::transformNewIntegerFeasibleSolution"


@contextlib.contextmanager
def _without_solver_debug_lines() -> Iterator[None]:
    """Drop the solver's debug lines from standard output while it runs. SciPy 1.17's
    HiGHS writes `HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();`
    to the C stdout on some solves, whatever its output options: hundreds of lines on one
    workload, and they corrupted `voda simulate --json`. What else reaches standard
    output meanwhile is written out after the solve, in order."""
    with _STDOUT, contextlib.ExitStack() as stack:
        sys.stdout.flush()
        try:
            sink = stack.enter_context(tempfile.TemporaryFile())
            saved = os.dup(1)
        except OSError:  # nowhere to catch it: solve as is
            yield
            return
        os.dup2(sink.fileno(), 1)
        try:
            yield
        finally:
            _flush_c_streams()
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            kept = b"".join(line for line in sink.read().splitlines(keepends=True)
                            if _SOLVER_DEBUG_LINE not in line)
            if kept:
                os.write(1, kept)


def _flush_c_streams() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)
