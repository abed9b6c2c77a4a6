"""FfDL's program on the few extras an optimum can take: the same extras as
`ffdl_program.program_extras` over every job, at a fraction of its columns.

A Lagrangian bound prunes the program. For a price `lam` >= 0 per GPU, every job's
best price-adjusted objective m_i = max_e f_i(e) - lam * e gives an upper bound on any
allocation of at most `rest` extras: UB = lam * rest + sum m_i. An allocation x falls
short of UB by sum_i (m_i - f_i(x_i) + lam * x_i) + lam * (rest - sum x_i), all terms
>= 0; so in an optimum every job's own shortfall (its gap) is at most UB - OPT. Given a
feasible allocation of total LB <= OPT, the program over each job's extras from the
first to the last with a gap <= UB - LB holds every optimum, and nothing infeasible: its
optima are exactly the whole program's, and so is the one it picks among them (the most
for the first job, then the second...: an order that fixed jobs, with one choice, do not
change). Near-concave objectives, as speedups are, leave most jobs one choice.

The price is the rest-th largest marginal gain, where a greedy by marginal gain would
stop, and the greedy gives the feasible allocation (each job as many GPUs as it has
gains among the greedy's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

Program = Callable[[int, Sequence[int], Sequence[np.ndarray]], list[int]]

# Price-adjusted objectives and gaps stay below this in magnitude, in int64; inputs
# whose values could exceed it go to the whole program.
_SAFE = 2.0**61


def bounded_extras(rest: int, spans: np.ndarray, values: np.ndarray, starts: np.ndarray,
                   program: Program) -> list[int] | None:
    """`program(rest, spans, tables)` where job i's table is values[starts[i]:][:spans[i]
    + 1], by `program` on the choices an optimum can take; None where int64 could
    overflow (the caller runs the whole program)."""
    n = len(spans)
    if n == 0:
        return []
    if rest == 0:
        return [0] * n
    lengths = spans + 1
    extra = np.arange(len(values), dtype=np.int64) - np.repeat(starts, lengths)
    largest = float(np.abs(values).max())
    if largest * (2.0 * float(spans.max()) + 3.0) >= _SAFE:
        return None
    lam, greedy = _price_and_greedy(values, extra, spans, rest)
    gap, best = _gaps(values, extra, starts, lengths, lam)
    upper = lam * rest + sum(best.tolist())
    slack = upper - sum(values[starts + greedy].tolist())
    return _window_program(rest, values, starts, extra, gap, slack, program).tolist()


def _price_and_greedy(values: np.ndarray, extra: np.ndarray, spans: np.ndarray,
                      rest: int) -> tuple[int, np.ndarray]:
    """The price: the rest-th largest marginal gain (0 when there are no more than
    rest, or it is negative). And a feasible allocation near the optimum: each job
    takes as many GPUs as it has marginal gains among the `rest` largest positive ones
    (ties: the earlier job's)."""
    steps = np.flatnonzero(extra > 0)
    gains = values[steps] - values[steps - 1]
    lam = 0
    if len(gains) > rest:
        lam = max(int(np.partition(gains, len(gains) - rest)[len(gains) - rest]), 0)
    taken = gains > lam
    if lam > 0:
        ties = np.flatnonzero(gains == lam)
        taken[ties[:rest - int(taken.sum())]] = True
    owner = np.repeat(np.arange(len(spans)), spans)
    return lam, np.bincount(owner[taken], minlength=len(spans))


def _gaps(values: np.ndarray, extra: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
          lam: int) -> tuple[np.ndarray, np.ndarray]:
    """Each choice's shortfall from its job's best at price `lam`, and those bests."""
    adjusted = values - lam * extra
    best = np.maximum.reduceat(adjusted, starts)
    return np.repeat(best, lengths) - adjusted, best


def _window(gap: np.ndarray, extra: np.ndarray, starts: np.ndarray,
            slack: int) -> tuple[np.ndarray, np.ndarray]:
    """Per job, the first and the last extras with a gap of at most `slack`."""
    allowed = gap <= slack
    first = np.minimum.reduceat(np.where(allowed, extra, np.iinfo(np.int64).max), starts)
    last = np.maximum.reduceat(np.where(allowed, extra, -1), starts)
    return first, last


def _window_program(rest: int, values: np.ndarray, starts: np.ndarray, extra: np.ndarray,
                    gap: np.ndarray, slack: int, program: Program) -> np.ndarray:
    """The program's extras with each job held to its window for `slack`; the jobs with
    one choice in it are left out of the program."""
    first, last = _window(gap, extra, starts, slack)
    left = rest - int(first.sum())
    last = np.minimum(last, first + left)  # no optimum gives one job more
    free = np.flatnonzero(last > first)
    extras = first.copy()
    if len(free):
        low, high = (starts[free] + first[free]).tolist(), (starts[free] + last[free]).tolist()
        tables = [values[a:b + 1] for a, b in zip(low, high, strict=True)]
        extras[free] += program(left, (last[free] - first[free]).tolist(), tables)
    return extras
