"""The ops of Paddle's legacy tensor-parallel programs (``paddle.distributed.split``, fleet's
``mp_ops``): collectives over the ring an op names, and the local halves of the sharded layers.

Each op names its group by ``ring_id``; the session's ``RankLayout`` (ir/groups.py) maps ring
ids to groups of ranks (legacy programs: 0 the model-parallel group, 1 every rank, 2 the
data-parallel group, without model parallelism ring 0 is every rank; PIR programs captured from
dygraph: the ids of Paddle's communication groups, read from Paddle's group registry). Paddle
spells the backward of these ops out itself: ``c_identity``'s gradient is an ``all_reduce`` (sum)
over the ring (in PIR an ``mp_allreduce_sum``, which the dygraph capture supplies:
frontend/tensor_parallel_capture.py), ``mp_allreduce_sum``'s a ``c_identity``, ``c_concat``'s a
``c_split`` and ``c_embedding``'s ``c_embedding_grad``; so each converter here is a forward
computation. The PIR ops (``pd_op.<op>``) share the converters of their legacy namesakes.

- ``c_identity``: the identity (its forward; Paddle emits its gradient as an AllReduce).
- ``mp_allreduce_sum``, ``all_reduce`` (by its ``reduce_type``): AllReduce over the ring. (Paddle
  3.3.1 registers no ``c_allreduce_*`` op any more: its programs use these two.)
- ``c_concat``: AllGather along the last axis, in rank order; ``c_split``: this rank's slice of
  the last axis (no communication).
- ``c_embedding`` (``start_index``): the lookup of the ids in [start_index, start_index + rows) of
  this rank's table shard; other ids read zeros (the caller sums the shards' outputs over the
  ring). ``c_embedding_grad``: the shard's rows accumulate the gradients of its ids only.
- ``c_softmax_with_cross_entropy`` (+ grad): softmax cross entropy over logits whose classes are
  sharded over the ring (``rank`` * classes is this rank's first), with AllReduces of the row
  maximum, the target logit and the sum of exponentials.
"""
from __future__ import annotations

import numpy as np

from ...ir import Output, ops
from ...ir.groups import group_size
from .helpers import constant
from .registry import converter

# Paddle's ReduceOp (paddle.distributed.ReduceOp): all_reduce's reduce_type.
REDUCE_TYPES = {0: "sum", 1: "max", 2: "min", 3: "prod", 4: "avg"}


def ring_group(ctx) -> tuple[int, ...]:
    """The group of ranks of the op's ``ring_id``."""
    ring_id = int(ctx.attr("ring_id", default=0))
    try:
        return ctx.session.layout.ring(ring_id)
    except KeyError:
        raise ctx.fail(f"ring_id {ring_id} is none of the rings known here ({ctx.session.layout.ring_names()})"
                       ) from None


def _checked_nranks(ctx, group) -> int:
    """The op's ``nranks``, which must be the size of its ring's group."""
    size = group_size(group, ctx.session.layout.nranks)
    nranks = int(ctx.attr("nranks", default=size))
    if nranks != size:
        raise ctx.fail(f"nranks {nranks}, but ring {ctx.attr('ring_id', default=0)} has {size} rank(s) here "
                       f"(is tensor_parallel_degree / mp_degree set in the strategy?)")
    return nranks


def _allreduce(ctx, reduction: str):
    x = ctx.input("X", "x")
    node = ops.AllReduce(x, reduction=reduction, group=ring_group(ctx), name=f"{ctx.op_type}_{x.node.name}")
    ctx.set_output(("Out", "out"), node.output())


@converter("c_identity", "pd_op.c_identity")
def c_identity(ctx):
    ctx.set_output(("Out", "out"), ctx.input("X", "x"))


@converter("mp_allreduce_sum", "pd_op.mp_allreduce_sum")
def mp_allreduce_sum(ctx):
    _allreduce(ctx, "sum")


