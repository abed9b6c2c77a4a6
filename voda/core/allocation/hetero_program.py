"""One configuration (GPU type, GPU count) per job, at least cost, within each type's GPUs:
the program Sia's and Voda's heterogeneity policies solve, as a mixed-integer program
(SciPy's milp, HiGHS)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix


def solve_rows(rows: Sequence[tuple[int, str, int]], cost: np.ndarray, jobs: int,
               types: Sequence[str], free: Mapping[str, int], fixed: Collection[int] = (),
               gap: float = 1e-4, time_limit: float = 30.0) -> np.ndarray:
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
    result = milp(cost, constraints=constraints, integrality=np.ones(len(rows)),
                  bounds=Bounds(lower, 1),
                  options={"mip_rel_gap": gap, "time_limit": time_limit})
    if result.x is None:
        if fixed:  # the held jobs' GPUs are no longer there: decide without holding them
            return solve_rows(rows, cost, jobs, types, free, (), gap, time_limit)
        return np.zeros(len(rows), dtype=bool)
    return np.round(result.x).astype(bool)
