"""The engine's share of a ZeRO-1 function: this rank's slices of parameters and optimizer state.

``passes/shard_optimizer.py`` replaced each bucket's full optimizer state by function
parameters holding one rank's slice of the flattened, padded bucket. This object owns those
arrays (passed to the executable after Paddle's inputs, updated in place like any state) and
moves state between them and the Paddle scope:

- ``pull``: before the first step, and after a checkpoint was loaded, cut this rank's slices out
  of the full variables (parameters from the step's inputs, optimizer state from the scope),
  then free the full optimizer state in the scope (that is the memory ZeRO-1 saves);
- ``allocate_full``: before a checkpoint is loaded into the scope, give the freed variables memory;
- ``push_full``: for a checkpoint, allgather the slices (a collective: every rank calls it) and
  write the full optimizer state back into the scope, so that ``paddle.static.save`` sees the
  same variables as without sharding; ``release`` frees them again;
- ``gathered``: the same full state as arrays, for an elastic commit, without the scope.

The optimizer state is looked up in ``paddle.static.global_scope()``, where the startup program
and ``paddle.static.load`` put it.
"""
from __future__ import annotations

import weakref

import numpy as np

from ..errors import ExecutionError
from ..ir.types import DType


# The states of the live engines, for the executor hook (originals.py) that names a freed variable
# a program of Paddle's would read (a save program: paddle.static.save, fleet's save_persistables).
LIVE: "weakref.WeakSet[ShardedState]" = weakref.WeakSet()


def freed_variables() -> dict[str, str]:
    """``{variable: slice name}`` of the optimizer state that live engines have freed in the scope."""
    if not LIVE:
        return {}
    scope = _scope()
    freed = {}
    for state in list(LIVE):
        for b in state.buckets:
            for name, sources in b.slices.items():
                if name == b.master:
                    continue
                for variable in sources:
                    found = scope.find_var(variable)
                    if found is not None and not found.get_tensor()._is_initialized():
                        freed[variable] = name
    return freed


class ShardedState:
    def __init__(self, buckets, parameter_names: list[str], rank: int, size: int):
        LIVE.add(self)
        self.buckets = buckets
        self.rank, self.size = rank, size
        self.names = list(parameter_names)  # the function's slice parameters, in its order
        self.sources = {name: b for b in buckets for name in b.slices}
        self.arrays = [np.zeros(self.sources[n].shard_size, dtype=DType.parse(self.sources[n].dtype).numpy)
                       for n in self.names]
        self.stale = True  # the slices must be (re)cut from the full variables before the next step

    def state_variables(self) -> list[str]:
        """The Paddle variables of optimizer state that only the slices hold between checkpoints."""
        return [v for b in self.buckets for name, sources in b.slices.items() if name != b.master for v in sources]

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)

    # --- full -> slices --------------------------------------------------------------------------
    def pull(self, inputs_by_name: dict):
        """Cuts this rank's slices; parameters come from ``inputs_by_name`` (the step's inputs)."""
        scope = _scope()
        for name, array in zip(self.names, self.arrays):
            bucket = self.sources[name]
            pieces = []
            for variable in bucket.slices[name]:
                if name == bucket.master:
                    value = inputs_by_name[variable]
                else:
                    value = _read(scope, variable, name)
                pieces.append(np.asarray(value).reshape(-1))
            flat = np.concatenate(pieces)
            start = self.rank * bucket.shard_size
            mine = flat[start:start + bucket.shard_size]
            array[...] = 0
            array[:mine.size] = mine
        self.release()
        self.stale = False

    def release(self):
        """Frees the full optimizer state in the scope (the slices hold it)."""
        scope = _scope()
        for variable in self.state_variables():
            found = scope.find_var(variable)
            if found is not None:
                found.get_tensor()._clear()

    def allocate_full(self):
        """Gives the freed optimizer state its full size again (zeros), for ``paddle.static.load``,
        which fills only variables that hold memory."""
        import paddle

        scope = _scope()
        for b in self.buckets:
            for name, sources in b.slices.items():
                if name == b.master:
                    continue
                for variable, shape in zip(sources, b.shapes):
                    tensor = scope.var(variable).get_tensor()
                    if not tensor._is_initialized():
                        tensor.set(np.zeros(shape, dtype=DType.parse(b.dtype).numpy), paddle.CPUPlace())

    # --- slices -> full ------------------------------------------------------------------------------
    def push_full(self, transport):
        """Writes the full optimizer state into the scope. Collective: every rank calls it."""
        import paddle

        if self.stale:
            return  # the scope still holds the full state (no step since it was set)
        scope = _scope()
        for name, array in zip(self.names, self.arrays):
            bucket = self.sources[name]
            if name == bucket.master:
                continue  # the parameters are whole in the scope after every step
            flat = transport.allgather(array)
            offset = 0
            for variable, size, shape in zip(bucket.slices[name], bucket.sizes, bucket.shapes):
                value = np.ascontiguousarray(flat[offset:offset + size].reshape(shape))
                scope.var(variable).get_tensor().set(value, paddle.CPUPlace())
                offset += size


    def gathered(self, transport, buffers: dict | None = None) -> tuple[dict, dict]:
        """The full optimizer state, not through the scope (an elastic commit): (variable -> array,
        the gathered flat arrays by slice name). Gathered into ``buffers`` (flat arrays an earlier
        call returned) where they fit; the arrays are views of the flat ones. Collective."""
        values, flats = {}, {}
        for name, array in zip(self.names, self.arrays):
            bucket = self.sources[name]
            if name == bucket.master:
                continue  # the parameters are whole in the scope after every step
            reuse = (buffers or {}).get(name)
            if reuse is not None and (reuse.shape != (transport.size * array.shape[0],) or reuse.dtype != array.dtype):
                reuse = None
            flat = flats[name] = transport.allgather(array, out=reuse)
            offset = 0
            for variable, size, shape in zip(bucket.slices[name], bucket.sizes, bucket.shapes):
                values[variable] = flat[offset:offset + size].reshape(shape)
                offset += size
        return values, flats


def _scope():
    import paddle

    return paddle.static.global_scope()


def _read(scope, variable: str, slice_name: str) -> np.ndarray:
    found = scope.find_var(variable)
    if found is None or not found.get_tensor()._is_initialized():
        raise ExecutionError(f"zero_stage 1: optimizer state '{variable}' (sliced into '{slice_name}') is not "
                             f"initialized in paddle.static.global_scope(): run the startup program in the "
                             f"global scope before the first step")
    return np.array(found.get_tensor())
