"""Losses and their grads: softmax_with_cross_entropy (legacy) / cross_entropy_with_softmax (PIR),
also with use_softmax=False (cross-entropy on probabilities, on any class axis), the legacy
(fluid) cross_entropy and cross_entropy2 on probabilities, huber_loss (smooth_l1),
sigmoid_cross_entropy_with_logits (BCEWithLogits), bce_loss, kldiv_loss, log_loss, nll_loss
and label_smooth, after Paddle's CPU kernels.

cross_entropy and cross_entropy2 have no PIR counterpart: Paddle 3 expresses them as
cross_entropy_with_softmax (use_softmax=False), which F.cross_entropy(..., use_softmax=False)
emits in both IRs (softmax_with_cross_entropy with use_softmax=False in legacy).
"""
from __future__ import annotations

import numpy as np

from ...ir import ops
from ...ir.types import DType, normalize_axis
from . import arith as a
from .helpers import constant
from .registry import converter


def _softmax_ce_attrs(ctx):
    return dict(axis=int(ctx.attr("axis", default=-1)), soft_label=bool(ctx.attr("soft_label", default=False)),
                ignore_index=int(ctx.attr("ignore_index", default=-100)))


def _uses_softmax(ctx) -> bool:
    return bool(ctx.attr("use_softmax", default=True))


@converter("softmax_with_cross_entropy", "pd_op.cross_entropy_with_softmax")
def softmax_with_cross_entropy(ctx):
    """use_softmax=False (F.cross_entropy on probabilities, the softmax + cross_entropy pattern of
    Paddle's examples): Paddle's kernel takes the log of the input itself and copies the input to
    the Softmax output."""
    logits, label = ctx.input("Logits", "input"), ctx.input("Label", "label")
    if not _uses_softmax(ctx):
        attrs = _probability_ce_attrs(ctx, logits, label)
        ctx.set_output(("Softmax", "softmax"), logits)
        ctx.set_output(("Loss", "loss"), _on_last_axis(ctx, logits, label, lambda x, y: ops.CrossEntropy(
            x, y, soft_label=attrs["soft_label"], ignore_index=attrs["ignore_index"]).output(0)))
        return
    node = ops.SoftmaxCrossEntropy(logits, label, **_softmax_ce_attrs(ctx))
    ctx.set_output(("Softmax", "softmax"), node.output(0))
    ctx.set_output(("Loss", "loss"), node.output(1))


@converter("softmax_with_cross_entropy_grad", "pd_op.cross_entropy_with_softmax_grad")
def softmax_with_cross_entropy_grad(ctx):
    """use_softmax=False: -dloss / x at the label (hard labels; 0 at ignored ones) or
    -dloss * label / x (soft labels), x being the Softmax input (the forward's input)."""
    softmax, label, dloss = ctx.input("Softmax", "softmax"), ctx.input("Label", "label"), \
        ctx.input("Loss@GRAD", "loss_grad")
    if not _uses_softmax(ctx):
        attrs = _probability_ce_attrs(ctx, softmax, label)
        dloss = _axis_last(ctx, dloss)
        grad = _on_last_axis(ctx, softmax, label, lambda x, y: ops.CrossEntropyBackprop(
            x, y, dloss, soft_label=attrs["soft_label"], ignore_index=attrs["ignore_index"]).output())
        ctx.set_output(("Logits@GRAD", "input_grad"), grad)
        return
    node = ops.SoftmaxCrossEntropyBackprop(softmax, label, dloss, **_softmax_ce_attrs(ctx))
    ctx.set_output(("Logits@GRAD", "input_grad"), node.output())


# --- use_softmax=False: CrossEntropy on the class axis moved last -------------------------------------------
def _probability_ce_attrs(ctx, x, label) -> dict:
    attrs = _softmax_ce_attrs(ctx)
    if not attrs["soft_label"] and label.dtype not in (DType.int64, DType.int32):
        raise ctx.fail(f"hard labels must be int64 or int32, got {label.type}")
    if x.type.rank < 1:
        raise ctx.fail(f"input must have a class axis, got {x.type}")
    return attrs


