"""Files and folders only the service's user may read: the store, logs, checkpoints, keys."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

PRIVATE_DIR, PRIVATE_FILE = 0o700, 0o600


def narrow(path: Path, mode: int) -> bool:
    """chmod `path` to `mode` when others may read or enter it and it is ours (another
    user's file is left alone); whether it was narrowed."""
    with contextlib.suppress(OSError):
        st = path.stat()
        if stat.S_IMODE(st.st_mode) & 0o077 and st.st_uid == os.geteuid():
            os.chmod(path, mode)
            return True
    return False
