"""Test-only machinery: never imported by the `voda` package (checked by .importlinter).

`voda_testing.kube` holds a fake Kubernetes API server (aiohttp on loopback) and a
cluster simulator that plays kube-scheduler, kubelets, mpi-operator and the
training operator on top of it.
"""
