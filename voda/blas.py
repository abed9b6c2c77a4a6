"""One OpenBLAS thread for tiny linear algebra.

Goodput fits (voda.core.goodput.fit_perf_params) and the simulator's interpolation
tables make thousands of tiny BLAS/LAPACK calls; OpenBLAS worker threads that
spin-wait on a busy machine make them up to a thousand times slower (a 64-configuration
fit: about 1.1-1.4 s with the default threads against 16-35 ms with one, on the shared
2-core machine). Thread counts are read and set through the OpenBLAS copies loaded in
this process (NumPy's and SciPy's).
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from typing import Any


def _openblas_thread_controls() -> list[tuple[Any, Any]]:
    """(get, set) thread-count functions of the OpenBLAS copies loaded in this process."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "openblas" in line.lower()})
    except OSError:
        return []
    controls = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix in (("", ""), ("scipy_", ""), ("scipy_", "64_")):
            get = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}", None)
            set_ = getattr(lib, f"{prefix}openblas_set_num_threads{suffix}", None)
            if get is not None and set_ is not None:
                controls.append((get, set_))
                break
    return controls


@contextlib.contextmanager
def serial_blas() -> Iterator[None]:
    """One OpenBLAS thread while the block runs (the counts before are restored)."""
    controls = _openblas_thread_controls()
    before = [get() for get, _ in controls]
    for _, set_ in controls:
        set_(1)
    try:
        yield
    finally:
        for (_, set_), n in zip(controls, before, strict=True):
            set_(n)
