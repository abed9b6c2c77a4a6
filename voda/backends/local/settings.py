"""The local backend as `voda serve --backend local` configures it."""

from __future__ import annotations

import os

from voda.backends.local.backend import LocalBackend


def from_settings(settings: object) -> LocalBackend:
    """The backend `voda serve --backend local` runs.

    Read from the service settings when they have them, else from the environment:
    `slots` (VODA_SLOTS; 0 or unset: one per GPU, else one per CPU), `nodes` (VODA_NODES,
    e.g. '2x2'; unset: one node) and `run_dir` (VODA_RUN_DIR; unset: the user's state dir).
    """
    def setting(name: str, env: str) -> str:
        value = getattr(settings, name, None)
        return str(value) if value not in (None, "", 0) else os.environ.get(env, "")

    slots_text = setting("slots", "VODA_SLOTS").strip()
    if slots_text and not slots_text.isdigit():
        raise ValueError(f"slots: must be a whole number, got {slots_text!r}")
    slots = int(slots_text) if slots_text and int(slots_text) > 0 else None
    nodes = setting("nodes", "VODA_NODES").strip() or None
    run_dir = setting("run_dir", "VODA_RUN_DIR").strip() or None
    return LocalBackend(slots=slots, nodes=nodes, run_dir=run_dir)