@converter("all_reduce")
def all_reduce(ctx):
    reduce_type = int(ctx.attr("reduce_type", default=0))
    if reduce_type not in REDUCE_TYPES:
        raise ctx.fail(f"reduce_type {reduce_type} is none of {REDUCE_TYPES}")
    _allreduce(ctx, REDUCE_TYPES[reduce_type])


@converter("c_concat", "pd_op.c_concat")
def c_concat(ctx):
    x = ctx.input("X", "x")
    group = ring_group(ctx)
    nranks = _checked_nranks(ctx, group)
    node = ops.AllGather(x, world_size=nranks, axis=-1, group=group, name=f"c_concat_{x.node.name}")
    ctx.set_output(("Out", "out"), node.output())


@converter("c_split", "pd_op.c_split")
def c_split(ctx):
    x = ctx.input("X", "x")
    nranks = _checked_nranks(ctx, ring_group(ctx))
    rank = int(ctx.attr("rank", default=0))
    width = x.shape[-1]
    if width < 0 or width % nranks:
        raise ctx.fail(f"the last axis of {x.type} must be static and divisible by nranks {nranks}")
    if not 0 <= rank < nranks:
        raise ctx.fail(f"rank {rank} is not below nranks {nranks}")
    part = width // nranks
    node = ops.Slice(x, axes=[x.type.rank - 1], starts=[rank * part], ends=[(rank + 1) * part])
    ctx.set_output(("Out", "out"), node.output())


# --- c_embedding: the lookup in this rank's rows of the table --------------------------------------
def _shard_ids(ctx, rows: int) -> Output:
    """The ids as rows of the shard, ``rows`` (the padding row of the widened table) where an id
    is not in the shard."""
    ids = ctx.input("Ids", "x")
    start = int(ctx.attr("start_index", default=0))
    local = ops.Subtract(ids, constant(start, ids.dtype)).output()
    inside = ops.LogicalAnd(ops.GreaterEqual(local, constant(0, ids.dtype)).output(),
                            ops.Less(local, constant(rows, ids.dtype)).output()).output()
    return ops.Select(inside, local, constant(rows, ids.dtype)).output()


def _widened(table: Output) -> Output:
    """The table with one zero row appended: what the ids outside the shard read."""
    zero_row = ops.Constant(np.zeros((1, table.shape[1]), dtype=table.dtype.numpy), dtype=table.dtype).output()
    return ops.Concat(table, zero_row, axis=0).output()


def _table(ctx) -> tuple[Output, int]:
    table = ctx.input("W", "weight")
    if table.type.rank != 2 or min(table.shape) < 0:
        raise ctx.fail(f"needs a static 2-D table, got {table.type}")
    return table, table.shape[0]


@converter("c_embedding", "pd_op.c_embedding")
def c_embedding(ctx):
    table, rows = _table(ctx)
    node = ops.EmbeddingLookup(_widened(table), _shard_ids(ctx, rows), padding_idx=rows)
    ctx.set_output(("Out", "out"), node.output())


@converter("c_embedding_grad", "pd_op.c_embedding_grad")
def c_embedding_grad(ctx):
    table, rows = _table(ctx)
    grad = ops.EmbeddingLookupBackprop(_widened(table), _shard_ids(ctx, rows), ctx.input("Out@GRAD", "out_grad"),
                                       padding_idx=rows).output()
    shard = ops.Slice(grad, axes=[0], starts=[0], ends=[rows]).output()
    ctx.set_output(("W@GRAD", "weight_grad"), shard)


# --- c_softmax_with_cross_entropy: softmax cross entropy over classes sharded across the ring ------
def _class_shard(ctx):
    """(logits, label, group, this rank's first class, the shard's classes) of the op, checked."""
    logits = ctx.input("Logits", "logits")
    label = ctx.input("Label", "label")
    group = ring_group(ctx)
    nranks = _checked_nranks(ctx, group)
    rank = int(ctx.attr("rank", default=0))
    classes = logits.shape[-1]
    if classes < 0 or not 0 <= rank < nranks:
        raise ctx.fail(f"needs logits with a static class axis and rank below nranks {nranks}; got {logits.type}, "
                       f"rank {rank}")
    if label.type.rank != logits.type.rank or label.shape[-1] != 1:
        raise ctx.fail(f"needs one hard label per row (label {label.type} for logits {logits.type}); soft "
                       f"multi-label targets are not supported")
    return logits, label, group, rank * classes, classes


