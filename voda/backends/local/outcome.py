"""What the exit of all of a job's ranks means: completed, stopped as asked, or failed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from voda.backends.local.process import UNKNOWN_EXIT, describe_exit
from voda.training.report import STOPPED_EXIT_CODE


@dataclass(frozen=True)
class Completed:
    """The job finished: JOB_COMPLETED."""


@dataclass(frozen=True)
class Stopped:
    """The backend asked the ranks to stop and they did: the job launches again later."""

    how: str  # e.g. "exit code 75"


@dataclass(frozen=True)
class Failed:
    """The job failed: JOB_FAILED with `code` and `reason` (None: described from the code).

    `rank_exit`: `code` is the first non-zero exit of the ranks as their launcher saw
    it (torchrun exits 1 for any failed worker; the worker's own code is in the log).
    """

    code: int
    reason: str | None = None
    rank_exit: bool = False


Outcome = Completed | Stopped | Failed


def judge_exit(codes: Sequence[int], *, requested: bool, crash_code: int | None,
               last_epoch: int, epochs: int) -> Outcome:
    """The outcome of ranks that all exited with `codes`.

    `requested`: the backend had asked them to stop; `crash_code`: the exit of a rank
    that died while the others ran; `last_epoch` of the job's `epochs`: from its reports.
    """
    if crash_code is not None:
        return Failed(crash_code)
    if all(c == 0 for c in codes) and (not requested or last_epoch >= epochs):
        return Completed()
    if requested:
        return Stopped(", ".join(sorted({describe_exit(c) for c in codes})))
    if all(c == 0 for c in codes) or (
        all(c == UNKNOWN_EXIT for c in codes) and last_epoch >= epochs
    ):
        return Completed()
    if all(c == STOPPED_EXIT_CODE for c in codes):
        return Failed(STOPPED_EXIT_CODE, f"exit code {STOPPED_EXIT_CODE}: the job stopped "
                      "after a signal the backend did not send")
    return Failed(next(c for c in codes if c != 0), rank_exit=True)