def _last_axis_permutation(ctx, rank: int) -> list[int] | None:
    """The permutation that moves ``axis`` last (None when it already is)."""
    axis = normalize_axis(int(ctx.attr("axis", default=-1)), rank)
    if axis == rank - 1:
        return None
    return [d for d in range(rank) if d != axis] + [axis]


def _axis_last(ctx, value):
    perm = _last_axis_permutation(ctx, value.type.rank)
    return value if perm is None else ops.Transpose(value, perm=perm).output()


def _on_last_axis(ctx, x, label, compute):
    """``compute(x, label)`` with the class axis moved last, its result moved back: Paddle's loops
    walk the class axis with a stride, which is the same arithmetic per element."""
    perm = _last_axis_permutation(ctx, x.type.rank)
    if perm is None:
        return compute(x, label)
    out = compute(_axis_last(ctx, x), _axis_last(ctx, label))
    return ops.Transpose(out, perm=[perm.index(d) for d in range(len(perm))]).output()


def _cross_entropy_attrs(ctx, soft_label: bool) -> dict:
    return dict(soft_label=soft_label, ignore_index=int(ctx.attr("ignore_index", default=-100)))


@converter("cross_entropy")
def cross_entropy(ctx):
    attrs = _cross_entropy_attrs(ctx, bool(ctx.attr("soft_label", default=False)))
    node = ops.CrossEntropy(ctx.input("X"), ctx.input("Label"), **attrs)
    ctx.set_output("Y", node.output(0))


@converter("cross_entropy_grad")
def cross_entropy_grad(ctx):
    attrs = _cross_entropy_attrs(ctx, bool(ctx.attr("soft_label", default=False)))
    grad = ops.CrossEntropyBackprop(ctx.input("X"), ctx.input("Label"), ctx.input("Y@GRAD"), **attrs)
    ctx.set_output("X@GRAD", grad.output())


@converter("cross_entropy2")
def cross_entropy2(ctx):
    """Hard labels only. XShape only carries X's shape to the grad, so we bind it to X itself."""
    x = ctx.input("X")
    node = ops.CrossEntropy(x, ctx.input("Label"), **_cross_entropy_attrs(ctx, False))
    ctx.set_output("Y", node.output(0))
    ctx.set_output("MatchX", node.output(1))
    ctx.set_output("XShape", x)


@converter("cross_entropy_grad2")
def cross_entropy_grad2(ctx):
    # Paddle computes -dY / MatchX at the label; MatchX is X at the label, which is what
    # CrossEntropyBackprop divides by. X comes through XShape (see cross_entropy2).
    grad = ops.CrossEntropyBackprop(ctx.input("XShape"), ctx.input("Label"), ctx.input("Y@GRAD"),
                                    **_cross_entropy_attrs(ctx, False))
    ctx.set_output("X@GRAD", grad.output())


def _abs(x):
    return ops.Abs(x).output()


# --- huber_loss: residual = label - input ----------------------------------------------------------------
def _delta(ctx, like):
    return a.c(float(ctx.attr("delta", default=1.0)), like)


@converter("huber_loss", "pd_op.huber_loss")
def huber_loss(ctx):
    """0.5 * r^2 where |r| <= delta, else delta * (|r| - 0.5 * delta); Residual kept for the grad."""
    x, y = ctx.input("X", "input"), ctx.input("Y", "label")
    r = a.sub(y, x)
    delta, half = _delta(ctx, r), a.c(0.5, r)
    quadratic = a.mul(a.mul(half, r), r)
    linear = a.mul(delta, a.sub(_abs(r), a.mul(half, delta)))
    ctx.set_output(("Residual", "residual"), r)
    ctx.set_output(("Out", "out"), a.select(a.le(_abs(r), delta), quadratic, linear))


