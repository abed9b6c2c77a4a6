"""Jobs that something outside Voda holds suspended: Kueue.

Kueue suspends an MPIJob or PyTorchJob (`spec.runPolicy.suspend: true`) that names a
LocalQueue (label `kueue.x-k8s.io/queue-name`), or any in a namespace it manages with
`manageJobsWithoutQueueName`, until it admits the job against a ClusterQueue's quota.
Such a job has no pods: it waits for Kueue, not for Voda's GPUs. Voda never suspends
a job, and every object it watches it created itself: the message says so, and what to
change, since two schedulers then share the same GPUs.
"""

from __future__ import annotations

from voda.backends.kubernetes.adapters import KUEUE_QUEUE


def suspension_message(kind: str, namespace: str, by: str, gpus: int, labelled: bool) -> str:
    unlabel = f" and without the label {KUEUE_QUEUE}" if labelled else ""
    return (f"suspended by {by}: not admitted yet, so none of its pods run. Voda created this "
            f"{kind} in namespace {namespace!r}, which Kueue manages: Kueue admits it against "
            f"its own ClusterQueue quota, not Voda's GPUs, and Voda holds the {gpus} GPUs it "
            f"placed the job on until then. Run Voda's jobs in a namespace Kueue does not "
            f"manage{unlabel}.")
