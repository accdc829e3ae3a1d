"""Activations and their grads."""
from __future__ import annotations

from ...ir import ops


def relu(ctx):
    ctx.set_output(("Out", "out"), ops.Relu(ctx.input("X", "x")).output())


def relu_grad(ctx):
    ctx.set_output(("X@GRAD", "x_grad"), ops.ReluBackprop(ctx.input("Out", "out"), ctx.input("Out@GRAD", "out_grad")).output())
