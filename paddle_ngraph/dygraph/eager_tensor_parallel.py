"""fleet's tensor-parallel layers called eagerly on CPU, their collectives on the engine's transport.

``fleet.meta_parallel``'s layers (``ColumnParallelLinear``, ``RowParallelLinear``,
``VocabParallelEmbedding``, ``ParallelCrossEntropy``) called without ``fleet.distributed_model``
run ``mp_ops``' eager branches, which fail on CPU in Paddle 3.3.1 (measured): ``c_identity``,
``c_concat``, ``c_split`` and ``c_softmax_with_cross_entropy`` have no CPU kernel ("Do not support
c_identity for cpu kernel now"), and ``_mp_allreduce`` asks gloo for an AllReduce on the calc stream,
which ``ProcessGroupGLOO`` refuses. ``c_embedding`` has a CPU kernel (with its gradient) and stays
Paddle's.

``install(transport_of)`` puts PyLayers in their place, in ``mp_ops`` (where the layers look them up,
``mp_ops._c_identity``) and in ``paddle.distributed.collective`` (which imports them by name): the
forward and backward do the math with Paddle's CPU ops, and the collectives go over
``transport_of(ranks)``, the engine's transport among the Paddle group's ranks (``group.ranks``,
global ranks: the transport's, as ``paddle_layout`` checks for the captured path). Each replacement
calls Paddle's own outside dynamic mode, so a Layer being captured (PIR, to_static) still gets
Paddle's ops, and the capture's own patches (frontend/tensor_parallel_capture.py) keep working.

The Megatron pairs: identity forward / AllReduce backward (``f``), AllReduce forward / identity
backward (``g``), slice of the last axis / AllGather backward, AllGather of the last axis / slice
backward. The parallel cross entropy is Paddle's kernel's: the row maximum AllReduced (max), the sum
of exponentials and the target logit AllReduced (sum); loss = log(sum) - target, 0 at
``ignore_index``; its gradient (softmax - one-hot of the label within this shard) * the loss
gradient, with no communication.
"""
from __future__ import annotations

import numpy as np
import paddle
from paddle.autograd import PyLayer

from ..errors import ValidationError

_INSTALLED: dict = {}  # name -> Paddle's function, while installed
PATCHED = ("_c_identity", "_c_concat", "_c_split", "_mp_allreduce", "_c_softmax_with_cross_entropy")


def _ranks(group) -> tuple:
    """The group's global ranks; () for every rank (group None: Paddle's default group)."""
    return () if group is None else tuple(int(r) for r in group.ranks)


def _comm(group):
    return _INSTALLED["transport_of"](_ranks(group))


# NumPy has no bfloat16: Paddle hands its bits over as uint16, which a sum would add as integers.
# Half precisions travel as float32 (exact for both) and come back in their own dtype.
_WIDENED = {paddle.float16, paddle.bfloat16}


def _array(tensor) -> np.ndarray:
    wide = tensor.astype("float32") if tensor.dtype in _WIDENED else tensor
    return np.ascontiguousarray(wide.numpy())


def _tensor(array: np.ndarray, like):
    out = paddle.to_tensor(array)
    return out.astype(like.dtype) if out.dtype != like.dtype else out


def _allreduce(comm, tensor, reduction: str = "sum"):
    return _tensor(comm.allreduce(_array(tensor), reduction), tensor)


def _allgather_last_axis(comm, tensor):
    """The ranks' tensors side by side along the last axis, in group-rank order."""
    gathered = comm.allgather(_array(tensor))
    parts = np.asarray(gathered).reshape((comm.size,) + tuple(tensor.shape))
    return _tensor(np.concatenate(list(parts), axis=-1), tensor)


def _own_slice(tensor, rank: int, nranks: int, op: str):
    width = tensor.shape[-1]
    if width % nranks:
        raise ValueError(f"{op}: the last axis of {list(tensor.shape)} is not divisible by the group's "
                         f"{nranks} ranks")
    part = width // nranks
    return paddle.slice(tensor, axes=[tensor.ndim - 1], starts=[rank * part], ends=[(rank + 1) * part])


