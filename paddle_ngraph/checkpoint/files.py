"""The checkpoint directory on disk: ``step-NNNNNN`` directories made complete before they are
named, and ``latest``, which names the last complete one.

A checkpoint is written into a temporary directory (``step-NNNNNN.tmp-<tag>``); every file and the
directory are fsynced, the directory is renamed into place, and only then is ``latest`` replaced
(write, fsync, rename). A process killed at any moment leaves ``latest`` naming a complete
checkpoint (or no ``latest`` at all); a half-written one is a ``*.tmp-*`` directory that the next
save removes.
"""
from __future__ import annotations

import os
import re
import shutil

from ..errors import NgraphError

LATEST = "latest"
MODEL = "model"
_NAME = re.compile(r"^step-(\d+)$")


class CheckpointError(NgraphError):
    """A checkpoint that cannot be written or read; names the path."""


def fsync_dir(path: str):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def step_name(step: int) -> str:
    return f"step-{int(step):06d}"


def clear_stale(root: str):
    """Makes ``root`` and removes what saves that were killed left in it."""
    os.makedirs(root, exist_ok=True)
    for stale in os.listdir(root):
        if ".tmp-" in stale:
            shutil.rmtree(os.path.join(root, stale), ignore_errors=True)


def temp_dir(root: str, step: int, tag: str) -> str:
    return os.path.join(root, f"{step_name(step)}.tmp-{tag}")


def fsync_files(directory: str, names=None):
    """fsyncs the files ``names`` of ``directory`` (every file of it by default)."""
    for file in os.listdir(directory) if names is None else names:
        with open(os.path.join(directory, file), "rb") as f:
            os.fsync(f.fileno())


def publish(root: str, step: int, tmp: str) -> str:
    """Puts the complete temporary directory ``tmp`` (its files fsynced) into place as checkpoint
    ``step`` and names it in ``latest``; returns its path."""
    name = step_name(step)
    final = os.path.join(root, name)
    fsync_dir(tmp)
    if os.path.exists(final):
        shutil.rmtree(final)
    os.rename(tmp, final)
    fsync_dir(root)
    pointer = os.path.join(root, f"{LATEST}.tmp-{os.getpid()}")
    with open(pointer, "w") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(pointer, os.path.join(root, LATEST))
    fsync_dir(root)
    return final


def write_atomically(root: str, step: int, write_files) -> str:
    """Checkpoint ``step`` under ``root``: ``write_files(directory)`` fills a temporary directory,
    which is fsynced, renamed into place, and only then named by ``latest``. Returns its path.
    (``save_checkpoint`` writes a static program's files through it; ``paddle_ngraph.elastic``
    a dygraph Layer's and optimizer's.)"""
    final = os.path.join(root, step_name(step))
    tmp = temp_dir(root, step, str(os.getpid()))
    try:
        clear_stale(root)
        os.makedirs(tmp)
        write_files(tmp)
        fsync_files(tmp)
        return publish(root, step, tmp)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(f"checkpoint {final}: {e}") from e


def latest_checkpoint(root: str) -> str | None:
    """The directory of the last complete checkpoint under ``root``, or None if there is none."""
    try:
        with open(os.path.join(root, LATEST)) as f:
            name = f.read().strip()
    except FileNotFoundError:
        return None
    if not _NAME.match(name) or not os.path.isdir(os.path.join(root, name)):
        raise CheckpointError(f"{os.path.join(root, LATEST)}: names '{name}', which is not a checkpoint in {root}")
    return os.path.join(root, name)


def checkpoint_step(path: str) -> int:
    """The step of a checkpoint directory (``.../step-000120`` -> 120)."""
    match = _NAME.match(os.path.basename(os.path.normpath(path)))
    if match is None:
        raise CheckpointError(f"{path}: not a checkpoint directory (step-NNNNNN)")
    return int(match.group(1))
