"""ZeRO stage 1: each rank keeps and updates 1/N of the optimizer state.

Instead of an AllReduce before each update (``InsertAllReduce``), the gradients of a bucket
are flattened into one vector, padded to a multiple of N and reduce-scattered (avg), so
each rank receives the averaged gradient of its slice; one fused optimizer update runs on
that slice, with the slice's parameter values and optimizer state held by the engine
(``Role.SHARD`` parameters of the function, named ``shard/<bucket>/...``: N times smaller than
the full state);
an AllGather of the updated slices gives every rank the full new parameters, which are cut
back into the Paddle variables. The full optimizer-state variables (moments, velocities)
leave the function: the engine frees them in the scope and writes them back only for a
checkpoint (``transpiler/sharded_state.py``).

The function stays the same on every rank (the rank's slice is chosen by the collectives and
by the engine, never by a node), and its traffic equals an AllReduce's (a reduce-scatter and
an allgather are the two halves of a ring allreduce).

Only element-wise updates can be sliced: SGD, Momentum and Adam(W). Lamb's trust ratio and
LARS's local learning rate need whole-parameter norms, so their parameters keep the plain
AllReduce (``InsertAllReduce`` runs after this pass and reduces what is left). So do the
parameters whose gradient is clipped before the update (``clipped_params``): clipping reads
the whole averaged gradient (``ClipGradByGlobalNorm`` all of them), which a rank holding the
average of its slice alone does not have. Weight decay, linear in the gradient, is sliced:
the average of ``g_i + decay(p)`` is ``mean(g) + decay(p)``.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from ..ir import Function
from ..ir.ops import AllGather, Concat, Constant, Multiply, Parameter, ReduceScatter, Reshape, Slice
from ..ir.ops.optimizer import AdamUpdate, MomentumUpdate, OptimizerUpdate, SGDUpdate
from .allreduce_buckets import plan_buckets
from ..ir.roles import Role, state_result
from .base import FunctionPass

log = logging.getLogger("paddle_ngraph.passes")

SHARDABLE = (SGDUpdate, MomentumUpdate, AdamUpdate)
SHARD_PREFIX = "shard/"


@dataclass
class ShardedBucket:
    """One bucket's layout: which variables its slices come from, for the engine and checkpoints."""

    name: str
    world_size: int
    shard_size: int  # elements per rank (the padded total / world_size)
    dtype: str
    params: list[str]  # Paddle parameter names, in flattening order
    sizes: list[int]
    shapes: list[tuple]
    # function parameter holding this rank's slice -> the Paddle variables it is cut from
    # (one per parameter of the bucket, in the same order)
    slices: dict[str, list[str]] = field(default_factory=dict)
    master: str = ""  # the slice of the parameters themselves (its sources are `params`)


