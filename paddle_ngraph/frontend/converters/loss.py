"""softmax_with_cross_entropy (legacy) / cross_entropy_with_softmax (PIR), with the grad."""
from __future__ import annotations

from ...ir import ops


def _attrs(ctx):
    if not ctx.attr("use_softmax", default=True):
        raise ctx.fail("use_softmax=False (input already a probability) is not supported")
    return dict(axis=int(ctx.attr("axis", default=-1)), soft_label=bool(ctx.attr("soft_label", default=False)),
                ignore_index=int(ctx.attr("ignore_index", default=-100)))


def softmax_with_cross_entropy(ctx):
    node = ops.SoftmaxCrossEntropy(ctx.input("Logits", "input"), ctx.input("Label", "label"), **_attrs(ctx))
    ctx.set_output(("Softmax", "softmax"), node.output(0))
    ctx.set_output(("Loss", "loss"), node.output(1))


def softmax_with_cross_entropy_grad(ctx):
    node = ops.SoftmaxCrossEntropyBackprop(
        ctx.input("Softmax", "softmax"), ctx.input("Label", "label"), ctx.input("Loss@GRAD", "loss_grad"), **_attrs(ctx))
    ctx.set_output(("Logits@GRAD", "input_grad"), node.output())
