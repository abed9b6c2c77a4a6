"""Handing GPUs out one at a time to the largest gain, as one sort.

Optimus and ElasticTiresias hand out GPUs one at a time from a heap: each job's next
step (one GPU more, or its start) is keyed by its gain, ties to the earlier job, and a
job's step after that is pushed only once this one is taken. Each job's steps form a
list consumed in order, and the heap takes, each time, the best head.

That is a merge of the jobs' lists by their heads, and a merge by heads is a sort: a
job's step comes out in the order of its *running* key, the worst gain of that step
and every step of the job before it (the running minimum of the gains), ties to the
earlier job, then the earlier step. (Take a step a of job A and b of another job B
with b's running key better than a's: the step a' of A that set a's running key was
the best head when it came out, so B's head then, at or before b, had a worse gain
than b's running key, which is impossible; so b comes out first.) A step that comes
out of the heap is the best head, so the heap's stop rules (no gain left, or the best
gain below a bound) read the same off the running keys.

So the gains of every job's steps are computed in one batch and sorted once, instead
of one heap operation and one speed-model call per GPU. The algorithms table each job
up to a width (`first_width`), so that a job with a large max costs only the steps it
may take; a walk that takes a job's last tabled step is redone with wider tables.
"""

from __future__ import annotations

import numpy as np


def running_min(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per segment of `values` (segment i: `lengths[i]` values from `starts[i]`, each at
    least one long), the running minimum from its start (`np.minimum.accumulate`: NaN
    stays NaN), all segments at once: the segments of one length are rows of one array."""
    out = np.empty(len(values))
    for length in np.unique(lengths).tolist():
        rows = starts[lengths == length][:, None] + np.arange(length)
        out[rows] = np.minimum.accumulate(values[rows], axis=1)
    return out


def heap_order(gains: np.ndarray, starts: np.ndarray, lengths: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """The order a heap hands out the steps whose gains are `gains` (job after job, in
    the jobs' tie order; job i's steps are `lengths[i]` from `starts[i]`, each pushed
    once the one before it is taken), and each step's running gain: the worst of it and
    the job's steps before it. The order is by running gain, largest first, ties to the
    earlier job and step (a stable sort: the flat index is in job, then step, order).
    No NaN: a NaN gain compares as no number does."""
    worst = running_min(gains, starts, lengths)
    return running_order(worst), worst


def running_order(worst: np.ndarray) -> np.ndarray:
    """The steps by running gain `worst`, largest first, ties to the earlier step (the
    order of `heap_order`, for running gains worked out in a batch of several hand-outs)."""
    return np.argsort(-worst, kind="stable")


def first_width(rooms: np.ndarray, free: int) -> int:
    """How many steps to table per job first, out of `rooms` (the most steps of each
    job): every one while they add up to at most four per free GPU and job; else enough
    for twice an even share of the `free` GPUs, and a few more."""
    if not len(rooms) or int(rooms.sum()) <= 4 * (free + len(rooms)):
        return int(rooms.max(initial=0))
    return 2 * -(-free // len(rooms)) + 4


def segments(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each segment starts and which segment each position is in, for segments of
    `lengths` laid end to end."""
    starts = np.cumsum(lengths) - lengths
    return starts, np.repeat(np.arange(len(lengths)), lengths)
