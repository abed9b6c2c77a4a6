"""The restart what-if (RunRequest.restart_scale, `voda simulate --restart-scale`): every
restart charged, and told to the policies, at a multiple of the settings' penalties."""

from __future__ import annotations

from pathlib import Path

from voda.sim.compare import RunRequest, run_one, settings_for
from voda.sim.presets import SIA_PENALTIES, SIA_TOLD_PENALTIES

SIA = Path(__file__).resolve().parents[1] / "voda" / "data" / "sia"
CLUSTER = str(SIA / "clusters" / "heterogeneous-64.yaml")


def _two_cifar10_jobs(into: Path) -> Path:
    header, *lines = (SIA / "workloads" / "saturn" / "workload-1.csv").read_text().splitlines()
    jobs = [line for line in lines if line.startswith("cifar10-")][:2]
    path = into / "two.csv"
    path.write_text("\n".join([header, *jobs]) + "\n")
    return path


def _request(workload: Path, scale: float) -> RunRequest:
    return RunRequest(str(workload), CLUSTER, "Voda", preset="sia", job_model="adaptive",
                      hetero_policy="voda", restart_scale=scale)


def test_every_penalty_charged_or_told_is_scaled(tmp_path: Path) -> None:
    workload = _two_cifar10_jobs(tmp_path)
    plain, half = settings_for(_request(workload, 1.0)), settings_for(_request(workload, 0.5))
    assert half.penalty == plain.penalty / 2
    assert half.penalties == {k: v / 2 for k, v in SIA_PENALTIES.items()}
    assert half.told_penalties == {k: v / 2 for k, v in SIA_TOLD_PENALTIES.items()}
    assert plain.penalties == SIA_PENALTIES  # the preset's own table is left as it was


def test_dearer_restarts_lengthen_every_job_by_at_least_its_first_restore(
        tmp_path: Path) -> None:
    workload = _two_cifar10_jobs(tmp_path)
    runs = {s: {j.name: j.jct for j in run_one(_request(workload, s)).jobs} for s in (0, 1, 2)}
    restore = SIA_PENALTIES["cifar10"]  # every placement, the first included, pays it
    for name in runs[0]:
        assert runs[1][name] >= runs[0][name] + restore
        assert runs[2][name] >= runs[1][name] + restore