class IdentityThenAllReduce(PyLayer):
    """Megatron's ``f``: a copy forward, the gradient summed over the group backward."""

    @staticmethod
    def forward(ctx, tensor, comm):
        ctx.comm = comm
        return tensor.clone()

    @staticmethod
    def backward(ctx, dy):
        return _allreduce(ctx.comm, dy)


class AllReduceThenIdentity(PyLayer):
    """Megatron's ``g``: the sum over the group forward, the gradient as it is backward."""

    @staticmethod
    def forward(ctx, tensor, comm):
        return _allreduce(comm, tensor)

    @staticmethod
    def backward(ctx, dy):
        return dy.clone()


class SplitLastAxis(PyLayer):
    """This rank's slice of the last axis; backward, the ranks' gradient slices gathered."""

    @staticmethod
    def forward(ctx, tensor, comm):
        ctx.comm = comm
        return _own_slice(tensor, comm.rank, comm.size, "_c_split")

    @staticmethod
    def backward(ctx, dy):
        return _allgather_last_axis(ctx.comm, dy)


class ConcatLastAxis(PyLayer):
    """The ranks' tensors gathered along the last axis; backward, this rank's slice."""

    @staticmethod
    def forward(ctx, tensor, comm):
        ctx.comm = comm
        return _allgather_last_axis(comm, tensor)

    @staticmethod
    def backward(ctx, dy):
        return _own_slice(dy, ctx.comm.rank, ctx.comm.size, "_c_concat")


class ShardedSoftmaxCrossEntropy(PyLayer):
    """Softmax cross entropy over logits whose last axis is sharded across the group (label [..., 1])."""

    @staticmethod
    def forward(ctx, logits, label, comm, ignore_index):
        classes = logits.shape[-1]
        start = comm.rank * classes
        shifted = logits - _allreduce(comm, paddle.max(logits, axis=-1, keepdim=True), "max")
        exps = paddle.exp(shifted)
        total = _allreduce(comm, paddle.sum(exps, axis=-1, keepdim=True))
        local = label.astype("int64") - start
        mine = paddle.logical_and(local >= 0, local < classes)
        one_hot = paddle.nn.functional.one_hot(paddle.where(mine, local, paddle.zeros_like(local)).squeeze(-1),
                                               classes).astype(logits.dtype)
        one_hot = one_hot * mine.astype(logits.dtype)
        target = _allreduce(comm, paddle.sum(shifted * one_hot, axis=-1, keepdim=True))
        kept = (label != ignore_index).astype(logits.dtype)
        loss = (paddle.log(total) - target) * kept
        softmax = exps / total
        ctx.save_for_backward(softmax, one_hot, kept)
        return loss, softmax

    @staticmethod
    def backward(ctx, dloss, dsoftmax=None):
        softmax, one_hot, kept = ctx.saved_tensor()
        return (softmax - one_hot) * (dloss * kept), None


def _member(group) -> bool:
    return group is None or group.is_member()


def _c_identity(tensor, group=None, skip_c_identity_dynamic=False):
    if not paddle.in_dynamic_mode():
        return _INSTALLED["_c_identity"](tensor, group=group, skip_c_identity_dynamic=skip_c_identity_dynamic)
    if not _member(group):
        return None
    # skip_c_identity_dynamic skips the copy; the backward AllReduce stays (as in Paddle's PyLayer).
    return IdentityThenAllReduce.apply(tensor, _comm(group))


