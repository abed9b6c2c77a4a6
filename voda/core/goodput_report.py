"""What a batch-adaptive training process reports, checked and turned into a GoodputModel.

A job that adapts its batch (as Pollux/AdaptDL jobs do) measures, for each
configuration it has run, the time of one micro-batch's forward and backward pass
(`compute_seconds`) and of an optimiser step, which adds the gradient sync
(`step_seconds`); and, as it trains, its gradient statistics. `model_of` checks a
report against itself and against the job, fits the step-time model
(voda.core.goodput.fit_perf_params) and refuses a fit that does not reproduce what
was measured: the policy would otherwise size the job on nonsense.

Every problem names its field (`observations.3.step_seconds`, `limits.max_local`).
Pure: no clock, no I/O.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from voda.core.goodput import GoodputModel, PerfParams, fit_perf_params

MAX_OBSERVATIONS = 64
# Bounds of each number in a report (the API's schema uses the same).
MAX_BATCH = 10_000_000
MIN_STEP_SECONDS = 1e-6
MAX_STEP_SECONDS = 1e4
MAX_GRADIENT_STATISTIC = 1e30
MAX_EPOCH_SAMPLES = 1e12
# A fit is refused when it predicts a measured time off by more than this factor.
FIT_TOLERANCE = 3.0

Problem = tuple[str, str]  # (field, reason)


@dataclass(frozen=True, slots=True)
class StepObservation:
    """One configuration a job ran: `replicas` GPUs over `nodes` nodes at per-GPU
    micro-batch `atomic_bsz`, with its measured times."""

    nodes: int
    replicas: int
    atomic_bsz: int
    compute_seconds: float  # one micro-batch, forward and backward, no sync
    step_seconds: float  # one optimiser step: compute, gradient sync, update

    def as_tuple(self) -> tuple[int, int, float, float, float]:
        """The tuple fit_perf_params takes."""
        return (self.nodes, self.replicas, float(self.atomic_bsz), self.compute_seconds,
                self.step_seconds)


@dataclass(frozen=True, slots=True)
class BatchLimits:
    init_batch: int  # M0: the batch the job's learning rate is set for
    max_batch: int
    min_local: int  # per-GPU micro-batch range
    max_local: int
    fixed_batch: int | None = None  # the job trains at this batch whatever it holds


@dataclass(frozen=True, slots=True)
class GoodputReport:
    observations: tuple[StepObservation, ...]
    grad_sqr: float
    grad_var: float
    limits: BatchLimits
    epoch_samples: float | None = None  # one epoch in samples, when the job says


class ReportRefused(ValueError):
    """The report cannot be used; `problems` name the fields and say why."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{f}: {r}" for f, r in problems))


def report_from_values(values: object, max_workers: int) -> GoodputReport:
    """A report from plain JSON values (as a training process writes it to the local
    backend's report file), each number checked against the bounds the API's schema
    enforces. Raises ReportRefused naming every field at fault."""
    reader = _Reader()
    doc = reader.mapping(values, "", {"observations", "grad_sqr", "grad_var", "limits",
                                      "epoch_samples"})
    raw_observations = doc.get("observations")
    if not isinstance(raw_observations, list) or not raw_observations:
        reader.refuse("observations", "a list of at least one measured configuration is needed")
        raw_observations = []
    elif len(raw_observations) > MAX_OBSERVATIONS:
        reader.refuse("observations", f"at most {MAX_OBSERVATIONS} configurations, got "
                                      f"{len(raw_observations)}")
        raw_observations = []
    observations = []
    for i, raw in enumerate(raw_observations):
        where = f"observations.{i}"
        o = reader.mapping(raw, where, {"nodes", "replicas", "atomic_bsz", "compute_seconds",
                                        "step_seconds"})
        observations.append(StepObservation(
            reader.count(o, where, "nodes", max_workers),
            reader.count(o, where, "replicas", max_workers),
            reader.count(o, where, "atomic_bsz", MAX_BATCH),
            reader.number(o, where, "compute_seconds", MIN_STEP_SECONDS, MAX_STEP_SECONDS),
            reader.number(o, where, "step_seconds", MIN_STEP_SECONDS, MAX_STEP_SECONDS)))
    raw_limits = reader.mapping(doc.get("limits"), "limits", {
        "init_batch", "max_batch", "min_local", "max_local", "fixed_batch"})
    limits = BatchLimits(*(reader.count(raw_limits, "limits", name, MAX_BATCH) for name in
                           ("init_batch", "max_batch", "min_local", "max_local")),
                         fixed_batch=(None if raw_limits.get("fixed_batch") is None else
                                      reader.count(raw_limits, "limits", "fixed_batch",
                                                   MAX_BATCH)))
    report = GoodputReport(
        tuple(observations),
        reader.number(doc, "", "grad_sqr", 0.0, MAX_GRADIENT_STATISTIC),
        reader.number(doc, "", "grad_var", 0.0, MAX_GRADIENT_STATISTIC), limits,
        None if doc.get("epoch_samples") is None else reader.number(
            doc, "", "epoch_samples", 0.0, MAX_EPOCH_SAMPLES, above_low=True))
    if reader.found:
        raise ReportRefused(reader.found)
    return report


