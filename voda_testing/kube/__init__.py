"""A fake Kubernetes API server and a cluster simulator, for tests and benchmarks.

    with FakeApiServer() as api:            # real HTTP on 127.0.0.1
        api.write_kubeconfig(path)           # for the official client and kubectl
        sim = ClusterSimulator(api.store)    # the controllers a real cluster runs
"""

from voda_testing.kube.errors import ApiError
from voda_testing.kube.server import FakeApiServer, Fault
from voda_testing.kube.store import Store

__all__ = ["ApiError", "FakeApiServer", "Fault", "Store"]