@converter("huber_loss_grad", "pd_op.huber_loss_grad")
def huber_loss_grad(ctx):
    """d/dlabel = dout * (r inside the quadratic zone, else delta * sign(r)); d/dinput its negation."""
    r, dout = ctx.input("Residual", "residual"), ctx.input("Out@GRAD", "out_grad")
    delta = _delta(ctx, r)
    outer = a.select(a.gt(r, a.c(0, r)), delta, a.neg(delta))
    slope = a.select(a.le(_abs(r), delta), r, outer)
    if ctx.has_output("X@GRAD", "input_grad"):
        ctx.set_output(("X@GRAD", "input_grad"), a.mul(dout, a.neg(slope)))
    if ctx.has_output("Y@GRAD", "label_grad"):
        ctx.set_output(("Y@GRAD", "label_grad"), a.mul(dout, slope))


# --- sigmoid_cross_entropy_with_logits -----------------------------------------------------------------
def _sce_inputs(ctx):
    x, label = ctx.input("X", "x"), ctx.input("Label", "label")
    pos_weight = ctx.input("pos_weight") if ctx.has_input("pos_weight") else None
    ignore = int(ctx.attr("ignore_index", default=-100))
    # Paddle compares static_cast<int>(label) (truncation toward 0) with ignore_index.
    as_int = ops.Convert(label, dtype="int32").output()
    ignored = ops.Equal(as_int, constant(ignore, DType.int32)).output()
    return x, label, pos_weight, ignored, ignore


def _sce_normalize(ctx, value, label, ignore):
    """normalize=True divides by the count of labels that differ from ignore_index (by > 1e-6)."""
    if not ctx.attr("normalize", default=False):
        return value
    counted = a.gt(_abs(a.sub(label, a.c(ignore, label))), a.c(1e-6, label))
    count = ops.ReduceSum(a.as_dtype(counted, label), axes=[], keep_dims=False).output()
    return a.div(value, count)


@converter("sigmoid_cross_entropy_with_logits", "pd_op.sigmoid_cross_entropy_with_logits")
def sigmoid_cross_entropy_with_logits(ctx):
    x, label, pw, ignored, ignore = _sce_inputs(ctx)
    zero = a.c(0, x)
    if pw is None:
        # max(x, 0) - x * label + log(1 + exp(-|x|))
        term3 = a.log(a.add(a.c(1, x), a.exp(a.neg(_abs(x)))))
        loss = a.add(a.sub(ops.Maximum(x, zero).output(), a.mul(x, label)), term3)
    else:
        # (1 - label) * x + pos_weight * (log(exp(-m) + exp(-x - m)) + m), m = max(-x, 0)
        m = ops.Maximum(a.neg(x), zero).output()
        term2 = a.log(a.add(a.exp(a.neg(m)), a.exp(a.sub(a.neg(x), m))))
        loss = a.add(a.mul(a.sub(a.c(1, x), label), x), a.mul(pw, a.add(term2, m)))
    loss = a.select(ignored, zero, loss)
    ctx.set_output(("Out", "out"), _sce_normalize(ctx, loss, label, ignore))


@converter("sigmoid_cross_entropy_with_logits_grad", "pd_op.sigmoid_cross_entropy_with_logits_grad")
def sigmoid_cross_entropy_with_logits_grad(ctx):
    x, label, pw, ignored, ignore = _sce_inputs(ctx)
    dout, zero, one = ctx.input("Out@GRAD", "out_grad"), a.c(0, x), a.c(1, x)
    if pw is None:
        # (x > 0) - label + (-e * sign') / (1 + e), e = exp(-|x|), sign' = 1 for x >= 0 else -1
        e = a.exp(a.neg(_abs(x)))
        abs_grad = a.select(a.ge(x, zero), one, a.c(-1, x))
        term3 = a.div(a.mul(a.neg(e), abs_grad), a.add(one, e))
        diff = a.add(a.sub(a.as_dtype(a.gt(x, zero), x), label), term3)
    else:
        negative = a.lt(x, zero)
        m = a.select(negative, a.neg(x), zero)
        term1 = a.select(negative, a.c(-1, x), zero)
        down1, down2 = a.exp(a.neg(m)), a.exp(a.sub(a.neg(x), m))
        term2 = a.add(a.mul(down1, a.neg(term1)), a.mul(down2, a.sub(a.c(-1, x), term1)))
        diff = a.add(a.mul(pw, a.add(a.div(term2, a.add(down1, down2)), term1)), a.sub(one, label))
    grad = a.select(ignored, zero, a.mul(dout, diff))
    ctx.set_output(("X@GRAD", "x_grad"), _sce_normalize(ctx, grad, label, ignore))


