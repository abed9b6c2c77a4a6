"""Pure parts of the Kubernetes backend: index plans, worker decisions, horovodrun flags,
settings; and `voda serve --backend kubernetes` refusing a bad configuration plainly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voda.backends.kubernetes.adapters import MPIJobAdapter, Sizes
from voda.backends.kubernetes.config import kubernetes_settings
from voda.backends.kubernetes.manifests import object_name
from voda.backends.kubernetes.pinning import (
    WorkerAction,
    assign,
    decide_worker,
    decode,
    encode,
    moved,
    pin_patch,
    placement_of,
)
from voda.config import ServerSettings

ROOT = Path(__file__).resolve().parent.parent
nodes = st.sampled_from(["a", "b", "c", "d"])
placements = st.dictionaries(nodes, st.integers(1, 4), max_size=4).map(
    lambda d: tuple(d.items()))
plans = st.dictionaries(st.integers(0, 9), nodes, max_size=10)


@given(plans, placements)
def test_a_plan_places_indices_0_to_n_exactly_as_the_placement_says(old, placement) -> None:
    plan = assign(old, placement)
    assert sorted(plan) == list(range(sum(c for _, c in placement)))
    assert dict(placement_of(plan)) == dict(placement)


@given(plans, placements)
def test_a_plan_moves_no_worker_its_node_still_has_room_for(old, placement) -> None:
    plan = assign(old, placement)
    room = dict(placement)
    survivors: dict[str, int] = {}
    for index, node in old.items():
        if index < len(plan):
            survivors[node] = survivors.get(node, 0) + 1
    kept = sum(min(count, room.get(node, 0)) for node, count in survivors.items())
    assert sum(1 for i, node in plan.items() if old.get(i) == node) == kept
    assert moved(old, plan) == sum(survivors.values()) - kept


def test_scale_down_keeps_the_low_indices_and_moves_what_the_placement_no_longer_has() -> None:
    old = {0: "a", 1: "a", 2: "b", 3: "b"}
    assert assign(old, (("a", 2),)) == {0: "a", 1: "a"}
    assert assign(old, (("b", 2),)) == {0: "b", 1: "b"}  # highest indices go: 0, 1 move
    assert assign(old, (("a", 1), ("b", 2))) == {0: "a", 1: "b", 2: "b"}


@given(plans)
def test_plans_survive_their_annotation(plan) -> None:
    assert decode(encode(plan)) == plan


@pytest.mark.parametrize("text", ["", "nope", "[1]", '{"x": "a"}', '{"-1": "a"}'])
def test_a_malformed_plan_annotation_is_an_empty_plan(text: str) -> None:
    assert decode(text) == {}


def pod(gated: bool = False, selector: str | None = None, node: str | None = None,
        deleting: bool = False) -> dict:
    spec: dict = {}
    if gated:
        spec["schedulingGates"] = [{"name": "voda.io/placement"}, {"name": "other"}]
    if selector:
        spec["nodeSelector"] = {"kubernetes.io/hostname": selector}
    if node:
        spec["nodeName"] = node
    meta = {"resourceVersion": "7", **({"deletionTimestamp": "x"} if deleting else {})}
    return {"metadata": meta, "spec": spec}


@pytest.mark.parametrize("worker,target,room,waited,action", [
    (pod(gated=True), "a", True, 0, WorkerAction.PIN),
    (pod(gated=True), "a", False, 0, WorkerAction.WAIT),
    (pod(selector="a", node="a"), "a", True, 0, WorkerAction.NONE),
    (pod(selector="a", node="a"), "b", True, 0, WorkerAction.MOVE),
    (pod(selector="a"), "a", True, 61, WorkerAction.REFUSED),
    (pod(selector="a"), "a", True, 10, WorkerAction.NONE),
    (pod(gated=True, deleting=True), "a", True, 0, WorkerAction.NONE),
    (pod(gated=True), None, True, 0, WorkerAction.NONE),
], ids=["a gated worker with room is pinned", "a gated worker without room waits",
        "a worker where the plan says stays", "a worker elsewhere is moved",
        "a pinned worker unschedulable too long is a refusal of its node",
        "a pinned worker gets time to be scheduled", "a terminating worker is left alone",
        "a worker beyond the plan is left to the operator"])
def test_what_a_worker_pod_needs(worker, target, room, waited, action) -> None:
    assert decide_worker(worker, target, room, waited, 60.0) is action


def test_the_pin_patch_keeps_other_gates_and_is_conditional() -> None:
    patch = pin_patch(pod(gated=True), "n1")
    assert patch == {"metadata": {"resourceVersion": "7"},
                     "spec": {"nodeSelector": {"kubernetes.io/hostname": "n1"},
                              "schedulingGates": [{"name": "other"}]}}


def test_horovodrun_gets_voda_flags_in_place_of_the_users() -> None:
    command = ["horovodrun", "-np", "8", "--min-np=2", "-H", "a:1,b:1",
               "--blacklist-cooldown-range", "1", "2", "python", "t.py", "--lr", "1"]
    assert MPIJobAdapter.horovodrun(command, Sizes(3, 1, 4), (10, 60)) == [
        "horovodrun", "-np", "3", "--min-np", "1", "--max-np", "4", "--host-discovery-script",
        "/etc/mpi/discover_hosts.sh", "--slots-per-host", "1",
        "--blacklist-cooldown-range", "10", "60", "python", "t.py", "--lr", "1"]


@pytest.mark.parametrize("command,expected", [
    ("python train.py --lr 1", ["torchrun", "train.py", "--lr", "1"]),
    ("python3 -m pkg.train", ["torchrun", "--module", "pkg.train"]),
    ("torchrun --nproc-per-node 1 t.py", ["torchrun", "--nproc-per-node", "1", "t.py"]),
    ("./train --x", ["torchrun", "--no-python", "./train", "--x"]),
])
def test_a_compact_command_runs_under_torchrun(command: str, expected: list[str]) -> None:
    from voda.backends.kubernetes.manifests import torchrun_command

    assert torchrun_command(command) == expected


def test_long_job_names_become_object_names_whose_pod_hostnames_fit() -> None:
    name = "a" * 40 + "-20261123191924-abcdef"
    short = object_name(name)
    assert len(f"{short}-worker-999") <= 63 and short != object_name(name[:-1] + "0")
    assert object_name("short") == "short"


@pytest.mark.parametrize("table,message", [
    ({"nope": 1}, "kubernetes.nope: unknown setting"),
    ({"lease_seconds": 5.0, "renew_deadline_seconds": 10.0},
     "kubernetes.lease_seconds: must be greater than renew_deadline_seconds"),
    ({"workers": 0}, "kubernetes.workers: must lie in [1, 64]"),
    ({"unschedulable_seconds": "soon"}, "kubernetes.unschedulable_seconds: expected float"),
    ({"horovod_blacklist_cooldown": "60,10"}, "kubernetes.horovod_blacklist_cooldown: "
     "expected two whole seconds"),
    ({"mpijob_rescale_delay_seconds": -1},
     "kubernetes.mpijob_rescale_delay_seconds: must lie in [0, 3600]"),
], ids=["an unknown key", "a lease shorter than the renew deadline", "no workers",
        "a number that is not one", "a cooldown range upside down", "a negative rescale delay"])
def test_bad_kubernetes_settings_name_the_setting(table: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        kubernetes_settings(ServerSettings(kubernetes_settings=table))


def test_kubernetes_settings_take_the_table_and_the_flags() -> None:
    settings = kubernetes_settings(ServerSettings(
        kubeconfig="/k", namespace="ml", kubernetes_settings={
            "topology_labels": "zone,rack,kubernetes.io/hostname", "lease_seconds": 30.0,
            "renew_deadline_seconds": 20.0, "horovod_blacklist_cooldown": [5, 30]}))
    assert settings.kubeconfig == "/k" and settings.namespace == "ml"
    assert settings.horovod_blacklist_cooldown == (5, 30)
    assert settings.topology_labels == ("zone", "rack", "kubernetes.io/hostname")
    assert settings.elector.lease_seconds == 30.0


def test_serve_refuses_a_kubeconfig_it_cannot_load(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "voda.cli.main", "serve", "--backend",
                           "kubernetes", "--kubeconfig", str(tmp_path / "missing"), "--db",
                           f"sqlite:///{tmp_path / 'v.db'}"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "VODA_CONFIG": str(tmp_path / "c")})
    assert done.returncode == 2
    assert "kubeconfig: cannot load" in done.stderr and "Traceback" not in done.stderr
