"""The pod scheduler as operators expect kube-scheduler to behave, over the fake API server
and the cluster simulator: the PodScheduled condition of pods it cannot place, volumes,
NotReady tolerations, preemption, and the constraints it leaves to kube-scheduler."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.podsched_harness import GPU, SCHEDULER, running_cluster
from voda_testing.kube import ApiError
from voda_testing.kube.harness import eventually

Obj = dict[str, Any]


def scheduled_condition(c: Any, name: str) -> Obj | None:
    pod = c.store.try_get("pods", c.namespace, name)
    for condition in ((pod or {}).get("status") or {}).get("conditions") or []:
        if condition["type"] == "PodScheduled":
            return condition
    return None


def bare_pod(name: str, gpus: int, **spec: Any) -> Obj:
    return {"metadata": {"name": name, "labels": {"app": name}}, "spec": {
        "schedulerName": SCHEDULER, "containers": [{"name": "c", "image": "i", "resources": {
            "limits": {GPU: str(gpus)}}}], **spec}}


def test_a_pod_that_fits_nowhere_says_so_in_its_pod_scheduled_condition(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        c.grid(spines=1, leaves=1, per_leaf=2)
        c.store.create("pods", c.namespace, bare_pod("big", 16))
        first = eventually(lambda: scheduled_condition(c, "big"))
        assert first["status"] == "False" and first["reason"] == "Unschedulable"
        assert first["message"].startswith("0/2 nodes are available: 2 Insufficient "
                                           "nvidia.com/gpu."), first["message"]
        assert first["lastTransitionTime"]
        # The reason changes: the condition follows (its transition time stays).
        c.sim.cordon("s0-l0-n1")
        changed = eventually(lambda: (scheduled_condition(c, "big") or {}).get("message") != (
            first["message"]) and scheduled_condition(c, "big"))
        assert changed["message"].startswith(
            "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) were "
            "unschedulable."), changed["message"]
        assert changed["lastTransitionTime"] == first["lastTransitionTime"]
        # A pod recreated under the same name (another uid) gets its own.
        c.store.delete("pods", c.namespace, "big")
        eventually(lambda: c.store.try_get("pods", c.namespace, "big") is None)
        c.store.create("pods", c.namespace, bare_pod("big", 16))
        again = eventually(lambda: scheduled_condition(c, "big"))
        assert again["reason"] == "Unschedulable" and again["message"] == changed["message"]
        # A gang still waiting for its pods says why too (as kube-scheduler's coscheduling).
        c.job("part", pods=1, gpus=4, annotations={"voda.io/gpu-count": "8"})
        pod = eventually(lambda: c.pods("part-"))[0]["metadata"]["name"]
        waiting = eventually(lambda: scheduled_condition(c, pod))
        assert waiting["reason"] == "Unschedulable"
        assert waiting["message"].startswith("0/2 nodes are available: gang of 8 GPUs")
        # Once placed, the Binding makes it True.
        c.sim.cordon("s0-l0-n1", False)
        c.store.create("pods", c.namespace, bare_pod("small", 2))
        eventually(lambda: (scheduled_condition(c, "small") or {}).get("status") == "True")


def test_a_status_patch_for_an_earlier_pod_of_the_same_name_is_refused(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        old = c.store.create("pods", c.namespace, bare_pod("p", 1))
        c.store.delete("pods", c.namespace, "p")
        c.store.create("pods", c.namespace, bare_pod("p", 1))
        with pytest.raises(ApiError) as refused:
            c.store.patch("pods", c.namespace, "p", {
                "metadata": {"uid": old["metadata"]["uid"]},
                "status": {"conditions": [{"type": "PodScheduled", "status": "False"}]}},
                "application/strategic-merge-patch+json", subresource="status")
        assert refused.value.code == 422 and "metadata.uid" in refused.value.message