# --- bce_loss on probabilities -------------------------------------------------------------------------------
@converter("bce_loss", "pd_op.bce_loss")
def bce_loss(ctx):
    """(label - 1) * max(log(1 - x), -100) - label * max(log(x), -100)."""
    x, label = ctx.input("X", "input"), ctx.input("Label", "label")
    floor = a.c(-100, x)
    log_1mx = ops.Maximum(a.log(a.sub(a.c(1, x), x)), floor).output()
    log_x = ops.Maximum(a.log(x), floor).output()
    ctx.set_output(("Out", "out"), a.sub(a.mul(a.sub(label, a.c(1, x)), log_1mx), a.mul(label, log_x)))


@converter("bce_loss_grad", "pd_op.bce_loss_grad")
def bce_loss_grad(ctx):
    """dout * (x - label) / max((1 - x) * x, 1e-12)."""
    x, label, dout = ctx.input("X", "input"), ctx.input("Label", "label"), ctx.input("Out@GRAD", "out_grad")
    denom = ops.Maximum(a.mul(a.sub(a.c(1, x), x), x), a.c(1e-12, x)).output()
    ctx.set_output(("X@GRAD", "input_grad"), a.mul(dout, a.div(a.sub(x, label), denom)))


# --- kldiv_loss ----------------------------------------------------------------------------------------------
_KLDIV_REDUCTIONS = ("none", "batchmean", "mean", "sum")


def _kldiv_attrs(ctx):
    reduction = ctx.attr("reduction", default="mean")
    if reduction not in _KLDIV_REDUCTIONS:
        raise ctx.fail(f"reduction {reduction!r} is not supported ({', '.join(_KLDIV_REDUCTIONS)})")
    return reduction, bool(ctx.attr("log_target", default=False))


def _batch_size(ctx, x):
    if x.type.rank == 0 or x.shape[0] < 0:
        raise ctx.fail(f"reduction batchmean needs a static batch dimension, got {x.type}")
    return x.shape[0]


@converter("kldiv_loss", "pd_op.kldiv_loss")
def kldiv_loss(ctx):
    """log_target: exp(t) * (t - x); else t * (log(t) - x) where t > 0, 0 elsewhere; then reduced."""
    x, t = ctx.input("X", "x"), ctx.input("Target", "label")
    reduction, log_target = _kldiv_attrs(ctx)
    if log_target:
        loss = a.mul(a.exp(t), a.sub(t, x))
    else:
        loss = a.select(a.gt(t, a.c(0, t)), a.mul(t, a.sub(a.log(t), x)), a.c(0, t))
    if reduction == "sum":
        loss = ops.ReduceSum(loss, axes=[]).output()
    elif reduction == "mean":
        loss = ops.ReduceMean(loss, axes=[]).output()
    elif reduction == "batchmean":
        loss = a.div(ops.ReduceSum(loss, axes=[]).output(), a.c(_batch_size(ctx, x), loss))
    ctx.set_output(("Loss", "out"), loss)


