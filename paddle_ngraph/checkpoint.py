"""Checkpoints that survive a crash: Paddle's own format, written atomically, by rank 0 only.

Layout under a checkpoint root::

    root/step-000120/model.pdparams   paddle.static.save's files (parameters, optimizer state,
    root/step-000120/model.pdopt      program), so paddle.static.load reads them as they are
    root/step-000120/model.pdmodel
    root/latest                       "step-000120": the last complete checkpoint

A checkpoint is written into a temporary directory, every file and the directory are
fsynced, the directory is renamed into place, and only then is ``latest`` replaced (write,
fsync, rename). A process killed at any moment leaves ``latest`` naming a complete
checkpoint (or no ``latest`` at all); a half-written one is a ``*.tmp-*`` directory that
the next save removes.

Every rank holds the same parameters after each step (the ranks apply the same averaged
gradients), so rank 0 alone writes; the other ranks return at once. With ZeRO-1
(``zero_stage: 1``) each rank holds a slice of the optimizer state: every rank must call
``save_checkpoint``, which gathers the full state into the scope first (a collective). Resuming needs nothing
of the ranks but ``load_checkpoint``, before or after ``transpile``: the engine updates
the variables of the scope in place, where ``paddle.static.load`` puts them.
"""
from __future__ import annotations

import os
import re
import shutil

from .errors import NgraphError

LATEST = "latest"
MODEL = "model"
_NAME = re.compile(r"^step-(\d+)$")


class CheckpointError(NgraphError):
    """A checkpoint that cannot be written or read; names the path."""


def _fsync_dir(path: str):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rank() -> int:
    from .distributed import detect_launcher

    return detect_launcher().rank


def save_checkpoint(program, root: str, step: int, rank: int | None = None) -> str | None:
    """Saves ``program``'s persistable variables as checkpoint ``step`` under ``root``, atomically.

    Returns the checkpoint directory on rank 0, None on the other ranks (which write nothing).
    """
    import paddle

    _check_no_pending_accumulation(step)
    sharded = _sharded_engines()
    for engine in sharded:  # ZeRO-1: every rank takes part in gathering the full optimizer state
        engine.sharded.push_full(engine.transport)
    try:
        if (rank if rank is not None else _rank()) != 0:
            return None
        return _write(program, root, step)
    finally:
        for engine in sharded:
            engine.sharded.release()


def _check_no_pending_accumulation(step: int):
    """Accumulated gradients live only in the engine: a checkpoint taken between the micro-steps of
    an update would silently drop them on resume. Every rank has made the same calls, so every rank
    raises alike."""
    from .transpiler import engines

    for engine in engines():
        pending = engine.steps % engine.accumulate_steps
        if pending:
            raise CheckpointError(f"checkpoint step {step}: engine {engine.id} is after micro-step {pending} of "
                                  f"{engine.accumulate_steps} (accumulate_steps); its accumulated gradients are not "
                                  f"saved: save after the {engine.accumulate_steps}-th call of an update")


def _sharded_engines():
    """The engines of this process that hold only a slice of their optimizer state, and have run."""
    from .transpiler import engines

    return [e for e in engines() if e.sharded is not None and not e.sharded.stale]


def _write(program, root: str, step: int) -> str:
    import paddle

    return write_atomically(root, step, lambda tmp: paddle.static.save(program, os.path.join(tmp, MODEL)))


def write_atomically(root: str, step: int, write_files) -> str:
    """Checkpoint ``step`` under ``root``: ``write_files(directory)`` fills a temporary directory,
    which is fsynced, renamed into place, and only then named by ``latest``. Returns its path.
    (``save_checkpoint`` writes a static program's files through it; ``paddle_ngraph.elastic``
    a dygraph Layer's and optimizer's.)"""
    os.makedirs(root, exist_ok=True)
    name = f"step-{int(step):06d}"
    final = os.path.join(root, name)
    for stale in os.listdir(root):  # leftovers of a save that was killed
        if ".tmp-" in stale:
            shutil.rmtree(os.path.join(root, stale), ignore_errors=True)
    tmp = os.path.join(root, f"{name}.tmp-{os.getpid()}")
    try:
        os.makedirs(tmp)
        write_files(tmp)
        for file in os.listdir(tmp):
            with open(os.path.join(tmp, file), "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(tmp)
        if os.path.exists(final):
            shutil.rmtree(final)
        os.rename(tmp, final)
        _fsync_dir(root)
        pointer = os.path.join(root, f"{LATEST}.tmp-{os.getpid()}")
        with open(pointer, "w") as f:
            f.write(name + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(pointer, os.path.join(root, LATEST))
        _fsync_dir(root)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(f"checkpoint {final}: {e}") from e
    return final


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


def load_checkpoint(program, root: str) -> int | None:
    """Loads the last complete checkpoint under ``root`` into the scope; returns its step (None: none)."""
    import paddle

    path = latest_checkpoint(root)
    if path is None:
        return None
    from .transpiler import engines

    for engine in engines():
        if engine.sharded is not None:
            engine.sharded.allocate_full()
    try:
        paddle.static.load(program, os.path.join(path, MODEL))
    except Exception as e:  # Paddle raises several types for missing or corrupt files
        raise CheckpointError(f"checkpoint {path}: {type(e).__name__}: {e}") from e
    for engine in engines():
        if engine.sharded is not None:
            engine.sharded.stale = True  # ZeRO-1: re-cut the slices from the loaded state
        if hasattr(engine, "reset_snapshots"):  # local SGD: the loaded parameters are the new snapshots
            engine.reset_snapshots()
    return checkpoint_step(path)


def checkpoint_step(path: str) -> int:
    """The step of a checkpoint directory (``.../step-000120`` -> 120)."""
    match = _NAME.match(os.path.basename(os.path.normpath(path)))
    if match is None:
        raise CheckpointError(f"{path}: not a checkpoint directory (step-NNNNNN)")
    return int(match.group(1))