class _Reader:
    """Reads typed, bounded fields out of JSON values, collecting what is wrong."""

    def __init__(self) -> None:
        self.found: list[Problem] = []

    def refuse(self, where: str, reason: str) -> None:
        self.found.append((where, reason))

    def mapping(self, value: object, where: str, known: set[str]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            self.refuse(where or "report", "an object is needed")
            return {}
        for key in sorted(set(value) - known, key=str):
            self.refuse(_field(where, str(key)), "unknown field")
        return value

    def count(self, values: Mapping[str, Any], where: str, name: str, high: int) -> int:
        value = values.get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            self.refuse(_field(where, name), "a whole number is needed")
            return 1
        if not 1 <= value <= high:
            self.refuse(_field(where, name), f"{value} is outside [1, {high}]")
            return 1
        return value

    def number(self, values: Mapping[str, Any], where: str, name: str, low: float,
               high: float, above_low: bool = False) -> float:
        value = values.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
                value):
            self.refuse(_field(where, name), "a finite number is needed")
            return high
        if not (low < value <= high if above_low else low <= value <= high):
            self.refuse(_field(where, name), f"{value:g} is outside "
                                             f"{'(' if above_low else '['}{low:g}, {high:g}]")
            return high
        return float(value)


def _field(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def problems(report: GoodputReport, max_workers: int) -> list[Problem]:
    """What does not hold together in a report of a job that may use `max_workers` GPUs
    (the bounds of each number are the caller's schema's)."""
    found: list[Problem] = []
    limits = report.limits
    if not report.observations:
        found.append(("observations", "at least one measured configuration is needed"))
    if len(report.observations) > MAX_OBSERVATIONS:
        found.append(("observations", f"at most {MAX_OBSERVATIONS} configurations, got "
                                      f"{len(report.observations)}"))
    if limits.min_local > limits.max_local:
        found.append(("limits.min_local", f"{limits.min_local} is above max_local "
                                          f"{limits.max_local}"))
    if limits.init_batch > limits.max_batch:
        found.append(("limits.init_batch", f"{limits.init_batch} is above max_batch "
                                           f"{limits.max_batch}"))
    if limits.max_local > limits.max_batch:
        found.append(("limits.max_local", f"{limits.max_local} is above max_batch "
                                          f"{limits.max_batch}"))
    if limits.fixed_batch is not None and not (
            limits.init_batch <= limits.fixed_batch <= limits.max_batch):
        found.append(("limits.fixed_batch", f"{limits.fixed_batch} is outside [init_batch, "
                                            f"max_batch] = [{limits.init_batch}, "
                                            f"{limits.max_batch}]"))
    for i, o in enumerate(report.observations[:MAX_OBSERVATIONS]):
        where = f"observations.{i}"
        if o.nodes > o.replicas:
            found.append((f"{where}.nodes", f"{o.nodes} nodes for {o.replicas} GPUs: each node "
                                            "holds at least one"))
        if o.replicas > max_workers:
            found.append((f"{where}.replicas", f"the job runs on at most {max_workers} "
                                               f"workers, got {o.replicas}"))
        if o.replicas * o.atomic_bsz > limits.max_batch:
            found.append((f"{where}.atomic_bsz", f"{o.replicas} GPUs at micro-batch "
                                                 f"{o.atomic_bsz} make a batch above max_batch "
                                                 f"{limits.max_batch}"))
        if not limits.min_local <= o.atomic_bsz <= limits.max_local:
            found.append((f"{where}.atomic_bsz", f"{o.atomic_bsz} is outside the per-GPU "
                                                 f"range [{limits.min_local}, "
                                                 f"{limits.max_local}]"))
        if o.compute_seconds > o.step_seconds:
            found.append((f"{where}.compute_seconds", f"{o.compute_seconds:g} s is longer "
                                                      f"than the step ({o.step_seconds:g} s), "
                                                      "which includes it"))
    return found


def model_of(report: GoodputReport, max_workers: int) -> GoodputModel:
    """The goodput model of a report: checked, fitted, and the fit checked against what
    was measured. Raises ReportRefused naming the fields."""
    found = problems(report, max_workers)
    if found:
        raise ReportRefused(found)
    try:
        with np.errstate(all="ignore"):
            perf = best_fit(report.observations)
    except (ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
        raise ReportRefused([("observations", f"the step-time model could not be fitted: "
                                              f"{exc}")]) from None
    limits = report.limits
    model = GoodputModel(
        perf=perf, grad_sqr=report.grad_sqr, grad_var=report.grad_var,
        init_batch=limits.init_batch, max_batch=limits.max_batch, min_local=limits.min_local,
        max_local=limits.max_local, fixed_batch=limits.fixed_batch,
        max_profiled_replicas=max(o.replicas for o in report.observations),
        epoch_samples=report.epoch_samples)
    misfit = fit_problem(model, report.observations)
    if misfit is not None:
        raise ReportRefused([misfit])
    return model


def best_fit(observations: tuple[StepObservation, ...]) -> PerfParams:
    """The better (least RMS log error over the measured times) of fit_perf_params on the
    times as they are and on the times counted in units of the median step.

    The model is the same in any unit of time (its parameters scale with it, its loss is
    in log time), but the fit starts from fixed guesses of about 0.1 s: fits of
    millisecond steps (ncf) ended 5-10x off in 5 of the 360 reports
    bench/goodput_report.py draws from the Pollux profiles, none with both starts; on
    other reports the first start fits better (tests/test_goodput_report.py).
    """
    unit = float(np.median([o.step_seconds for o in observations]))
    as_is = fit_perf_params(tuple(o.as_tuple() for o in observations))
    scaled = fit_perf_params(tuple(
        (o.nodes, o.replicas, float(o.atomic_bsz), o.compute_seconds / unit,
         o.step_seconds / unit) for o in observations))
    rescaled = PerfParams(scaled.alpha_c * unit, scaled.beta_c * unit, scaled.alpha_n * unit,
                          scaled.beta_n * unit, scaled.alpha_r * unit, scaled.beta_r * unit,
                          scaled.gamma)
    return min((as_is, rescaled), key=lambda perf: log_error(perf, observations))


def predicted_times(model: GoodputModel, observations: tuple[StepObservation, ...]
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(compute, step) seconds the model's step-time parameters predict for each measured
    configuration (no accumulation steps, as measured)."""
    perf = model.perf
    assert perf is not None
    nodes, replicas, atomic, _, _ = np.array([o.as_tuple() for o in observations],
                                             dtype=float).T
    with np.errstate(all="ignore"):
        return (perf.alpha_c + perf.beta_c * atomic,
                model.step_time(nodes, replicas, atomic, np.zeros(len(observations))))


def log_error(perf: PerfParams, observations: tuple[StepObservation, ...]) -> float:
    """RMS log error of the compute and step times `perf` predicts (inf: not finite)."""
    compute, step = predicted_times(GoodputModel(perf, 0.0, 0.0, 1, 1, 1, 1), observations)
    measured = np.array([(o.compute_seconds, o.step_seconds) for o in observations]).T
    with np.errstate(all="ignore"):
        errors = np.log(np.concatenate([compute, step]) / np.concatenate(measured))
    value = float(np.sqrt(np.mean(errors ** 2)))
    return value if math.isfinite(value) else math.inf


def fit_problem(model: GoodputModel, observations: tuple[StepObservation, ...]
                ) -> Problem | None:
    """Why the fitted model cannot be used, or None: parameters that are not finite and
    positive, a goodput that is not, or a measured time it misses by more than
    FIT_TOLERANCE (measurements that contradict each other, or times in the wrong unit)."""
    perf = model.perf
    assert perf is not None
    values = perf.as_array()
    if not (np.all(np.isfinite(values)) and np.all(values > 0)):
        return ("observations", "the fitted step-time model is not usable (parameters "
                                "that are not finite and positive)")
    compute, step = predicted_times(model, observations)
    with np.errstate(all="ignore"):
        goodput, _, _ = model.optimize([o.nodes for o in observations],
                                       [o.replicas for o in observations])
    if not (np.all(np.isfinite(goodput)) and np.all(goodput > 0)):
        return ("observations", "the fitted model gives no positive goodput on the measured "
                                "configurations")
    limit = math.log(FIT_TOLERANCE)
    for i, o in enumerate(observations):
        for label, predicted, measured in (("step_seconds", step[i], o.step_seconds),
                                           ("compute_seconds", compute[i], o.compute_seconds)):
            if not (np.isfinite(predicted) and abs(math.log(predicted / measured)) <= limit):
                return (f"observations.{i}.{label}",
                        f"the step-time model fitted to all observations predicts "
                        f"{float(predicted):.3g} s here against {measured:.3g} s measured "
                        f"(more than {FIT_TOLERANCE:g}x off): the observations contradict "
                        "each other")
    return None


# ----- as plain values (the store keeps models as JSON) ------------------------------------
def model_to_dict(model: GoodputModel) -> dict[str, Any]:
    return dataclasses.asdict(model)


def model_from_dict(values: Mapping[str, Any]) -> GoodputModel:
    perf = values.get("perf")
    return GoodputModel(
        perf=None if perf is None else PerfParams(
            *(float(perf[f.name]) for f in dataclasses.fields(PerfParams))),
        grad_sqr=float(values["grad_sqr"]), grad_var=float(values["grad_var"]),
        init_batch=int(values["init_batch"]), max_batch=int(values["max_batch"]),
        min_local=int(values["min_local"]), max_local=int(values["max_local"]),
        max_profiled_replicas=int(values.get("max_profiled_replicas", 0)),
        fixed_batch=None if values.get("fixed_batch") is None else int(values["fixed_batch"]),
        epoch_samples=(None if values.get("epoch_samples") is None
                       else float(values["epoch_samples"])),
    )
