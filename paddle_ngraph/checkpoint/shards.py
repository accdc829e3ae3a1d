"""Checkpoints of a tensor-parallel (model-parallel) static program: one file set per shard, and
the dense checkpoint reassembled from them.

With ``mp_degree`` > 1 each rank of a model holds a different shard, so each writes its own
files, named as PaddleNLP names the files of a tensor-parallel rank (``model_state.tp00.pdparams``):
``model.tp00.pdparams``, ``.pdopt``, ``.pdmodel`` for the first shard (mp rank 0),
``model.tp01.*`` for the second, and so on. The data-parallel replicas of a shard hold the same
values (their gradients are averaged), so only the first replica (ranks ``0 .. mp_degree - 1``)
writes. Rank 0 adds ``shards.json``: the degrees, and the axis each sharded parameter and its
optimizer state cut (``frontend/shard_axes.py``), which ``assemble_dense`` concatenates along.
"""
from __future__ import annotations

import json
import os
import pickle
from dataclasses import dataclass, field

import numpy as np

from .files import MODEL, CheckpointError, checkpoint_step, write_atomically

MANIFEST = "shards.json"


def shard_prefix(mp_rank: int) -> str:
    """The files' name (without .pdparams/.pdopt/.pdmodel) of shard ``mp_rank``."""
    return f"{MODEL}.tp{mp_rank:02d}"


@dataclass
class ShardLayout:
    """This rank's place in a model-parallel job, as its checkpoints need it."""

    rank: int
    nranks: int
    mp_degree: int
    transport: object = None
    axes: dict = field(default_factory=dict)  # name -> axis its shards cut (None: unknown)

    @property
    def mp_rank(self) -> int:  # Paddle's topology puts model parallelism innermost (ir/groups.py)
        return self.rank % self.mp_degree

    @property
    def writes(self) -> bool:
        """The first data-parallel replica of each shard writes it."""
        return self.rank < self.mp_degree


def layout_of(engines) -> ShardLayout | None:
    """The layout of a program's model-parallel ``engines``; None without model parallelism."""
    parallel = [e for e in engines if e.replicas is not None]
    if not parallel:
        return None
    transport = parallel[0].transport
    mp_group = parallel[0].replicas.mp_group
    axes = {}
    for engine in parallel:
        axes.update(engine.shard_axes)
    return ShardLayout(transport.rank, transport.size, len(mp_group) or transport.size, transport, axes)


def write_manifest(directory: str, layout: ShardLayout):
    with open(os.path.join(directory, MANIFEST), "w") as f:
        json.dump({"mp_degree": layout.mp_degree, "dp_degree": layout.nranks // layout.mp_degree,
                   "files": [shard_prefix(m) for m in range(layout.mp_degree)],
                   "shard_axes": dict(sorted(layout.axes.items()))}, f, indent=1)
        f.write("\n")


def read_manifest(path: str) -> dict | None:
    """The manifest of checkpoint directory ``path``; None for a checkpoint of one shard (dense)."""
    try:
        with open(os.path.join(path, MANIFEST)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{os.path.join(path, MANIFEST)}: {e}") from e


def _read_pickle(path: str) -> dict:
    """A .pdparams/.pdopt file as ``paddle.static.save`` writes it: a pickled dict of arrays."""
    try:
        with open(path, "rb") as f:
            return pickle.load(f, encoding="latin1")
    except (OSError, pickle.UnpicklingError, EOFError) as e:
        raise CheckpointError(f"{path}: {type(e).__name__}: {e}") from e


def dense_state(path: str) -> tuple[dict, dict]:
    """(parameters, optimizer state) of the dense model, reassembled from the shards of
    checkpoint directory ``path``: each sharded value concatenated along its axis in mp rank
    order, every other value (replicated on the ranks of a model) as shard 0 holds it."""
    manifest = read_manifest(path)
    if manifest is None:
        raise CheckpointError(f"{path}: no {MANIFEST}: not a checkpoint of a model-parallel program")
    axes = manifest["shard_axes"]
    unknown = sorted(n for n, a in axes.items() if a is None)
    if unknown:
        raise CheckpointError(f"{path}: the program did not say along which axis {', '.join(unknown)} "
                              f"{'is' if len(unknown) == 1 else 'are'} sharded (read by none of split's layers)")
    parts = []
    for kind in ("pdparams", "pdopt"):
        shards = [_read_pickle(os.path.join(path, f"{prefix}.{kind}")) for prefix in manifest["files"]]
        whole = {}
        for name, first in shards[0].items():
            if name in axes:
                missing = [i for i, s in enumerate(shards) if name not in s]
                if missing:
                    raise CheckpointError(f"{path}: {name} is missing from shard(s) {missing}")
                whole[name] = np.concatenate([s[name] for s in shards], axis=axes[name])
            else:
                whole[name] = first
        parts.append(whole)
    return parts[0], parts[1]


def assemble_dense(path: str, out_root: str) -> str:
    """Writes the dense checkpoint reassembled from the shards of checkpoint ``path`` under
    ``out_root`` (``out_root/step-NNNNNN/model.pdparams``, ``.pdopt``, at the same step, with
    ``latest``), which ``paddle.static.load`` of the dense program reads (and so
    ``load_checkpoint(dense_program, out_root)``). Returns the new checkpoint's directory."""
    params, state = dense_state(path)

    def write(directory):
        for kind, values in (("pdparams", params), ("pdopt", state)):
            with open(os.path.join(directory, f"{MODEL}.{kind}"), "wb") as f:
                pickle.dump(values, f, protocol=4)  # as paddle.static.save writes them

    return write_atomically(out_root, checkpoint_step(path), write)
