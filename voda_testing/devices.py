"""Which devices a test's local backend sees.

The tests size their local backends in CPU slots (`slots=4` where a machine has two
cores), so `conftest.py` hides a GPU machine's GPUs from them with `hide_gpus()`, for the
whole session and the processes it starts. Tests that train on the machine's own devices
(NCCL across its GPUs) take them back with `machine_devices`.
"""

from __future__ import annotations

import os

import pytest

# What the machine showed before the test session hid anything (None: not set).
MACHINE_CUDA_VISIBLE_DEVICES = os.environ.get("CUDA_VISIBLE_DEVICES")


def hide_gpus() -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""


@pytest.fixture
def machine_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's own GPUs, as `voda serve` on it would see them."""
    if MACHINE_CUDA_VISIBLE_DEVICES is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", MACHINE_CUDA_VISIBLE_DEVICES)
