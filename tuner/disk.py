"""Free space where candidates are built: on a full disk every build fails and workers die,
and those failures are the disk's, not the configs'. Recorded, they would mark the configs
broken and a resumed search would skip them for good.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import platformdirs

from octune.tuner.programs import CACHE_ENV_VAR, default_cache_root

#: Below this, a failed build or a dead worker is put down to the disk, not to the config.
LOW_FREE_BYTES = 32 * 2**20


def _build_places() -> list[tuple[Path, str]]:
    """Where a build writes, and the variable that moves it: octune's program cache, the
    temporary folder, and the compilers' caches (PoCL's, else the user's cache folder).
    """
    pocl = os.environ.get("POCL_CACHE_DIR")
    return [
        (default_cache_root(), CACHE_ENV_VAR),
        (Path(tempfile.gettempdir()), "TMPDIR"),
        (Path(pocl) if pocl else Path(platformdirs.user_cache_dir()), "POCL_CACHE_DIR"),
    ]


def full_disk() -> str | None:
    """A one-line reason naming the first place builds write whose disk is (nearly) full, or
    None where each has room.
    """
    for path, variable in _build_places():
        existing = next((p for p in (path, *path.parents) if p.exists()), None)
        if existing is None:
            continue
        free = shutil.disk_usage(existing).free
        if free < LOW_FREE_BYTES:
            return (
                f"the disk holding {path} has {free / 2**20:.1f} MiB free, and candidates are "
                f"built there: free space (or set {variable} to a folder with room), then run "
                "again with --resume; the measurements taken so far are kept, the candidates "
                "that failed for want of space are not recorded"
            )
    return None