@converter("kldiv_loss_grad", "pd_op.kldiv_loss_grad")
def kldiv_loss_grad(ctx):
    """-exp(t) * dout (log_target) or -t * dout where t > 0; / numel (mean) or / batch (batchmean)."""
    x, t, dout = ctx.input("X", "x"), ctx.input("Target", "label"), ctx.input("Loss@GRAD", "out_grad")
    reduction, log_target = _kldiv_attrs(ctx)
    if dout.shape != t.shape:
        dout = ops.BroadcastTo(dout, t).output()
    if log_target:
        grad = a.mul(a.mul(a.c(-1, t), a.exp(t)), dout)
    else:
        grad = a.select(a.gt(t, a.c(0, t)), a.mul(a.mul(a.c(-1, t), t), dout), a.c(0, t))
    if reduction == "mean":
        if not x.type.is_static:
            raise ctx.fail(f"reduction mean needs a static shape, got {x.type}")
        grad = a.div(grad, a.c(int(np.prod(x.shape)), grad))
    elif reduction == "batchmean":
        grad = a.div(grad, a.c(_batch_size(ctx, x), grad))
    ctx.set_output(("X@GRAD", "x_grad"), grad)


# --- log_loss ------------------------------------------------------------------------------------------------
def _log_loss_inputs(ctx):
    pred, label = ctx.input("Predicted", "input"), ctx.input("Labels", "label")
    return pred, label, a.c(float(ctx.attr("epsilon", default=1e-4)), pred)


@converter("log_loss", "pd_op.log_loss")
def log_loss(ctx):
    """-label * log(pred + eps) - (1 - label) * log(1 - pred + eps)."""
    pred, label, eps = _log_loss_inputs(ctx)
    one = a.c(1, pred)
    pos = a.neg(a.mul(label, a.log(a.add(pred, eps))))
    neg = a.mul(a.sub(one, label), a.log(a.add(a.sub(one, pred), eps)))
    ctx.set_output(("Loss", "out"), a.sub(pos, neg))


@converter("log_loss_grad", "pd_op.log_loss_grad")
def log_loss_grad(ctx):
    """dloss * (-(label / (pred + eps)) + (1 - label) / (1 - pred + eps))."""
    pred, label, eps = _log_loss_inputs(ctx)
    dloss, one = ctx.input("Loss@GRAD", "out_grad"), a.c(1, pred)
    slope = a.add(a.neg(a.div(label, a.add(pred, eps))), a.div(a.sub(one, label), a.add(a.sub(one, pred), eps)))
    ctx.set_output(("Predicted@GRAD", "input_grad"), a.mul(dloss, slope))


# --- nll_loss: x [N, C] with label [N], or [N, C, H, W] with label [N, H, W] ------------------------------
_NLL_REDUCTIONS = ("none", "mean", "sum")


def _nll_picked_weight(ctx):
    """[N, C, ...] holding the label's class weight (1 without Weight) at the label, 0 elsewhere
    and at ignored labels: the one-hot selection Paddle's loops make."""
    x, label = ctx.input("X", "input"), ctx.input("Label", "label")
    if x.type.rank not in (2, 4) or x.shape[1] < 0:
        raise ctx.fail(f"input must be [N, C] or [N, C, H, W] with a static C, got {x.type}")
    reduction = ctx.attr("reduction", default="mean")
    if reduction not in _NLL_REDUCTIONS:
        raise ctx.fail(f"reduction {reduction!r} is not supported ({', '.join(_NLL_REDUCTIONS)})")
    classes = x.shape[1]
    spread = [1, classes] + [1] * (x.type.rank - 2)
    label = ops.Reshape(label, shape=[label.shape[0] if label.shape[0] >= 0 else -1, 1] + list(label.shape[1:])).output()
    class_ids = constant(np.arange(classes).reshape(spread), label.dtype)
    ignore = constant(int(ctx.attr("ignore_index", default=-100)), label.dtype)
    chosen = ops.LogicalAnd(ops.Equal(label, class_ids).output(), ops.NotEqual(label, ignore).output()).output()
    weight = ops.Reshape(ctx.input("Weight", "weight"), shape=spread).output() if ctx.has_input("Weight", "weight") \
        else a.c(1, x)
    return x, a.select(chosen, weight, a.c(0, x)), reduction


