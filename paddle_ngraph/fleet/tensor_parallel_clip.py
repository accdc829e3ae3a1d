"""Gradient clipping by a norm under tensor parallelism, in dygraph.

In dygraph the optimizer is the user's and runs in Paddle on each rank's gradients. Under tensor
parallelism a rank holds shards (``is_distributed`` parameters): the norm of its own gradients is
not the dense model's. As Paddle's ``HybridParallelClipGrad`` does, the squares of the sharded
gradients are summed over the model-parallel group, and those of the whole (replicated)
parameters counted once: every rank of the group then clips by the dense model's norm.

``fleet.distributed_optimizer`` puts these in place of the optimizer's ``ClipGradByGlobalNorm``
or ``ClipGradByNorm`` (same ``clip_norm``); the sums travel over the engine's transport among the
model-parallel group (one AllReduce of one value, or of one value per sharded parameter).
"""
from __future__ import annotations

import numpy as np


def _squares(grad) -> float:
    """The sum of the squares of a gradient, in float64 (whatever its dtype)."""
    values = np.asarray(grad.numpy(), dtype=np.float64)
    return float(np.dot(values.ravel(), values.ravel()))


def _clipped(params_grads, factors: dict):
    """(param, grad * factor) for the parameters given a factor, the others as they are."""
    import paddle

    out = []
    for p, g in params_grads:
        factor = factors.get(id(p))
        if g is None or factor is None:
            out.append((p, g))
        else:
            out.append((p, paddle.multiply(g, paddle.to_tensor(factor, dtype=g.dtype))))
    return out


def _clipped_params(params_grads):
    return [(p, g) for p, g in params_grads if g is not None and getattr(p, "need_clip", True) is not False]


class _LazyGroup:
    """The model-parallel group's transport, found at the first clip: by then the engine has made
    its groups (every rank of the job takes part in making them on some transports)."""

    def __init__(self, config: dict, mp_degree: int):
        self.config, self.mp_degree, self._transport = config, mp_degree, None

    def allreduce(self, array, name: str):
        if self._transport is None:
            from ..config import Config
            from ..dygraph.data_parallel import shared_transport
            from ..ir.groups import RankLayout

            transport = shared_transport(Config(**self.config))
            self._transport = transport.group(RankLayout(transport.size, transport.rank, self.mp_degree).mp_group())
        return self._transport.allreduce(array, name=name)


def install(optimizer, config: dict, mp_degree: int) -> None:
    """Puts the tensor-parallel version of the optimizer's norm clipping in place (nothing to do
    for ``ClipGradByValue``, elementwise and exact, or no clipping). With parameter groups
    (``parameters=[{'params': ..., ...}]``) Paddle's optimizer clips each group with the group's own
    ``grad_clip`` (a copy of the optimizer's unless the group names one), so each group's is
    replaced too, as Paddle's ``HybridParallelOptimizer`` does."""
    if mp_degree <= 1:
        return
    group = _LazyGroup(config, mp_degree)
    optimizer._grad_clip = tensor_parallel_version(getattr(optimizer, "_grad_clip", None), group)
    for param_group in getattr(optimizer, "_param_groups", None) or []:
        if isinstance(param_group, dict) and param_group.get("grad_clip") is not None:
            param_group["grad_clip"] = tensor_parallel_version(param_group["grad_clip"], group)


def tensor_parallel_version(clip, group):
    """``clip`` clipping by the dense model's norms: a new clip for ``ClipGradByGlobalNorm`` and
    ``ClipGradByNorm``, any other (None, ``ClipGradByValue``, one already replaced) as it is."""
    import paddle

    if getattr(clip, "by_dense_norms", False):
        return clip
    if isinstance(clip, paddle.nn.ClipGradByGlobalNorm):
        return make_global_norm_clip(clip, group)
    if isinstance(clip, paddle.nn.ClipGradByNorm):
        return make_norm_clip(clip, group)
    return clip


def make_global_norm_clip(clip, group_transport):
    """A ``ClipGradByGlobalNorm`` like ``clip`` whose norm is the dense model's."""
    import paddle

    class TensorParallelClipGradByGlobalNorm(paddle.nn.ClipGradByGlobalNorm):
        by_dense_norms = True

        def _dygraph_clip(self, params_grads):
            clipped = _clipped_params(params_grads)
            if not clipped:
                return params_grads
            sharded = sum(_squares(g) for p, g in clipped if getattr(p, "is_distributed", False))
            whole = sum(_squares(g) for p, g in clipped if not getattr(p, "is_distributed", False))
            sharded = float(group_transport.allreduce(np.array([sharded]), name="clip_global_norm")[0])
            norm = float(np.sqrt(sharded + whole))
            if self.auto_skip_clip and norm <= self.clip_norm:
                return params_grads
            factor = self.clip_norm / max(norm, self.clip_norm)
            return _clipped(params_grads, {id(p): factor for p, _ in clipped})

    return TensorParallelClipGradByGlobalNorm(clip.clip_norm, clip.group_name, clip.auto_skip_clip)


def make_norm_clip(clip, group_transport):
    """A ``ClipGradByNorm`` like ``clip`` whose norm of a sharded parameter's gradient is that of
    the whole (dense) gradient."""
    import paddle

    class TensorParallelClipGradByNorm(paddle.nn.ClipGradByNorm):
        by_dense_norms = True

        def _dygraph_clip(self, params_grads):
            clipped = _clipped_params(params_grads)
            sharded = [p for p, _ in clipped if getattr(p, "is_distributed", False)]
            squares = {id(p): _squares(g) for p, g in clipped}
            if sharded:  # every rank of the group has the same sharded parameters, in one order
                summed = group_transport.allreduce(np.array([squares[id(p)] for p in sharded]), name="clip_norm")
                squares.update({id(p): float(s) for p, s in zip(sharded, summed)})
            # Paddle's clip_by_norm: x * max_norm / norm where the norm exceeds max_norm
            factors = {key: self.clip_norm / np.sqrt(s) for key, s in squares.items() if np.sqrt(s) > self.clip_norm}
            return _clipped(params_grads, factors)

    return TensorParallelClipGradByNorm(clip.clip_norm)
