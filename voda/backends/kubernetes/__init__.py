"""The Kubernetes backend: Voda drives Kubeflow MPIJob and PyTorchJob objects.

Modules, one job each: `api` (requests through the official client), `informer`
(list + watch that never dies), `cluster_view` (nodes, GPUs, topology, GPUs held
by pods Voda does not manage), `adapters` (one per job kind), `manifests` (the
objects Voda creates), `pinning` (worker index -> node plans and gated pods),
`backend` (the Backend the engine drives), `elector` (the Lease leader elector).
Nothing here is imported unless the backend is used.
"""
