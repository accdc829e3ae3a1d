"""Common-subexpression elimination: nodes of the same op type, inputs and attributes become one.

Dead nodes need no pass of their own: a Function holds only what its results and
parameters reach, so a node whose outputs nobody reads is gone as soon as the last
reference to it is redirected. Random and communicating nodes are never merged, nor a node
with its copy made by ``recompute`` (that would undo it: the copy recomputes in backward what
the original computed in forward); copies merge among themselves.
"""
from __future__ import annotations

import numpy as np

from ..ir import Function
from ..ir.ops import Parameter
from .base import FunctionPass
from .recompute import is_recomputed_copy
from .rewrite import replace_outputs

_NEVER_MERGED = {"DropoutMask", "AllReduce", "Broadcast", "AllGather", "ReduceScatter", "Send", "Recv"}


def _attr_key(value):
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return tuple(_attr_key(v) for v in value)
    return value


class EliminateDuplicates(FunctionPass):
    name = "eliminate_duplicates"

    def __init__(self):
        self.removed = 0

    def run(self, function: Function) -> bool:
        canonical = {}
        replacements = {}
        for node in function.ordered_nodes():
            if isinstance(node, Parameter) or node.op_type in _NEVER_MERGED:
                continue
            inputs = []
            for i in node.inputs:
                i = replacements.get((i.node.id, i.index), i)
                inputs.append((i.node.id, i.index))
            key = (node.op_type, is_recomputed_copy(node), tuple(inputs),
                   tuple(sorted((k, _attr_key(v)) for k, v in node.attrs.items())))
            first = canonical.setdefault(key, node)
            if first is not node:
                for k in range(len(node.output_types)):
                    replacements[(node.id, k)] = first.output(k)
                self.removed += 1
        replace_outputs(function, replacements)
        return bool(replacements)
