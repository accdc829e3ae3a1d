"""Comparisons (equal, less_than, ...) and logical ops; boolean results, no gradients."""
from __future__ import annotations

from ...ir import ops
from .helpers import align_for_axis

_BINARY = {
    "equal": ops.Equal, "not_equal": ops.NotEqual, "less_than": ops.Less, "less_equal": ops.LessEqual,
    "greater_than": ops.Greater, "greater_equal": ops.GreaterEqual,
    "logical_and": ops.LogicalAnd, "logical_or": ops.LogicalOr,
}


def compare(ctx):
    """All binary comparison and logical ops share this converter; the table picks the op by name.
    Legacy programs may carry the elementwise ``axis`` attribute."""
    x, y = ctx.input("X", "x"), ctx.input("Y", "y")
    y = align_for_axis(x, y, int(ctx.attr("axis", default=-1)))
    ctx.set_output(("Out", "out"), _BINARY[ctx.op_type.removeprefix("pd_op.")](x, y).output())


def logical_not(ctx):
    ctx.set_output(("Out", "out"), ops.LogicalNot(ctx.input("X", "x")).output())