def _target_mask(label: Output, start: int, classes: int) -> Output:
    """True at the column of each row's label, where the label is one of this shard's classes."""
    columns = ops.Constant(np.arange(start, start + classes, dtype=label.dtype.numpy), dtype=label.dtype).output()
    return ops.Equal(label, columns).output()


def _ignored(ctx, label: Output) -> Output:
    ignore_index = int(ctx.attr("ignore_index", default=-100))
    return ops.Equal(label, constant(ignore_index, label.dtype)).output()


@converter("c_softmax_with_cross_entropy", "pd_op.c_softmax_with_cross_entropy")
def c_softmax_with_cross_entropy(ctx):
    """As Paddle's kernel: the row maximum AllReduced (max), the target logit (after subtracting
    it) AllReduced (sum: one shard holds it, the others give 0), the sum of exponentials AllReduced
    (sum); loss = log(sum) - target, 0 for ignore_index; softmax = exp / sum."""
    logits, label, group, start, classes = _class_shard(ctx)
    last = logits.type.rank - 1

    def over_group(value, reduction, what):
        return ops.AllReduce(value, reduction=reduction, group=group, name=f"{ctx.op_type}_{what}_{value.node.name}"
                             ).output()

    row_max = over_group(ops.ReduceMax(logits, axes=[last], keep_dims=True).output(), "max", "max")
    shifted = ops.Subtract(logits, row_max).output()
    zero = constant(0, logits.dtype)
    picked = ops.Select(_target_mask(label, start, classes), shifted, zero).output()
    target = over_group(ops.ReduceSum(picked, axes=[last], keep_dims=True).output(), "sum", "target")
    exps = ops.Exp(shifted).output()
    total = over_group(ops.ReduceSum(exps, axes=[last], keep_dims=True).output(), "sum", "sum_exp")
    loss = ops.Subtract(ops.Log(total).output(), target).output()
    ctx.set_output(("Loss", "loss"), ops.Select(_ignored(ctx, label), zero, loss).output())
    inverse = ops.Divide(constant(1, logits.dtype), total).output()
    ctx.set_output(("Softmax", "softmax"), ops.Multiply(exps, inverse).output())


@converter("c_softmax_with_cross_entropy_grad", "pd_op.c_softmax_with_cross_entropy_grad")
def c_softmax_with_cross_entropy_grad(ctx):
    """(softmax - one-hot of the label within this shard) * the loss gradient of the row; rows of
    ignore_index get 0. No communication: the forward pass left each rank its shard's softmax."""
    softmax = ctx.input("Softmax", "softmax")
    label = ctx.input("Label", "label")
    dloss = ctx.input("Loss@GRAD", "loss_grad")
    nranks = _checked_nranks(ctx, ring_group(ctx))
    rank, classes = int(ctx.attr("rank", default=0)), softmax.shape[-1]
    if classes < 0 or not 0 <= rank < nranks or label.shape[-1] != 1:
        raise ctx.fail(f"needs a static class axis, rank below nranks {nranks} and one label per row; got softmax "
                       f"{softmax.type}, label {label.type}, rank {rank}")
    one_hot = ops.Convert(_target_mask(label, rank * classes, classes), dtype=softmax.dtype.value).output()
    grad = ops.Multiply(ops.Subtract(softmax, one_hot).output(), dloss).output()
    zero = constant(0, softmax.dtype)
    ctx.set_output(("Logits@GRAD", "logits_grad"), ops.Select(_ignored(ctx, label), zero, grad).output())