def _nll_label_check(ctx, x):
    """0, through a node that fails as Paddle's kernel does on a label outside [0, C) other than
    ``ignore_index``: the one-hot selection of ``_nll_picked_weight`` would silently pick nothing
    for it. The hard-label CrossEntropy checks each label; on ones its loss is -log(1) = 0, so adding
    it changes no value of the loss."""
    label = ctx.input("Label", "label")
    classes = x.shape[1]
    flat = ops.Reshape(label, shape=[-1, 1]).output()
    rows = ops.Equal(flat, constant(np.arange(classes).reshape(1, classes), label.dtype)).output()  # [M, C]
    ones = a.select(rows, a.c(1, x), a.c(1, x))
    check = ops.CrossEntropy(ones, flat, ignore_index=int(ctx.attr("ignore_index", default=-100)),
                             name=f"nll_loss_label_check_{ctx.op.index}")
    return ops.ReduceSum(check.output(0), axes=[]).output()


@converter("nll_loss", "pd_op.nll_loss")
def nll_loss(ctx):
    x, picked, reduction = _nll_picked_weight(ctx)
    loss = a.neg(ops.ReduceSum(a.mul(x, picked), axes=[1]).output())  # -x[label] * w[label]
    loss = a.add(loss, _nll_label_check(ctx, x))
    if reduction == "none":
        ctx.set_output(("Out", "out"), loss)
        ctx.set_output(("Total_weight", "total_weight"), a.c(0, x))
        return
    total = ops.ReduceSum(loss, axes=[]).output()
    total_weight = ops.ReduceSum(picked, axes=[]).output()
    if reduction == "mean":  # Paddle leaves the sum undivided when the weights sum to 0
        nonzero = ops.NotEqual(total_weight, a.c(0, x)).output()
        total = a.select(nonzero, a.div(total, total_weight), total)
    ctx.set_output(("Out", "out"), total)
    ctx.set_output(("Total_weight", "total_weight"), total_weight)


@converter("nll_loss_grad", "pd_op.nll_loss_grad")
def nll_loss_grad(ctx):
    """-dout * w[label] at the label (dout per element for none), / total_weight for mean."""
    x, picked, reduction = _nll_picked_weight(ctx)
    dout = ctx.input("Out@GRAD", "out_grad")
    if reduction == "none":
        dout = ops.Reshape(dout, shape=[dout.shape[0] if dout.shape[0] >= 0 else -1, 1] + list(dout.shape[1:])).output()
    grad = a.mul(a.neg(dout), picked)
    if reduction == "mean":
        grad = a.div(grad, ctx.input("Total_weight", "total_weight"))
    ctx.set_output(("X@GRAD", "input_grad"), grad)


# --- label_smooth: (1 - epsilon) * label + epsilon * prior (or epsilon / classes) ------------------------
def _label_smooth_keep(ctx, like):
    """1 - epsilon, computed in float32 (epsilon is a float attribute) and then cast, as Paddle does."""
    return a.c(float(np.float32(1) - np.float32(ctx.attr("epsilon", default=0.1))), like)


@converter("label_smooth", "pd_op.label_smooth")
def label_smooth(ctx):
    label = ctx.input("X", "label")
    epsilon = np.float32(ctx.attr("epsilon", default=0.1))
    classes = label.shape[-1] if label.type.rank else -1
    if classes < 1:
        raise ctx.fail(f"label needs a static, non-empty last dim, got {label.type}")
    kept = a.mul(_label_smooth_keep(ctx, label), label)
    if ctx.has_input("PriorDist", "prior_dist"):
        spread = a.mul(a.c(float(epsilon), label), ctx.input("PriorDist", "prior_dist"))
    else:
        spread = a.c(float(epsilon / np.float32(classes)), label)
    ctx.set_output(("Out", "out"), a.add(kept, spread))


@converter("label_smooth_grad", "pd_op.label_smooth_grad")
def label_smooth_grad(ctx):
    dout = ctx.input("Out@GRAD", "out_grad")
    ctx.set_output(("X@GRAD", "label_grad"), a.mul(_label_smooth_keep(ctx, dout), dout))