def _mp_allreduce(tensor, op=None, group=None, use_calc_stream=True, use_model_parallel=True,
                  skip_c_identity_dynamic=False):
    from paddle.distributed import ReduceOp

    op = ReduceOp.SUM if op is None else op
    if not paddle.in_dynamic_mode():
        return _INSTALLED["_mp_allreduce"](tensor, op=op, group=group, use_calc_stream=use_calc_stream,
                                           use_model_parallel=use_model_parallel,
                                           skip_c_identity_dynamic=skip_c_identity_dynamic)
    if not _member(group):
        return None
    if op != ReduceOp.SUM:
        raise ValidationError(f"_mp_allreduce: only ReduceOp.SUM is supported (got {op}), as in Paddle")
    return AllReduceThenIdentity.apply(tensor, _comm(group))


def _c_split(tensor, group=None):
    if not paddle.in_dynamic_mode():
        return _INSTALLED["_c_split"](tensor, group=group)
    if not _member(group):
        return None
    return SplitLastAxis.apply(tensor, _comm(group))


def _c_concat(tensor, group=None):
    if not paddle.in_dynamic_mode():
        return _INSTALLED["_c_concat"](tensor, group=group)
    if not _member(group):
        return None
    return ConcatLastAxis.apply(tensor, _comm(group))


def _c_softmax_with_cross_entropy(logits, label, group=None, return_softmax=False, ignore_index=-100):
    if not paddle.in_dynamic_mode():
        return _INSTALLED["_c_softmax_with_cross_entropy"](logits, label, group=group, return_softmax=return_softmax,
                                                           ignore_index=ignore_index)
    if not _member(group):
        return None
    comm = _comm(group)
    # Paddle's own checks of the label (mp_ops), so that a wrong one fails as it would there.
    if len(label.shape) not in (len(logits.shape) - 1, len(logits.shape)):
        raise ValueError(f"Expected input_dims - 1 = label_dims or input_dims == label_dims (got input_dims "
                         f"{len(logits.shape)}, label_dims {len(label.shape)})")
    if len(label.shape) == len(logits.shape) - 1:
        label = paddle.unsqueeze(label, axis=-1)
    if label.shape[-1] != 1:
        raise ValidationError(f"_c_softmax_with_cross_entropy eagerly on CPU: one label per row, no soft labels "
                              f"(got label shape {list(label.shape)})")
    loss, softmax = ShardedSoftmaxCrossEntropy.apply(logits, label, comm, int(ignore_index))
    return (loss, softmax) if return_softmax else loss


_REPLACEMENTS = {"_c_identity": _c_identity, "_c_concat": _c_concat, "_c_split": _c_split,
                 "_mp_allreduce": _mp_allreduce, "_c_softmax_with_cross_entropy": _c_softmax_with_cross_entropy}


def _modules():
    from paddle.distributed import collective
    from paddle.distributed.fleet.layers.mpu import mp_ops

    return mp_ops, collective


def installed() -> bool:
    return bool(_INSTALLED)


def install(transport_of) -> None:
    """Puts the eager CPU versions in place; ``transport_of(ranks)`` is the engine's transport among
    ``ranks`` (global, increasing; () = every rank). Idempotent (the last ``transport_of`` wins)."""
    from paddle.jit.marker import unified

    mp_ops, collective = _modules()
    if not _INSTALLED:
        _INSTALLED.update({name: getattr(mp_ops, name) for name in PATCHED})
        for name, function in _REPLACEMENTS.items():
            wrapped = unified(function)  # to_static calls it as it is, as Paddle's (it delegates there)
            setattr(mp_ops, name, wrapped)
            if getattr(collective, name, None) is _INSTALLED[name]:
                setattr(collective, name, wrapped)
    _INSTALLED["transport_of"] = transport_of


def uninstall() -> None:
    """Paddle's functions back where they were."""
    if not _INSTALLED:
        return
    mp_ops, collective = _modules()
    for name in PATCHED:
        if getattr(collective, name, None) is getattr(mp_ops, name):
            setattr(collective, name, _INSTALLED[name])
        setattr(mp_ops, name, _INSTALLED[name])
    _INSTALLED.clear()
