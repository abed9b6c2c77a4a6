"""A batch-adaptive job's own loop, as AdaptDL runs it inside each Pollux job.

The job measures every new configuration it runs (nodes, GPUs, per-GPU
micro-batch -> step and sync time: here the profile's true times), refits its
step-time model to all it measured (voda.core.goodput.fit_perf_params), keeps
the gradient statistics of its current batch and epoch, and picks the batch that
maximises its goodput on the GPUs it holds. What it knows is what it reports to
the scheduler: `AdaptiveAgent.model()`.

Before its first measurement a job trains at the smallest batch its GPUs allow,
max(M0, min local batch x GPUs). A job with a fixed batch (ncf in the Pollux
workloads) keeps it, but measures and reports all the same.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from voda.core.goodput import GoodputModel, PerfParams, fit_perf_params
from voda.sim.profiles import Profile
from voda.sim.throughput import BatchSplit

Config = tuple[int, int, int]  # (nodes, GPUs, per-GPU micro-batch)


def initial_model(profile: Profile, fixed_batch: int | None = None) -> GoodputModel:
    """What a batch-adaptive job declares when it is submitted: its batch limits and epoch
    length, and no measurement yet (so a scheduler knows it adapts, and that it has
    measured nothing)."""
    return GoodputModel(
        perf=None, grad_sqr=0.0, grad_var=0.0, init_batch=profile.init_batch_size,
        max_batch=profile.max_batch_size, min_local=profile.min_local_bsz,
        max_local=profile.max_local_bsz, max_profiled_replicas=0, fixed_batch=fixed_batch,
        epoch_samples=profile.samples_per_epoch,
    )


@dataclass
class AdaptiveAgent:
    profile: Profile
    fixed_batch: int | None = None
    measured: dict[Config, tuple[float, float]] = field(default_factory=dict)
    perf: PerfParams | None = None
    grad: tuple[float, float] = (0.0, 0.0)  # (grad_sqr, grad_var) of the current batch and epoch
    _model: GoodputModel | None = None

    def knows(self, config: Config) -> bool:
        return config in self.measured

    def observe(self, config: Config, step: float, sync: float, grad: tuple[float, float]
                ) -> None:
        """One step measured: its configuration's times (fit again if it is new) and the
        gradient statistics."""
        if grad != self.grad:
            self.grad = grad
            self._model = None
        if config in self.measured:
            return
        self.measured[config] = (step, sync)
        self.perf = fit_perf_params(tuple(
            (nodes, replicas, atomic, s - y, s)
            for (nodes, replicas, atomic), (s, y) in self.measured.items()
        ))
        self._model = None

    def model(self) -> GoodputModel:
        """What the job reports to the scheduler."""
        if self._model is None:
            self._model = dataclasses.replace(
                initial_model(self.profile, self.fixed_batch),
                perf=self.perf, grad_sqr=self.grad[0], grad_var=self.grad[1],
                max_profiled_replicas=max((c[1] for c in self.measured), default=0),
            )
        return self._model

    def split(self, nodes: int, replicas: int) -> BatchSplit:
        """The batch the job trains at on `replicas` GPUs over `nodes` nodes."""
        choice = self.model().choose(nodes, replicas)
        return BatchSplit(max(choice.atomic_bsz, 1), choice.accum_steps, replicas)
