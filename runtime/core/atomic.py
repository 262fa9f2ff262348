"""Things that appear whole: build beside the target, then rename into place.

Everything the product publishes is written this way, and only here is anything renamed:

    publishing(target)       export and adopt folders, Triton repository entries, training
                             checkpoints, an export Ray copies onto a node (keep_existing)
    install(scratch, target) the rename itself; a bulk job's output file, built in its own
                             OUT.partial/ folder (kept for --resume), goes through it (durable)
    write_file(path, data)   a small file on disk whole or not at all (a bulk job's commit
                             record and Parquet parts)

A reader (a loader, Triton polling its repository, `--resume`) never sees a half-written
target, and an interrupted writer leaves only scratch beside it: `.NAME.partial-PID-XXXXXXXX`,
which the next writer to the same target deletes once PID is gone. Renames within one
directory are atomic on POSIX; an existing folder is renamed aside first and deleted after,
so at any instant the target is the complete old folder, the complete new one, or (between
the two renames) absent — never a mix. A file replaces a file in one rename.
"""
from __future__ import annotations

import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

SCRATCH = ".partial-"  # .NAME.partial-PID-XXXXXXXX: a writer's folder beside its target


def scratch_beside(target: Path) -> Path:
    """A fresh hidden name beside `target` to build in; the pid tells a live writer's scratch
    from a killed one's."""
    return target.with_name(f".{target.name}{SCRATCH}{os.getpid()}-{uuid.uuid4().hex[:8]}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by someone else
    return True


def remove_stale(target: Path) -> None:
    """Delete the scratch folders that killed writers to `target` left behind."""
    for p in target.parent.glob(f".{target.name}{SCRATCH}*"):
        pid = p.name.rsplit(SCRATCH, 1)[1].split("-")[0]
        if not pid.isdigit() or not _pid_alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)


def _aside(folder: Path) -> Path:
    """Rename `folder` to a hidden name beside it (to be deleted); returns that name."""
    old = folder.with_name(f".{folder.name}.old-{uuid.uuid4().hex[:8]}")
    os.replace(folder, old)
    return old


def discard(folder: Path) -> None:
    """Delete `folder` without a reader ever seeing it half deleted: renamed aside first."""
    shutil.rmtree(_aside(folder), ignore_errors=True)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def install(scratch: Path, target: Path, *, keep_existing: bool = False,
            durable: bool = False) -> bool:
    """Rename the finished `scratch` (a folder or a file, beside `target`) to `target`; True
    when it did.

    An existing target folder is replaced: renamed aside, the new one renamed in, the old one
    deleted. keep_existing: a folder already at `target` (another writer's, of the same
    content) is kept instead and False returned; `scratch` is then the caller's to delete.
    durable: the directory is fsynced after the rename, so the rename survives a power cut
    (the data itself must be fsynced already)."""
    if keep_existing:
        try:
            os.replace(scratch, target)
        except OSError:  # a non-empty folder is there: another writer renamed its copy first
            if not target.is_dir():
                raise
            return False
    elif scratch.is_dir() and target.exists():
        old = _aside(target)
        os.replace(scratch, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(scratch, target)
    if durable:
        _fsync_dir(target.parent)
    return True


@contextmanager
def publishing(target: Path, *, keep_existing: bool = False) -> Iterator[Path]:
    """A fresh scratch folder beside `target` to build in: installed as `target` when the block
    completes, deleted when it fails (an error, Ctrl-C). First deletes the scratch that killed
    writers to `target` left. keep_existing: as `install`'s (the scratch is deleted)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(target)
    tmp = scratch_beside(target)
    tmp.mkdir()
    try:
        yield tmp
        install(tmp, target, keep_existing=keep_existing)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already when it was installed


def write_file(path: Path, data: bytes) -> None:
    """`path` holds `data` on disk, or what it held before: written to NAME.tmp beside it,
    fsynced, renamed, the directory fsynced. One writer per file (a fixed scratch name)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    install(tmp, path, durable=True)
