"""Which axis of each sharded parameter (and of its optimizer state) a tensor-parallel program cuts.

Paddle's ``split`` marks a shard ``is_distributed`` (a flag a program saved to a file loses) but
records no axis: the axis follows from the layer that reads it (``mp_ops._parallel_linear`` /
``_parallel_embedding``), so it is read here from the forward ops of the legacy program, before the
engine replaces them:

- the table of ``c_embedding`` is cut by rows (the vocabulary): axis 0;
- the weight of a column-parallel linear (``matmul``'s Y, its input through ``c_identity``, its
  output this rank's columns): axis 1;
- the weight of a row-parallel linear (its ``matmul``'s output is summed over the ring by
  ``mp_allreduce_sum``, partial sums of this rank's input rows; or its input cut by ``c_split``): axis 0;
- a sharded bias is the column-parallel linear's (a row-parallel bias is whole on every rank): axis 0.

An optimizer op's state of a sharded parameter (Adam's moments: the persistable inputs of the
parameter's shape) is cut as the parameter is. An ``is_distributed`` parameter read by none of
these layers gets ``None``: it cannot be reassembled, and the assembly says so by name.
"""
from __future__ import annotations

from .program_view import FORWARD, ProgramView

_MATMULS = {"matmul", "matmul_v2", "mul"}
_TRANSPOSED_Y = ("transy", "transposey")  # matmul_v2's trans_y, matmul's transpose_Y (normalized)
_ROW_REDUCTIONS = {"mp_allreduce_sum", "all_reduce"}


def _first(names):
    return names[0] if names and names[0] else None


class _Program:
    """Who reads and who writes each variable of block 0's forward ops."""

    def __init__(self, view: ProgramView):
        self.view = view
        self.forward = [op for op in view.ops if op.role == FORWARD and op.block == 0]
        self.readers: dict[str, list] = {}
        self.producer: dict[str, object] = {}
        for op in self.forward:
            for name in op.input_names():
                self.readers.setdefault(name, []).append(op)
            for name in op.output_names():
                self.producer[name] = op

    def made_by(self, name, types) -> bool:
        op = self.producer.get(name)
        return op is not None and op.type in types

    def matmul_axis(self, op, distributed: bool) -> int | None:
        """The axis of ``op``'s weight (Y) a parallel linear cuts: 0 row-parallel (its output is
        summed over the ring, or its input is split from a whole one), 1 column-parallel (its input
        enters through c_identity, whose gradient sums over the ring); None if ``op`` is not one of
        split's linears (a distributed weight is then a column-parallel one: a row-parallel linear
        always ends in the sum)."""
        out = _first(op.outputs.get("out"))
        if any(r.type in _ROW_REDUCTIONS for r in self.readers.get(out, ())) or \
                self.made_by(_first(op.inputs.get("x")), {"c_split"}):
            axis = 0
        elif distributed or self.made_by(_first(op.inputs.get("x")), {"c_identity"}):
            axis = 1
        else:
            return None
        transposed = any(bool(op.attrs.get(a, False)) for a in _TRANSPOSED_Y)
        return 1 - axis if transposed else axis

    def axis_of(self, name: str) -> int | None:
        """The axis of parameter ``name`` one of split's layers cuts, None if none reads it so."""
        distributed = self.view.vars[name].is_distributed
        found = set()
        for op in self.readers.get(name, ()):
            if op.type == "c_embedding" and name in (op.inputs.get("w") or ()):
                found.add(0)
            elif op.type in _MATMULS and name in (op.inputs.get("y") or ()):
                found.add(self.matmul_axis(op, distributed))
            elif op.type == "elementwise_add" and name in (op.inputs.get("y") or ()):
                # The bias of a column-parallel linear: added to its matmul's output, cut as its columns.
                before = self.producer.get(_first(op.inputs.get("x")))
                column = before is not None and before.type in _MATMULS and \
                    self.matmul_axis(before, self._weight_distributed(before)) == 1
                found.add(0 if distributed or column else None)
        if not distributed:
            found.discard(None)
        return found.pop() if len(found) == 1 else None

    def _weight_distributed(self, op) -> bool:
        weight = self.view.vars.get(_first(op.inputs.get("y")))
        return weight is not None and weight.is_distributed


def shard_axes(view: ProgramView) -> dict[str, int | None]:
    """name -> the axis its shards cut, for every parameter of ``view`` that split's layers shard
    (``is_distributed``, or read as one of their shards: a program read back from a file loses the
    flag) and its optimizer state; None for an ``is_distributed`` one whose layer is none of these."""
    program = _Program(view)
    axes: dict[str, int | None] = {}
    for name, var in sorted(view.vars.items()):
        if not (var.persistable and var.is_parameter):
            continue
        axis = program.axis_of(name)
        if axis is not None or var.is_distributed:
            axes[name] = axis
    for op in view.ops:  # optimizer state follows its parameter
        param = _first(op.inputs.get("param"))
        if param not in axes:
            continue
        shape = view.vars[param].shape
        for names in op.inputs.values():
            for name in names or ():
                var = view.vars.get(name)
                if name != param and var is not None and var.persistable and var.shape == shape:
                    axes[name] = axes[param]
    return axes
