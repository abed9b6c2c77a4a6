"""The cluster simulator: kube-scheduler, kubelets, node lifecycle and the Kubeflow
operators, played on the fake API server's store."""

from voda_testing.kube.cluster.ledger import GpuLedger
from voda_testing.kube.cluster.nodes import GPU, HOSTNAME, make_node
from voda_testing.kube.cluster.simulator import WORK_ANNOTATION, ClusterSimulator, SimSettings

__all__ = ["GPU", "HOSTNAME", "WORK_ANNOTATION", "ClusterSimulator", "GpuLedger", "SimSettings",
           "make_node"]