class ShardOptimizer(FunctionPass):
    name = "shard_optimizer"

    def __init__(self, nranks: int, bucket_bytes: int = 32 << 20, reduction: str = "avg", skip_params=(),
                 min_buckets: int = 1, clipped_params=()):
        self.nranks = nranks
        self.clipped_params = set(clipped_params)
        self.unsharded: list[str] = []  # parameters left to the AllReduce because of their clipping
        self.bucket_bytes = bucket_bytes
        self.min_buckets = max(1, int(min_buckets))
        self.reduction = reduction
        self.skip_params = set(skip_params)
        self.buckets: list[ShardedBucket] = []

    def run(self, function: Function) -> bool:
        if self.nranks <= 1:
            return False
        users = function.users()
        updates = [n for n in function.ordered_nodes() if self._shardable(n, users)]
        if self.unsharded:
            log.warning("zero_stage 1: the optimizer state of %s is not sharded: their gradients are clipped before "
                        "the update, which reads the whole averaged gradient (plain AllReduce)",
                        ", ".join(self.unsharded))
        if not updates:
            return False
        updates.sort(key=lambda n: (n.inputs[n.grad_input].node.id, n.inputs[n.param_input].node.name))
        # Buckets as the gradient AllReduce's, but one fused update per bucket: a new bucket also
        # where the update differs in anything but its tensors.
        groups, _ = plan_buckets([u.inputs[u.grad_input].type.nbytes() for u in updates],
                                 [self._group_key(u) for u in updates], self.bucket_bytes, self.min_buckets)
        removed: set[str] = set()
        for index, group in enumerate(groups):
            removed |= self._shard(function, f"grad_bucket_{index}", [updates[k] for k in group])
        function.parameters = [p for p in function.parameters if p.name not in removed]
        return True

    def _shardable(self, node, users) -> bool:
        if not isinstance(node, SHARDABLE):
            return False
        param = node.inputs[node.param_input].node
        if param.name in self.skip_params or node.inputs[node.grad_input].node.op_type in ("AllReduce", "ReduceScatter"):
            return False
        if param.name in self.clipped_params:
            self.unsharded.append(param.name)
            return False
        if not param.output_types[0].is_static:
            return False
        # The sharded state must be read by this update alone: it leaves the function.
        for i in self._sharded_state_inputs(node):
            state = node.inputs[i].node
            if not isinstance(state, Parameter) or len(users.get(state.id, [])) != 1:
                return False
        return True

    @staticmethod
    def _sharded_state_inputs(node) -> tuple:
        """The state with one value per element of the parameter (moments, velocity), as the update
        declares it: those are sliced. State of one value per parameter (Adam's beta powers) stays
        whole, even where a (1,) parameter has its shape."""
        return tuple(node.elementwise_state_inputs)

    @staticmethod
    def _group_key(node) -> tuple:
        """Updates fused into one must agree on everything but their tensors."""
        attrs = tuple(sorted((k, repr(v)) for k, v in node.attrs.items()))
        lr = node.inputs[node.lr_input]
        return type(node), attrs, lr.node.id, lr.index, node.inputs[node.grad_input].dtype

    def _shard(self, function: Function, bucket: str, group: list[OptimizerUpdate]) -> set[str]:
        n = self.nranks
        first = group[0]
        dtype = first.inputs[first.grad_input].dtype
        params = [u.inputs[u.param_input].node for u in group]
        sizes = [int(np.prod(p.output_types[0].shape)) for p in params]
        total = sum(sizes)
        shard = -(-total // n)
        pad = shard * n - total

        def flat(values, name):
            pieces = [Reshape(v, shape=(-1,), name=f"{bucket}/{name}/flatten_{k}").output(0) for k, v in enumerate(values)]
            if pad:
                pieces.append(Constant(np.zeros(pad), dtype=dtype.value, name=f"{bucket}/{name}/pad").output(0))
            return Concat(*pieces, axis=0, name=f"{bucket}/{name}/concat").output(0)

        grads = flat([u.inputs[u.grad_input] for u in group], "grads")
        scattered = ReduceScatter(grads, reduction=self.reduction, world_size=n, bucket=bucket,
                                  name=f"reduce_scatter_{bucket}").output(0)
        layout = ShardedBucket(bucket, n, shard, dtype.value, [p.name for p in params], sizes,
                               [tuple(p.output_types[0].shape) for p in params])

        def slice_parameter(role: str, sources: list[str]) -> Parameter:
            name = f"{SHARD_PREFIX}{bucket}/{role}"
            node = Parameter(name=name, dtype=dtype.value, shape=(shard,), role=Role.SHARD)
            function.parameters.append(node)
            layout.slices[name] = sources
            return node

        master = slice_parameter("param", layout.params)
        layout.master = master.name
        inputs = [None] * len(first.inputs)
        inputs[first.param_input] = master.output(0)
        inputs[first.grad_input] = scattered
        inputs[first.lr_input] = first.inputs[first.lr_input]
        sliced = self._sharded_state_inputs(first)
        removed = set()
        for i in first.state_inputs:
            if i in sliced:
                sources = [u.inputs[i].node.name for u in group]
                inputs[i] = slice_parameter(f"state{i}", sources).output(0)
                removed |= set(sources)
            else:
                inputs[i] = first.inputs[i]
        update = type(first)(*inputs, name=f"update_{bucket}", **first.attrs)
        gathered = AllGather(update.output(0), world_size=n, bucket=bucket.replace("grad_", "param_"),
                             name=f"allgather_{bucket}").output(0)
        function.results[state_result(master.name)] = update.output(0)
        offset = 0
        for p, size in zip(params, sizes):
            piece = Slice(gathered, axes=(0,), starts=(offset,), ends=(offset + size,), name=f"{bucket}/unpack_{p.name}")
            function.results[state_result(p.name)] = Reshape(piece.output(0), shape=tuple(p.output_types[0].shape),
                                                             name=f"{bucket}/reshape_{p.name}").output(0)
            offset += size
        # The update returns the new parameter, then each state input in state_inputs order.
        for k, i in enumerate(first.state_inputs, start=1):
            if i in sliced:
                function.results[state_result(inputs[i].node.name)] = update.output(k)
                for u in group:
                    function.results.pop(state_result(u.inputs[i].node.name), None)
            else:
                # Whole state (beta powers): the fused update advances the first one; the others
                # advance the same way on their own values.
                function.results[state_result(first.inputs[i].node.name)] = update.output(k)
                factor = first.attrs["beta1" if i == 5 else "beta2"]
                for u in group[1:]:
                    own = u.inputs[i]
                    step = Multiply(own, Constant(np.full(own.type.shape, factor), dtype=own.dtype.value,
                                                  name=f"{bucket}/{own.node.name}/factor").output(0),
                                    name=f"{bucket}/advance_{own.node.name}")
                    function.results[state_result(own.node.name)] = step.output(0)
        self.buckets.append(layout)
        return removed
