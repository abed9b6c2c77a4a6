"""Simulator-only truth about a job, for research baselines that assume an oracle.

No real cluster can fill these in: they come from the simulator's own throughput
profiles. Only algorithms that say "oracle" in their name or options read them;
every other algorithm, and the service, must work from what jobs report.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StepOracle:
    """The true step time and step count of a job that trains at a fixed global batch.

    - `step_seconds[n - 1]`: seconds per optimiser step on n GPUs packed onto as few
      nodes as possible, split as the job splits its batch (at least one accumulation
      step on one GPU, as the Optimus+Oracle baseline of the Pollux artifact assumes);
    - `iterations[k]`: optimiser steps taken by the end of epoch k + 1 at that batch.
    """

    step_seconds: tuple[float, ...]
    iterations: tuple[float, ...]

    def step_time(self, gpus: int) -> float:
        if gpus < 1:
            return float("inf")
        return self.step_seconds[min(gpus, len(self.step_seconds)) - 1]

    def remaining_steps(self, completed_epochs: int) -> float:
        """Steps from the end of `completed_epochs` to the end of the last epoch (at least 1)."""
        last = len(self.iterations) - 1
        if completed_epochs >= last:
            return 1.0
        return self.iterations[last] - self.iterations[max(completed_epochs, 0)]
