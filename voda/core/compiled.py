"""Modules of compiled kernels (numba), imported on first use.

numba compiles a kernel on its first call (cached on disk) and costs a fraction of a second
to import, so callers import such a module only for work large enough to pay for it.
"""

from __future__ import annotations

import importlib
from functools import cache
from types import ModuleType


@cache
def compiled(module: str) -> ModuleType | None:
    """The kernel module of this name, imported on first use; None without numba (or where
    numba finds no folder to cache the compiled kernels in, which it reports by
    RuntimeError)."""
    try:
        return importlib.import_module(module)
    except (ImportError, RuntimeError):
        return None
