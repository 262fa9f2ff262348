"""Folders that appear whole: build beside the target, then rename into place.

Export folders, Triton repository entries and training checkpoints are all written this way, so
a reader (a loader, Triton polling its repository, `--resume`) never sees a half-written one
and an interrupted writer leaves only a dot-folder behind. Renames within one directory are
atomic on POSIX; an existing target is renamed aside first and deleted after, so at any instant
the target is the complete old folder, the complete new one, or (between the two renames)
absent — never a mix.
"""
from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path


def replace_folder(tmp: Path, target: Path) -> None:
    """Move the finished folder `tmp` (beside `target`) to `target`, replacing an old one."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(target, old)
    os.replace(tmp, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
