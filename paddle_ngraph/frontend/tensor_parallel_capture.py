"""What Paddle 3.3.1 lacks to trace fleet's tensor-parallel Layers into PIR with their backward.

``fleet.meta_parallel``'s layers (``ColumnParallelLinear``, ``RowParallelLinear``,
``VocabParallelEmbedding``, ``ParallelCrossEntropy``) call ``mp_ops``, whose PIR branches emit
``pd_op.c_identity``, ``mp_allreduce_sum``, ``c_concat`` and ``c_embedding``. Three gaps stop a
correct capture (measured on Paddle 3.3.1):

- ``pd_op.c_identity`` has no VJP (``core.has_vjp`` is False, its input has no gradient semantics
  and PIR marks its result ``stop_gradient``), so Paddle's PIR backward drops the gradient through
  it silently: everything upstream of a ``ColumnParallelLinear`` would get none. Its gradient is
  the AllReduce (sum) over its ring of the output gradient (Megatron's ``f``).
- ``mp_ops._c_split`` (``RowParallelLinear`` with ``input_is_parallel=False``) has no PIR branch:
  it appends a legacy op and fails on a PIR value. Here it is this rank's slice of the last axis of
  ``c_identity(x)``: the slice's gradient zero-pads, and the identity's AllReduce sums the ranks'
  disjoint slices into the whole gradient (what Megatron's AllGather computes).
- ``mp_ops._c_softmax_with_cross_entropy`` (``ParallelCrossEntropy``) has no PIR branch either;
  here it emits ``pd_op.c_softmax_with_cross_entropy``, which has a VJP.

``tensor_parallel_tracing()`` supplies the three while a Layer is traced (its forward and the
backward Paddle appends), and restores Paddle's functions afterwards. The engine's converters
(converters/collective.py) then run every op of the captured program.
"""
from __future__ import annotations

import contextlib

C_IDENTITY = "pd_op.c_identity"


def _c_identity_vjp(op, output_grads, stop_gradients):
    """``call_vjp``'s answer for ``c_identity``: one list per input of the op, one gradient per
    value of that input (a fake value where the input needs none, as Paddle's own VJPs answer)."""
    import paddle
    from paddle import _C_ops

    if stop_gradients[0][0]:
        return [[paddle.pir.fake_value()]]
    ring_id = int(op.attrs()["ring_id"])
    return [[_C_ops.mp_allreduce_sum(output_grads[0][0], ring_id)]]


def _group_place(group):
    """(ring id, this rank's place in the group, the group's size), as ``mp_ops`` reads them."""
    from paddle.distributed import collective

    global_env = collective._get_global_env()
    if group is None:
        return 0, global_env.rank, global_env.world_size
    return group.id, group.get_group_rank(global_env.rank), group.nranks


def _pir_functions(original_identity, original_split, original_softmax_ce):
    """Replacements of ``mp_ops._c_identity``, ``_c_split`` and ``_c_softmax_with_cross_entropy``
    that build PIR ops in PIR mode and call Paddle's own otherwise."""
    import paddle
    from paddle import _C_ops
    from paddle.framework import in_pir_mode
    from paddle.jit.marker import unified

    def identity(tensor, ring_id):
        out = _C_ops.c_identity(tensor, ring_id, True, True)
        # PIR marks the results of an op without VJP as needing no gradient; the backward would
        # skip the op even with the VJP supplied.
        out.stop_gradient = tensor.stop_gradient
        return out

    @unified
    def c_identity(tensor, group=None, skip_c_identity_dynamic=False):
        if not in_pir_mode():
            return original_identity(tensor, group=group, skip_c_identity_dynamic=skip_c_identity_dynamic)
        if group is not None and not group.is_member():
            return None
        return identity(tensor, 0 if group is None else group.id)

    @unified
    def c_split(tensor, group=None):
        if not in_pir_mode():
            return original_split(tensor, group=group)
        if group is not None and not group.is_member():
            return None
        ring_id, rank, nranks = _group_place(group)
        whole = identity(tensor, ring_id)
        last = len(tensor.shape) - 1
        width = tensor.shape[last]
        if width < 0 or width % nranks:
            raise ValueError(f"_c_split: the last axis of {list(tensor.shape)} must be static and divisible by the "
                             f"group's {nranks} ranks")
        part = width // nranks
        return paddle.slice(whole, axes=[last], starts=[rank * part], ends=[(rank + 1) * part])

    @unified
    def c_softmax_with_cross_entropy(logits, label, group=None, return_softmax=False, ignore_index=-100):
        if not in_pir_mode():
            return original_softmax_ce(logits, label, group=group, return_softmax=return_softmax,
                                       ignore_index=ignore_index)
        if group is not None and not group.is_member():
            return None
        ring_id, rank, nranks = _group_place(group)
        # Paddle's own checks of the label (mp_ops), so that a wrong one fails as it would there.
        if len(label.shape) not in (len(logits.shape) - 1, len(logits.shape)):
            raise ValueError(f"Expected input_dims - 1 = label_dims or input_dims == label_dims (got input_dims "
                             f"{len(logits.shape)}, label_dims {len(label.shape)})")
        if len(label.shape) == len(logits.shape) - 1:
            label = paddle.unsqueeze(label, axis=-1)
        if not 1 <= label.shape[-1] <= logits.shape[-1] * nranks:
            raise ValueError(f"Expected label_shape[-1] >= 1 and label_shape[-1] <= input_shape[-1] * nranks (got "
                             f"label_shape[-1] = {label.shape[-1]}, input_shape[-1] = {logits.shape[-1]})")
        softmax, loss = _C_ops.c_softmax_with_cross_entropy(logits, label, ignore_index, ring_id, rank, nranks)
        return (loss, softmax) if return_softmax else loss

    return c_identity, c_split, c_softmax_with_cross_entropy


@contextlib.contextmanager
def tensor_parallel_tracing():
    """While active: ``c_identity`` has its VJP in Paddle's PIR backward, and ``mp_ops``' split and
    parallel cross entropy build PIR ops. Everything is restored on exit."""
    import paddle.autograd.ir_backward as ir_backward
    from paddle.base import core
    from paddle.distributed.fleet.layers.mpu import mp_ops

    has_vjp, grad_semantics, call_vjp = ir_backward.op_has_vjp, ir_backward.get_grad_semantic_info, core.call_vjp
    originals = mp_ops._c_identity, mp_ops._c_split, mp_ops._c_softmax_with_cross_entropy

    def op_has_vjp(op):
        return op.name() == C_IDENTITY or has_vjp(op)

    def grad_semantic_info(op):
        # Without a grad op, Paddle says c_identity's input takes no gradient.
        return [True] if op.name() == C_IDENTITY else grad_semantics(op)

    def vjp(op, inputs, outputs, output_grads, stop_gradients):
        if op.name() == C_IDENTITY:
            return _c_identity_vjp(op, output_grads, stop_gradients)
        return call_vjp(op, inputs, outputs, output_grads, stop_gradients)

    ir_backward.op_has_vjp, ir_backward.get_grad_semantic_info = op_has_vjp, grad_semantic_info
    core.call_vjp = vjp
    mp_ops._c_identity, mp_ops._c_split, mp_ops._c_softmax_with_cross_entropy = _pir_functions(*originals)
    try:
        yield
    finally:
        ir_backward.op_has_vjp, ir_backward.get_grad_semantic_info = has_vjp, grad_semantics
        core.call_vjp = call_vjp
        mp_ops._c_identity, mp_ops._c_split, mp_ops._c_softmax_with_cross_entropy = originals
