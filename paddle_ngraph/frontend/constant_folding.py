"""The value of a small graph of constants, for converters that need an operand at conversion time.

Paddle computes slice bounds, reshape targets and the like from shapes at run time:
``j = paddle.shape(x)[1] - 1 - i`` then ``paddle.slice(x, axes=[1], starts=[j], ends=[j + 1])``
(a reversed recurrence in Paddle's own models). The shape converter makes a ``Constant`` of a static
shape, but the arithmetic after it (slice, subtract, stack, ...) makes ordinary nodes, so a converter
asking for the bounds found no ``Constant`` and refused the op: it ran in Paddle, its output lost its
static shape, and the ops reading that output were refused in turn. Such a graph depends on nothing
but constants; evaluating it here with the reference kernels gives the number Paddle's own kernels
compute (integer arithmetic on shapes), once, at conversion time.
"""
from __future__ import annotations

import numpy as np

from ..ir import Output
from ..ir.ops import Constant
from ..ir.ops.collective import COLLECTIVE_OPS

# Folding is for shapes and indices: a larger graph of constants is left as it is (its nodes then
# run on the engine at every step, as before).
MAX_FOLDED_ELEMENTS = 1024
# Ops whose result is not a function of their operands alone.
_NOT_FOLDABLE = COLLECTIVE_OPS | {"DropoutMask"}


def _constant_graph(value: Output) -> list | None:
    """The nodes ``value`` depends on, operands first, if each is a constant or a deterministic
    op of constants with small outputs; None otherwise (a graph input or a random op reached)."""
    order, seen, stack = [], set(), [(value.node, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if node.id in seen:
            continue
        seen.add(node.id)
        if not isinstance(node, Constant):
            if not node.inputs or node.op_type in _NOT_FOLDABLE:
                return None  # a Parameter (graph input), or not a function of its operands
            if any(int(np.prod(t.shape)) > MAX_FOLDED_ELEMENTS or not t.is_static for t in node.output_types):
                return None
        stack.append((node, True))
        stack.extend((i.node, False) for i in node.inputs)
    return order


def use_evaluator(evaluate) -> None:
    """Sets what computes a constant graph: ``evaluate(nodes) -> {node id: outputs}`` over nodes in
    order, or None where it has no kernel for one of them. The frontend sits below the backends
    (the layering contract in pyproject.toml), so the package wires in the INTERPRETER's reference
    kernels (``backends.interpreter.evaluate_nodes``) when it is imported (``paddle_ngraph/api.py``)."""
    global _EVALUATE
    _EVALUATE = evaluate


_EVALUATE = None


def folded_value(value: Output) -> np.ndarray | None:
    """``value`` computed now, if it depends on constants only (see the module's docstring)."""
    nodes = _constant_graph(value)
    if nodes is None or _EVALUATE is None:
        return None
    results = _EVALUATE(nodes)
    if results is None:
        return None
    return np.asarray(results[value.node.id][value.index])
