"""Shorthands for building elementwise expressions from IR primitives in converters.

Each returns an ``Output``; ``c(value, like)`` is a constant in ``like``'s dtype.
"""
from __future__ import annotations

from ...ir import Output, ops
from .helpers import constant


# --- the slots of unary ops and their grads (X, Out, Out@GRAD -> Out, X@GRAD) in both IRs' spellings ---
def x_input(ctx) -> Output:
    return ctx.input("X", "x")


def out_input(ctx) -> Output:
    """A grad op's forward output, for the grads that depend on it."""
    return ctx.input("Out", "out")


def dout_input(ctx) -> Output:
    return ctx.input("Out@GRAD", "out_grad")


def set_out(ctx, value: Output):
    ctx.set_output(("Out", "out"), value)


def set_dx(ctx, value: Output):
    ctx.set_output(("X@GRAD", "x_grad"), value)


def c(value, like: Output) -> Output:
    return constant(value, like.dtype)


def add(a, b):
    return ops.Add(a, b).output()


def sub(a, b):
    return ops.Subtract(a, b).output()


def mul(a, b):
    return ops.Multiply(a, b).output()


def div(a, b):
    return ops.Divide(a, b).output()


def neg(a):
    return ops.Negative(a).output()


def exp(a):
    return ops.Exp(a).output()


def log(a):
    return ops.Log(a).output()


def select(cond, a, b):
    return ops.Select(cond, a, b).output()


def gt(a, b):
    return ops.Greater(a, b).output()


def ge(a, b):
    return ops.GreaterEqual(a, b).output()


def lt(a, b):
    return ops.Less(a, b).output()


def le(a, b):
    return ops.LessEqual(a, b).output()


def as_dtype(mask, like: Output) -> Output:
    """A boolean mask as 0/1 in ``like``'s dtype (Paddle's ``.cast<T>()`` of a comparison)."""
    return ops.Convert(mask, dtype=like.dtype.value).output()


def sign(x: Output) -> Output:
    """-1, 0 or 1, as Eigen's sign (and Paddle's ``sign`` op)."""
    return select(gt(x, c(0, x)), c(1, x), select(lt(x, c(0, x)), c(-1, x), c(0, x)))
