"""Recompute (Paddle's ``recompute`` with ``checkpoints``): forward activations between
checkpoints are recomputed in the backward pass instead of kept from the forward pass.

Which values: as in Paddle's static recompute (``base/backward.py``,
``_append_backward_ops_with_checkpoints_``), whose segments run from the program's start to
the last checkpoint, every forward node that is an ancestor of a checkpoint, and none of whose
outputs is one, is *recomputed*: each backward node reading one of its outputs reads instead
the output of a copy of it (``Role.RECOMPUTE_COPY``, named ``recompute/<name>``), whose inputs are the copies of the
recomputed nodes it reads and the original values of everything else (checkpoints, parameters,
feeds, constants). Forward nodes keep reading the originals, so an original activation dies
with its last forward reader; its copy is born in backward. Values computed after the last
checkpoint (the loss head) are kept, as in Paddle.

Where the copies run: a function's order is a depth-first walk from its results
(``Function.ordered_nodes``), which both backends follow (the CPU backend's liveness keeps it
but for the collectives). The walk visits copies (``Role.RECOMPUTE_COPY``) after every other
input of their reader, so a copy runs just before the first backward node that needs it, once
the gradient flowing into that node exists: not at the end of the forward pass, which would keep
it alive as long as the original. Their lifetimes, and so the CPU backend's arena
(``memory_plan``), shrink accordingly.

Bitwise the same: a copy is the same op with the same attributes on the same input values, so
the same kernel computes the same bits. The CPU backend's ``eliminate_duplicates`` never merges
a copy with an original (which would undo this pass). Two kinds of node are never copied and
are read by the copies from the forward pass: ``DropoutMask`` (a redrawn mask would differ:
the mask is kept, as if it were a checkpoint) and collectives (a statistics AllReduce of
sync_batch_norm would communicate again; its result is kept).

The forward nodes are those the converters of forward ops made (``ConversionSession``
records them): IR nodes carry no op role, and ancestry alone cannot tell the forward pass
from the backward (Paddle's gradient ops read forward values).
"""
from __future__ import annotations

from ..ir import Function, Output
from ..ir.ops.collective import COLLECTIVE_OPS
from ..ir.ops import Constant, Parameter
from ..ir.roles import Role
from .base import FunctionPass

# Never recomputed: a copy would draw another mask, or communicate again.
KEPT_OPS = frozenset({"DropoutMask"}) | frozenset(COLLECTIVE_OPS)
# The copies' names, unique and readable in dumps; their role says what they are.
RECOMPUTE_PREFIX = "recompute/"


def is_recomputed_copy(node) -> bool:
    return node.role is Role.RECOMPUTE_COPY


class Recompute(FunctionPass):
    """``checkpoints``: forward values to keep; ``forward``: ids of the forward nodes.

    After ``run``: ``recomputed`` (names of the forward nodes copied into backward),
    ``redirected`` (backward inputs now reading a copy)."""

    name = "recompute"

    def __init__(self, checkpoints: list[Output], forward: set[int]):
        self.checkpoints = list(checkpoints)
        self.forward = set(forward)
        self.recomputed: list[str] = []
        self.redirected = 0

    def run(self, function: Function) -> bool:
        checkpoint_nodes = {c.node.id for c in self.checkpoints}
        # Forward ancestors of the checkpoints: every path up from one ends at graph inputs.
        segment: set[int] = set()
        seen: set[int] = set()
        stack = [i.node for c in self.checkpoints for i in c.node.inputs]
        while stack:
            node = stack.pop()
            if node.id in seen or node.id in checkpoint_nodes:
                continue
            seen.add(node.id)
            if node.id not in self.forward or isinstance(node, (Parameter, Constant)):
                continue
            if node.op_type not in KEPT_OPS:
                segment.add(node.id)
            stack.extend(i.node for i in node.inputs)  # a kept node's inputs may be read in backward too
        if not segment:
            return False

        order = function.ordered_nodes()
        backward = [n for n in order if n.id not in self.forward and not isinstance(n, (Parameter, Constant))]
        # The recomputed nodes backward needs, directly or through other copies.
        needed: set[int] = set()
        stack = [i.node for n in backward for i in n.inputs if i.node.id in segment]
        while stack:
            node = stack.pop()
            if node.id in needed:
                continue
            needed.add(node.id)
            stack.extend(i.node for i in node.inputs if i.node.id in segment)
        if not needed:
            return False

        copies = {}
        for node in order:  # inputs before users: a copy's inputs exist when it is made
            if node.id not in needed:
                continue
            inputs = [copies[i.node.id].output(i.index) if i.node.id in copies else i for i in node.inputs]
            copies[node.id] = type(node)(*inputs, name=RECOMPUTE_PREFIX + node.name, **node.attrs)
            copies[node.id].role = Role.RECOMPUTE_COPY
            self.recomputed.append(node.name)
        for node in backward:
            for k, value in enumerate(node.inputs):
                if value.node.id in copies:
                    node.inputs[k] = copies[value.node.id].output(value.index)
                    self.redirected += 1
        return True
