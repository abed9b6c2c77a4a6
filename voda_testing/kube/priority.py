"""The Priority admission plugin: a pod's priority and preemption policy come from its
PriorityClass (`spec.priorityClassName`, else the class marked `globalDefault`, else
priority 0), and a pod may not state other values itself. Refusals carry the
upstream wording (403 Forbidden)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from voda_testing.kube.errors import ApiError

Obj = dict[str, Any]
PREEMPT_LOWER = "PreemptLowerPriority"
# Classes every cluster has (kube-apiserver creates them).
SYSTEM_CLASSES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}


def admit(pod: Obj, get_class: Callable[[str], Obj | None],
          classes: Callable[[], list[Obj]]) -> None:
    """Set spec.priority and spec.preemptionPolicy of a pod being created, in place."""
    spec = pod.setdefault("spec", {})
    name = pod.get("metadata", {}).get("name", "")
    class_name = spec.get("priorityClassName")
    policy = PREEMPT_LOWER
    if class_name in SYSTEM_CLASSES:
        priority = SYSTEM_CLASSES[class_name]
    elif class_name:
        found = get_class(class_name)
        if found is None:
            raise ApiError(403, f'pods "{name}" is forbidden: no PriorityClass with name '
                           f"{class_name} was found")
        priority = int(found.get("value", 0))
        policy = found.get("preemptionPolicy") or PREEMPT_LOWER
    else:
        default = next((c for c in classes() if c.get("globalDefault")), None)
        priority = int(default.get("value", 0)) if default else 0
        if default:
            spec["priorityClassName"] = default["metadata"]["name"]
            policy = default.get("preemptionPolicy") or PREEMPT_LOWER
    if spec.get("priority") is not None and spec["priority"] != priority:
        raise ApiError(403, f'pods "{name}" is forbidden: the integer value of priority '
                       f"({spec['priority']}) must not be provided in pod spec; priority "
                       f"admission controller computed {priority} from the given "
                       "PriorityClass name")
    if spec.get("preemptionPolicy") not in (None, policy):
        raise ApiError(403, f'pods "{name}" is forbidden: the string value of '
                       f"PreemptionPolicy ({spec['preemptionPolicy']}) must not be provided in "
                       f"pod spec; priority admission controller computed {policy} from the "
                       "given PriorityClass name")
    spec["priority"] = priority
    spec["preemptionPolicy"] = policy
