"""Checkpoints that survive a crash: Paddle's own format, written atomically.

Layout under a checkpoint root::

    root/step-000120/model.pdparams   paddle.static.save's files (parameters, optimizer state,
    root/step-000120/model.pdopt      program), so paddle.static.load reads them as they are
    root/step-000120/model.pdmodel
    root/latest                       "step-000120": the last complete checkpoint

``files.py`` says how a checkpoint is made complete before ``latest`` names it.

Every rank holds the same parameters after each step (the ranks apply the same averaged
gradients), so rank 0 alone writes; the other ranks return at once. With ZeRO-1
(``zero_stage: 1``) each rank holds a slice of the optimizer state: every rank must call
``save_checkpoint``, which gathers the full state into the scope first (a collective). With model
parallelism (``mp_degree`` > 1) the ranks of a model hold different shards: every rank must call
``save_checkpoint``; the first replica of each shard writes ``model.tpNN.*`` into the one step
directory, which rank 0 completes (``shards.py``; ``assemble_dense`` makes a dense checkpoint of
it). Resuming needs nothing of the ranks but ``load_checkpoint``, before or after ``transpile``:
the engine updates the variables of the scope in place, where ``paddle.static.load`` puts them.
"""
from __future__ import annotations

import os
import shutil

from .files import (LATEST, MODEL, CheckpointError, checkpoint_step, clear_stale, fsync_files, step_name,  # noqa: F401
                    latest_checkpoint, publish, temp_dir, write_atomically)
from .shards import MANIFEST, ShardLayout, assemble_dense, layout_of, read_manifest, shard_prefix, write_manifest


def _rank() -> int:
    from ..distributed import detect_launcher

    return detect_launcher().rank


def save_checkpoint(program, root: str, step: int, rank: int | None = None) -> str | None:
    """Saves ``program``'s persistable variables as checkpoint ``step`` under ``root``, atomically.

    Returns the checkpoint directory on the ranks that wrote (rank 0; with model parallelism the
    first replica of each shard), None on the other ranks (which write nothing).
    """
    from ..transpiler import engines_of

    own = engines_of(program)  # other programs' engines (an evaluation program, ...) are not saved
    _check_no_pending_accumulation(own, step)
    layout = layout_of(own)
    if layout is not None:
        return _save_shards(program, root, step, layout)
    sharded = _sharded_engines(own)
    for engine in sharded:  # ZeRO-1: every rank takes part in gathering the full optimizer state
        engine.sharded.push_full(engine.transport)
    try:
        if (rank if rank is not None else _rank()) != 0:
            return None
        return _write(program, root, step)
    finally:
        for engine in sharded:
            engine.sharded.release()


def _check_no_pending_accumulation(engines: list, step: int):
    """Accumulated gradients live only in the engine: a checkpoint taken between the micro-steps of
    an update would silently drop them on resume. Every rank has made the same calls, so every rank
    raises alike."""
    for engine in engines:
        pending = engine.steps % engine.accumulate_steps
        if pending:
            raise CheckpointError(f"checkpoint step {step}: engine {engine.id} is after micro-step {pending} of "
                                  f"{engine.accumulate_steps} (accumulate_steps); its accumulated gradients are not "
                                  f"saved: save after the {engine.accumulate_steps}-th call of an update")


def _sharded_engines(engines: list):
    """Those of ``engines`` that hold only a slice of their optimizer state, and have run."""
    return [e for e in engines if e.sharded is not None and not e.sharded.stale]


def _write(program, root: str, step: int) -> str:
    import paddle

    return write_atomically(root, step, lambda tmp: paddle.static.save(program, os.path.join(tmp, MODEL)))


def _agree(layout: ShardLayout, what: str, error: str | None):
    """Every rank learns whether any failed at ``what`` (a collective), and then all raise alike:
    no rank waits for a step another one gave up."""
    errors = layout.transport.allgather_object(error)
    failed = [(r, e) for r, e in enumerate(errors) if e]
    if failed:
        raise CheckpointError(f"{what}: " + "; ".join(f"rank {r}: {e}" for r, e in failed))


def _save_shards(program, root: str, step: int, layout: ShardLayout) -> str | None:
    """Model parallelism: every writer puts its shard's files into one temporary directory that
    rank 0 prepared; once all have written, rank 0 puts it into place. Collective over every rank."""
    import paddle

    tmp = temp_dir(root, step, "shards")  # one name all ranks know, unlike a process id
    final = os.path.join(root, step_name(step))
    error = None
    if layout.rank == 0:
        try:
            clear_stale(root)
            os.makedirs(tmp)
            write_manifest(tmp, layout)
        except OSError as e:
            error = str(e)
    _agree(layout, f"checkpoint {final}: preparing {tmp}", error)
    if layout.writes:
        prefix = shard_prefix(layout.mp_rank)
        try:
            paddle.static.save(program, os.path.join(tmp, prefix))
            fsync_files(tmp, [f for f in os.listdir(tmp) if f.startswith(prefix + ".")])
        except Exception as e:  # noqa: BLE001  # OSError, or Paddle's own for a variable it cannot read
            error = f"{type(e).__name__}: {e}"
    _agree(layout, f"checkpoint {final}: writing the shards", error)
    if layout.rank == 0:
        try:
            fsync_files(tmp, [MANIFEST])
            publish(root, step, tmp)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            error = str(e)
    _agree(layout, f"checkpoint {final}: completing it", error)
    return final if layout.writes else None


def load_checkpoint(program, root: str) -> int | None:
    """Loads the last complete checkpoint under ``root`` into the scope; returns its step (None: none).
    A checkpoint of a model-parallel program: this rank's shard (``model.tpNN``)."""
    import paddle

    path = latest_checkpoint(root)
    if path is None:
        return None
    from ..transpiler import engines, engines_of

    prefix = _shard_to_load(path, layout_of(engines_of(program)))
    for engine in engines():
        if engine.sharded is not None:
            engine.sharded.allocate_full()
    try:
        paddle.static.load(program, os.path.join(path, prefix))
    except Exception as e:  # Paddle raises several types for missing or corrupt files
        raise CheckpointError(f"checkpoint {path}: {type(e).__name__}: {e}") from e
    for engine in engines():
        if engine.sharded is not None:
            engine.sharded.stale = True  # ZeRO-1: re-cut the slices from the loaded state
        if hasattr(engine, "reset_snapshots"):  # local SGD: the loaded parameters are the new snapshots
            engine.reset_snapshots()
    return checkpoint_step(path)


def _shard_to_load(path: str, layout: ShardLayout | None) -> str:
    """The files' name this rank loads from checkpoint ``path``: ``model``, or its shard's. Before
    transpile (no engine yet) the rank's shard follows from the launcher's rank and the degree the
    checkpoint was written with (model parallelism innermost, as Paddle lays ranks out)."""
    manifest = read_manifest(path)
    if manifest is None:
        if layout is not None:
            raise CheckpointError(f"checkpoint {path} is of a dense program (no {MANIFEST}); this program is "
                                  f"sharded over mp_degree {layout.mp_degree}, which would load whole tensors "
                                  f"into its shards")
        return MODEL
    degree = int(manifest["mp_degree"])
    if layout is not None and layout.mp_degree != degree:
        raise CheckpointError(f"checkpoint {path} holds {degree} shard(s) (mp_degree {degree}); this program runs "
                              f"with mp_degree {layout.mp_degree}: make a dense checkpoint of it "
                              f"(tools/assemble_checkpoint.py) and train from that")
    rank = layout.rank if layout is not None else _rank()
    return shard_prefix(rank % degree)
