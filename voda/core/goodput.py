"""Goodput of a job that adapts its batch size: throughput x statistical efficiency.

The model of Pollux (Qiao et al., OSDI'21), which its jobs fit and report to the
scheduler (docs/design/009-elastic-baselines.md):

- **Throughput.** One optimiser step on `replicas` GPUs over `nodes` nodes at
  per-GPU micro-batch `a` with `k` accumulation steps takes
  ``k * t_c + (t_c**g + t_n**g) ** (1/g)``, where the compute time is
  ``t_c = alpha_c + beta_c * a`` and the network time ``t_n`` is
  ``alpha_n + beta_n * max(R - 2, 0)`` across nodes, ``alpha_r + beta_r * ...``
  within one node and about 0 on one GPU. Throughput is the global batch
  ``R * a * (k + 1)`` over that time.
- **Statistical efficiency** of a global batch B against the initial batch M0:
  ``gain / s`` with ``s = B / M0`` and ``gain = (var + sqr) / (var / s + sqr)``,
  from the gradient statistics (square norm and variance) the job measures.
- **Goodput** = throughput x efficiency: M0-equivalent samples per second.
  A job picks the batch (and its split into micro-batches) that maximises it for
  the GPUs it holds (`GoodputModel.optimize`).

`fit_perf_params` fits the throughput parameters to measured step times (what a
job does after each new configuration it runs). Everything here is pure: no
clock, no I/O.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, minimize

TINY = 1e-8  # the model's "about zero" (network time on one GPU, fixed parameters)
BATCH_CANDIDATES = 50  # global batches tried, geometrically spaced from the smallest to the max


@dataclass(frozen=True, slots=True)
class PerfParams:
    """Step-time model: compute linear in the micro-batch, network by link kind, overlap g."""

    alpha_c: float
    beta_c: float
    alpha_n: float  # across nodes
    beta_n: float
    alpha_r: float  # within one node
    beta_r: float
    gamma: float  # 1: compute and network add up; 10: they overlap almost fully

    def as_array(self) -> np.ndarray:
        return np.array([self.alpha_c, self.beta_c, self.alpha_n, self.beta_n,
                         self.alpha_r, self.beta_r, self.gamma])


@dataclass(frozen=True, slots=True)
class BatchChoice:
    goodput: float  # M0-equivalent samples per second (0: no valid configuration)
    atomic_bsz: int  # per-GPU micro-batch
    accum_steps: int  # extra micro-batches per optimiser step

    def batch_size(self, replicas: int) -> int:
        return replicas * self.atomic_bsz * (self.accum_steps + 1)


@dataclass(frozen=True, slots=True)
class GoodputModel:
    """What a batch-adaptive job reports: its fitted step-time model, gradient statistics
    and batch limits. `perf` is None until the job has measured a step.

    `fixed_batch`: the job trains at this global batch whatever it holds (it does not
    adapt). `max_profiled_replicas`: the most GPUs it has measured a step on.
    """

    perf: PerfParams | None
    grad_sqr: float
    grad_var: float
    init_batch: int  # M0
    max_batch: int
    min_local: int  # per-GPU micro-batch range
    max_local: int
    max_profiled_replicas: int = 0
    fixed_batch: int | None = None
    # The length of one epoch in samples at the initial batch (what one epoch of
    # progress is worth), when the job says: then goodput gives epoch times.
    epoch_samples: float | None = None

    # ----- the model ---------------------------------------------------------------
    def step_time(self, nodes: np.ndarray, replicas: np.ndarray, atomic: np.ndarray,
                  accum: np.ndarray) -> np.ndarray:
        p = self.perf
        assert p is not None
        compute = p.alpha_c + p.beta_c * atomic
        network = _network_time(p, nodes, replicas)
        g = p.gamma
        optim = (compute ** g + network ** g) ** (1.0 / g)
        return accum * compute + optim

    def efficiency(self, batch: np.ndarray) -> np.ndarray:
        scale = batch / self.init_batch
        denom = self.grad_var / scale + self.grad_sqr
        gain = np.where(denom > 0, (self.grad_var + self.grad_sqr) / np.where(denom > 0, denom, 1),
                        1.0)
        return gain / scale

    def goodput(self, nodes: np.ndarray, replicas: np.ndarray, atomic: np.ndarray,
                accum: np.ndarray) -> np.ndarray:
        batch = replicas * atomic * (accum + 1)
        return batch / self.step_time(nodes, replicas, atomic, accum) * self.efficiency(batch)

    # ----- the batch a job picks -----------------------------------------------------
    def candidates(self, replicas: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(atomic, accum, valid) of the candidate batches: shape (BATCH_CANDIDATES, len)."""
        if self.fixed_batch is not None:
            atomic, accum = _fixed_split(self, np.full(len(replicas), self.fixed_batch), replicas)
            return atomic[None, :], accum[None, :], (atomic >= 1)[None, :]
        smallest = np.maximum(self.init_batch, self.min_local * replicas)
        batch = np.geomspace(smallest, self.max_batch, BATCH_CANDIDATES)
        local = batch / replicas
        accum = np.ceil(local / self.max_local - TINY) - 1
        accum = np.where((replicas == 1) & (local > self.init_batch + TINY),
                         np.maximum(accum, 1), accum)
        atomic = np.ceil(local / (accum + 1) - TINY)
        valid = (self.min_local <= atomic) & (atomic <= self.max_local)
        return atomic, accum, valid

    def optimize(self, nodes: Sequence[int] | np.ndarray, replicas: Sequence[int] | np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(goodput, atomic, accum) of the best batch for each (nodes, replicas) pair.

        Without a fitted model the job cannot compare batches: goodput is NaN and the
        batch is the smallest one (max(M0, min-local x replicas)).
        """
        n = np.asarray(nodes, dtype=float).ravel()
        r = np.asarray(replicas, dtype=float).ravel()
        if self.perf is None and self.fixed_batch is None:
            batch = np.maximum(self.init_batch, self.min_local * r)
            atomic, accum = _fixed_split(self, batch, r)
            return np.full(len(r), np.nan), atomic, accum
        atomic, accum, valid = self.candidates(r)
        if self.perf is None:
            return np.full(len(r), np.nan), atomic[0], accum[0]
        value = np.where(valid, self.goodput(n, r, np.maximum(atomic, 1), accum), 0.0)
        best = np.argmax(value, axis=0)
        columns = np.arange(len(r))
        atomic, accum = atomic[best, columns], accum[best, columns]
        capped = np.minimum(atomic, np.floor(self.max_batch / (r * (accum + 1))))
        return value[best, columns], capped, accum

    def choose(self, nodes: int, replicas: int) -> BatchChoice:
        """The batch a job holding `replicas` GPUs on `nodes` nodes trains at."""
        goodput, atomic, accum = self.optimize([nodes], [replicas])
        g = float(goodput[0])
        return BatchChoice(0.0 if math.isnan(g) else g, int(atomic[0]), int(accum[0]))


def has_gradient(model: GoodputModel | None) -> bool:
    """Whether a reported model carries gradient statistics (a job reports none until it
    has measured them)."""
    return model is not None and (model.grad_sqr > 0 or model.grad_var > 0)


def _fixed_split(model: GoodputModel, batch: np.ndarray, replicas: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    local = np.ceil(batch / replicas - TINY)
    accum = np.ceil(local / model.max_local - TINY) - 1
    accum = np.where((replicas == 1) & (batch > model.init_batch), np.maximum(accum, 1), accum)
    atomic = np.ceil(local / (accum + 1) - TINY)
    atomic = np.minimum(atomic, np.floor(model.max_batch / (replicas * (accum + 1))))
    return atomic, accum


def _network_time(p: PerfParams, nodes: np.ndarray, replicas: np.ndarray) -> np.ndarray:
    across = nodes > 1
    within = ~across & (replicas > 1)
    alpha = np.where(across, p.alpha_n, np.where(within, p.alpha_r, TINY))
    beta = np.where(across, p.beta_n, np.where(within, p.beta_r, TINY))
    return alpha + beta * np.maximum(replicas - 2, TINY)


def layouts(replicas: int, per_node: int, max_nodes: int) -> list[int]:
    """Node counts that spread `replicas` GPUs evenly in aligned shares: packed
    (ceil(replicas / per_node) nodes), or replicas / d nodes of d GPUs each for d a
    power of two that divides `per_node` (so halves and quarters of nodes fit together)."""
    packed = -(-replicas // per_node)
    counts = {packed}
    d = 1
    while d < per_node:
        if per_node % d == 0 and replicas % d == 0 and replicas // d <= max_nodes:
            counts.add(replicas // d)
        d *= 2
    return sorted(c for c in counts if c <= max(max_nodes, packed))


@functools.lru_cache(maxsize=16384)
def best_layouts(model: GoodputModel, cap: int, per_node: int, max_nodes: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(goodput, nodes) on n = 1..cap GPUs at the best of `layouts` (ties: fewer nodes).

    A model that has measured no step across nodes assumes links between nodes are
    slower, so it packs until it has measured otherwise. Read-only; cached, since a
    job's model changes only when it reports.
    """
    pairs = [(k, n) for n in range(1, cap + 1) for k in layouts(n, per_node, max_nodes)]
    nodes = np.array([k for k, _ in pairs], dtype=float)
    replicas = np.array([n for _, n in pairs], dtype=float)
    value, _, _ = model.optimize(nodes, replicas)
    value = np.nan_to_num(value, nan=0.0)
    goodput, best = np.zeros(cap), np.zeros(cap, dtype=int)
    for (k, n), g in zip(pairs, value, strict=True):
        if g > goodput[n - 1] * (1 + 1e-9) or best[n - 1] == 0:
            goodput[n - 1], best[n - 1] = g, k
    goodput.flags.writeable = False
    best.flags.writeable = False
    return goodput, best


def best_goodput(model: GoodputModel, cap: int, per_node: int, max_nodes: int) -> np.ndarray:
    """Goodput on n = 1..cap GPUs at the best even layout (see best_layouts)."""
    return best_layouts(model, cap, per_node, max_nodes)[0]


# ----- fitting ---------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def fit_perf_params(observations: tuple[tuple[int, int, float, float, float], ...]) -> PerfParams:
    """Fit PerfParams to (nodes, replicas, atomic_bsz, compute_time, step_time) measurements.

    Minimises the RMS log error of predicted compute and step times plus two small
    regularisers (towards little overlap, and against network times that grow with
    the GPU count), with L-BFGS-B. Parameters the observations cannot tell apart are
    held fixed: the compute constant at half the mean compute time when one micro-batch
    size was seen, the inter-node terms when no step spanned nodes, the intra-node
    terms when no step used several GPUs of one node, and both growth terms when no
    step used more than 2 GPUs. Without inter-node observations the inter-node terms
    are then set to at least 1.1x the intra-node ones (links between nodes are slower).
    Deterministic: the same observations give the same parameters (cached).
    """
    obs = np.array(sorted(observations), dtype=float)
    if len(obs) == 0:
        raise ValueError("observations: at least one measured step is needed")
    nodes, replicas, atomic, compute, step = obs.T
    x0 = np.array([1e-1, 1e-2] * 3 + [1.0 + 1e-3])
    lower = np.array([TINY, TINY] * 3 + [1.0])
    upper = np.array([np.inf, np.inf] * 3 + [10.0])
    if len(np.unique(atomic)) == 1:
        x0[0] = lower[0] = upper[0] = np.mean(compute) / 2
    multi_node = bool(np.any(nodes > 1))
    if not multi_node:
        x0[2:4] = upper[2:4] = lower[2:4]
    if not np.any((nodes == 1) & (replicas > 1)):
        x0[4:6] = upper[4:6] = lower[4:6]
    if not np.any(replicas > 2):
        x0[[3, 5]] = upper[[3, 5]] = lower[[3, 5]]
    across = (nodes > 1).astype(float)
    within = ((nodes == 1) & (replicas > 1)).astype(float)
    data = (atomic, across, within, 1.0 - across - within, np.maximum(replicas - 2, TINY),
            np.log(compute), np.log(step), 1.0 / len(obs))
    result = minimize(_objective, x0, args=data, jac=True, method="L-BFGS-B",
                      bounds=Bounds(lower, upper, keep_feasible=True))
    x = np.clip(result.x, lower, upper)
    if not multi_node:
        x[2] = max(x[2], x[4] * 1.1)
        x[3] = max(x[3], x[5] * 1.1)
    return PerfParams(*(float(v) for v in x))


def _objective(x: np.ndarray, atomic: np.ndarray, across: np.ndarray, within: np.ndarray,
               single: np.ndarray, growth: np.ndarray, log_compute: np.ndarray,
               log_step: np.ndarray, inv_m: float) -> tuple[float, np.ndarray]:
    """The fitting loss and its gradient in the 7 parameters.

    `across`, `within`, `single` mark (as 1.0) steps that spanned nodes, used several
    GPUs of one node, or one GPU; `growth` is max(GPUs - 2, TINY).
    """
    ac, bc, an, bn, ar, br, g = x
    compute = ac + bc * atomic
    network = (an * across + ar * within + TINY * single
               + (bn * across + br * within + TINY * single) * growth)
    log_c, log_n = np.log(compute), np.log(network)
    cg, ng = np.exp(g * log_c), np.exp(g * log_n)
    total = cg + ng
    log_total = np.log(total)
    e1 = log_c - log_compute  # errors of log compute time
    e2 = log_total / g - log_step  # errors of log step time
    err1 = math.sqrt(e1 @ e1 * inv_m)
    err2 = math.sqrt(e2 @ e2 * inv_m)
    loss = err1 + err2 + 1e-3 * (g - 1) ** 2 + 1e-2 * ((bn / an) ** 2 + (br / ar) ** 2)
    w1 = e1 * (inv_m / max(err1, 1e-12)) / compute
    w2 = e2 * (inv_m / max(err2, 1e-12)) / total
    d_compute = w1 + w2 * cg / compute
    d_network = w2 * ng / network
    d_growth = d_network * growth
    d_gamma = (w2 @ (cg * log_c + ng * log_n)) / g - (w2 @ (log_total * total)) / g ** 2
    grad = np.array([
        d_compute.sum(),
        d_compute @ atomic,
        d_network @ across - 2e-2 * bn ** 2 / an ** 3,
        d_growth @ across + 2e-2 * bn / an ** 2,
        d_network @ within - 2e-2 * br ** 2 / ar ** 3,
        d_growth @ within + 2e-2 * br / ar ** 2,
        d_gamma + 2e-3 * (g - 1),
    ])
    return loss, grad
