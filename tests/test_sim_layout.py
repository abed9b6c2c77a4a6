"""Layout and speed: cross-leaf oversubscription, layout_speed modes and their CLI flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from voda.cli.main import app
from voda.core.model import Job, Node
from voda.core.placement.registry import get_placer
from voda.sim.backend import SimBackend
from voda.sim.cluster_file import ClusterFileError, cluster_from_dict, parse_cluster
from voda.sim.profiles import load_profile
from voda.sim.progress import gain
from voda.sim.progress import rate as profiled_rate
from voda.sim.runner import SimSettings, effective_layout_speed, simulate
from voda.sim.throughput import candidate_layouts, step_sync_time, step_time
from voda.sim.workloads import JobSpec, load_workload

# imagenet: at most 200 samples per GPU, so a 3200 batch on 8 GPUs accumulates once (k = 1).
IMAGENET = JobSpec("x", 0.0, 0, 1, 16, None, epochs=1, profile="imagenet", batch_size=3200)
TWO_LEAVES = [Node("a", 4, leaf="leaf-0"), Node("b", 4, leaf="leaf-0"),
              Node("c", 4, leaf="leaf-1"), Node("d", 4, leaf="leaf-1")]


def backend(spec: JobSpec = IMAGENET, nodes: list[Node] = TWO_LEAVES, **kwargs: object
            ) -> SimBackend:
    return SimBackend(list(nodes), {spec.name: spec}, **kwargs)  # type: ignore[arg-type]


def seconds_per_step(b: SimBackend, placement: tuple[tuple[str, int], ...]) -> float:
    """Start (or move) the job on `placement`; seconds per optimiser step there."""
    sim = b.jobs.get("x")
    if sim is None:
        b.start(Job("x"), placement)
        sim = b.jobs["x"]
    else:
        b.scale(Job("x"), placement)
    assert sim.profile is not None and sim.split is not None
    return gain(sim.profile, sim.split.effective_batch, sim.epoch) / sim.rate()


def test_a_job_across_leaves_pays_the_oversubscribed_sync_once_per_step() -> None:
    b = backend(spine_oversubscription=2.5)
    across = seconds_per_step(b, (("a", 4), ("c", 4)))
    split = b.jobs["x"].split
    assert split is not None and split.accum_steps == 1 and split.atomic_bsz == 200
    inside = seconds_per_step(b, (("a", 4), ("b", 4)))
    step, sync = step_sync_time("imagenet", (4, 4), 200)
    assert sync > 0
    # Hand-worked: T = step + k (step - sync) in one leaf, plus (O - 1) sync across leaves.
    assert inside == pytest.approx(step + 1 * (step - sync), rel=1e-12)
    assert across - inside == pytest.approx(1.5 * sync, rel=1e-9)
    assert step_time(load_profile("imagenet"), (4, 4), split, 3.0) == pytest.approx(
        step + 2.0 * sync + (step - sync), rel=1e-12)


def test_without_oversubscription_rates_are_bit_identical_to_the_plain_model() -> None:
    b = backend()
    b.start(Job("x"), (("a", 4), ("c", 2), ("d", 2)))
    sim = b.jobs["x"]
    assert sim.profile is not None and sim.split is not None
    assert sim.rate() == profiled_rate(sim.profile, (4, 2, 2), sim.split, 0)


def test_a_single_leaf_job_and_a_duration_job_are_unaffected_by_the_spine() -> None:
    plain, slow = backend(), backend(spine_oversubscription=4.0)
    for b in (plain, slow):
        b.start(Job("x"), (("c", 4), ("d", 4)))
    assert plain.jobs["x"].rate() == slow.jobs["x"].rate()
    work = JobSpec("x", 0.0, 0, 1, 8, None, epochs=1, work=1000.0)
    dur = backend(work, spine_oversubscription=4.0)
    dur.start(Job("x"), (("a", 4), ("c", 4)))
    assert dur.jobs["x"].rate() == 8.0


def test_nodes_without_a_leaf_are_each_their_own_leaf_and_joined_nodes_count() -> None:
    nodes = [Node("p", 4), Node("q", 4)]
    b = backend(nodes=nodes, spine_oversubscription=2.0)
    own_leaves = seconds_per_step(b, (("p", 4), ("q", 4)))
    b.join_node(Node("r", 4, leaf="leaf-q"))  # the leaf name q falls back to
    same_leaf = seconds_per_step(b, (("q", 4), ("r", 4)))
    _, sync = step_sync_time("imagenet", (4, 4), 200)
    assert own_leaves - same_leaf == pytest.approx(sync, rel=1e-9)
    b.fail_node("p")
    assert seconds_per_step(b, (("q", 4), ("r", 4))) == same_leaf


def test_the_yaml_key_is_optional_and_validated(tmp_path: Path) -> None:
    nodes = {"nodes": [{"count": 2, "gpus": 4, "leaf": "l0"}]}
    assert cluster_from_dict(nodes).spine_oversubscription == 1.0
    assert cluster_from_dict({**nodes, "spine_oversubscription": 2}).spine_oversubscription == 2.0
    assert parse_cluster("4x4").spine_oversubscription == 1.0
    for bad in (0.5, 0, -2, "fast", True, None, float("nan")):
        with pytest.raises(ClusterFileError,
                           match=r"^c.yaml: spine_oversubscription: must be a number >= 1, got"):
            cluster_from_dict({**nodes, "spine_oversubscription": bad}, "c.yaml")
    path = tmp_path / "c.yaml"
    path.write_text("spine_oversubscription: 0.25\nnodes: [{gpus: 4}]\n")
    with pytest.raises(ClusterFileError, match=r"spine_oversubscription: .* got 0\.25"):
        parse_cluster(str(path))


PLACEMENTS_OF_8 = [
    (("a", 4), ("b", 4)),
    (("a", 4), ("c", 4)),
    (("a", 2), ("b", 2), ("c", 2), ("d", 2)),
    (("a", 4), ("b", 2), ("c", 2)),
    (("a", 3), ("b", 3), ("c", 2)),
    (("a", 1), ("b", 3), ("c", 1), ("d", 3)),
]


@pytest.mark.parametrize("profile", ["imagenet", "cifar10", "bert", "deepspeech2"])
def test_best_layout_is_at_least_as_fast_as_any_actual_layout(profile: str) -> None:
    spec = JobSpec("x", 0.0, 0, 1, 16, None, epochs=1, profile=profile)
    best = backend(spec, layout_speed="best", spine_oversubscription=2.0)
    best.start(Job("x"), PLACEMENTS_OF_8[0])
    bound = best.jobs["x"].rate()
    actual = backend(spec, spine_oversubscription=2.0)
    rates = []
    for placement in PLACEMENTS_OF_8:
        actual.scale(Job("x"), placement) if "x" in actual.jobs else actual.start(
            Job("x"), placement)
        rates.append(actual.jobs["x"].rate())
        best.scale(Job("x"), placement)
        assert best.jobs["x"].rate() == bound  # the bound ignores the actual placement
    assert bound >= max(rates) * (1 - 1e-12)
    assert bound > min(rates)


def test_candidate_layouts_cover_every_arrangement_within_the_node_size() -> None:
    assert sorted(candidate_layouts(4, 2)) == [(1, 1, 1, 1), (1, 1, 2), (2, 2)]
    eight = candidate_layouts(8, 4)
    expected = {(4, 4), (2, 3, 3), (1, 2, 1, 4), (1, 1, 4, 2), (1, 3, 1, 3), (2, 2, 2, 2), (1,) * 8}
    assert expected <= set(eight)
    assert all(max(p) <= 4 and sum(p) == 8 for p in eight)
    forty = candidate_layouts(40, 4)  # at most 16 nodes: one balanced layout per node count
    assert sorted(len(p) for p in forty) == list(range(10, 17))
    assert candidate_layouts(70, 4) == [(4,) * 17 + (2,)]  # none fits: packed


def test_packed_speed_ignores_the_actual_placement() -> None:
    packed, actual = backend(layout_speed="packed"), backend()
    packed.start(Job("x"), PLACEMENTS_OF_8[2])
    actual.start(Job("x"), PLACEMENTS_OF_8[0])
    expected = actual.jobs["x"].rate()
    for placement in PLACEMENTS_OF_8:
        packed.scale(Job("x"), placement)
        assert packed.jobs["x"].rate() == expected
    assert packed.jobs["x"].layout == (4, 4)


def test_unknown_layout_speed_is_refused() -> None:
    with pytest.raises(ValueError, match="layout_speed: must be one of actual, packed, best, "
                                         "got 'fast'"):
        backend(layout_speed="fast")
    with pytest.raises(ValueError, match="layout_speed: must be one of"):
        simulate(load_workload("workload-1"), parse_cluster("1x1"),
                 SimSettings(layout_speed="fast"))


# On 3x2 naive placement spreads b over three nodes: (1, 2, 1), faster than packed (2, 2).
SMALL = """
- {name: a, arrival: 0, model: cifar10, epochs: 3, min: 1, max: 1}
- {name: b, arrival: 1, model: imagenet, epochs: 1, min: 4, max: 4}
- {name: c, arrival: 2, model: deepspeech2, epochs: 2, min: 2, max: 2}
"""


def test_placement_off_runs_jobs_at_packed_speed(tmp_path: Path) -> None:
    assert effective_layout_speed("actual", get_placer("off")) == "packed"
    assert effective_layout_speed("best", get_placer("off")) == "best"
    assert effective_layout_speed("actual", get_placer("naive")) == "actual"
    path = tmp_path / "w.yaml"
    path.write_text(SMALL)
    work, cluster = load_workload(path), parse_cluster("3x2")

    def jcts(placement: str, layout_speed: str) -> list[float | None]:
        settings = SimSettings(algorithm="FIFO", placement=placement,
                               layout_speed=layout_speed)
        return [j.jct for j in simulate(work, cluster, settings).jobs]

    off = jcts("off", "actual")
    assert off == jcts("naive", "packed")
    assert off != jcts("naive", "actual")
    best = jcts("naive", "best")
    assert all(b <= a for b, a in zip(best, jcts("naive", "actual"), strict=True))  # type: ignore[operator]


runner = CliRunner()


def test_cli_layout_speed_in_json(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(SMALL)
    out = {}
    for args in (["--layout-speed", "best"], ["--placement", "off"], []):
        result = runner.invoke(app, ["simulate", "-w", str(path), "-c", "3x2", "-a",
                                     "FIFO", "--json", *args])
        assert result.exit_code == 0, result.output
        (r,) = json.loads(result.output)["results"]
        out[tuple(args)] = r
    assert out[("--layout-speed", "best")]["layout_speed"] == "best"
    assert out[("--placement", "off")]["layout_speed"] == "packed"
    assert out[()]["layout_speed"] == "actual"
    assert out[("--layout-speed", "best")]["avg_jct"] < out[()]["avg_jct"]


def test_cli_refuses_an_unknown_layout_speed(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", "-w", "workload-1", "-c", "16x4",
                                 "--layout-speed", "fast"])
    assert result.exit_code == 2
    assert "layout_speed: must be one of actual, packed, best, got 'fast'" in result.output
    assert "Traceback" not in result.output


EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "clusters"


@pytest.mark.parametrize(("name", "spine"), [("8-leaves-of-2.yaml", 1.0),
                                             ("8-leaves-of-2-oversubscribed.yaml", 2.0)])
def test_example_clusters_have_eight_leaves_of_two_nodes(name: str, spine: float) -> None:
    c = parse_cluster(str(EXAMPLES / name))
    assert c.spine_oversubscription == spine
    assert len(c.nodes) == 16 and {n.gpus for n in c.nodes} == {4}
    leaves = sorted(n.leaf_name for n in c.nodes)
    assert leaves == sorted(f"leaf-{i}" for i in range(8) for _ in range(2))
    assert {n.spine for n in c.nodes} == {"spine-0"}


def test_cli_names_a_bad_spine_oversubscription(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("spine_oversubscription: 0.5\nnodes: [{count: 2, gpus: 4}]\n")
    result = runner.invoke(app, ["simulate", "-w", "workload-1", "-c", str(path)])
    assert result.exit_code == 2
    assert "spine_oversubscription: must be a number >= 1, got 0.5" in result.output
    assert "Traceback" not in result.output


def test_interpolation_tables_are_built_on_one_blas_thread_and_the_count_restored() -> None:
    from voda.blas import _openblas_thread_controls, serial_blas

    controls = _openblas_thread_controls()
    assert controls  # scipy's OpenBLAS is loaded by the interpolators
    before = [get() for get, _ in controls]
    with serial_blas():
        assert [get() for get, _ in controls] == [1] * len(controls)
    assert [get() for get, _ in controls] == before
