"""Inserts AllReduce between each gradient and the optimizer update that consumes it.

After Paddle's ``GradAllReduce`` transpiler, but on the IR: every optimizer
update node names its gradient input (``OptimizerUpdate.grad_input``). Gradients
are grouped into buckets in the order the backward pass produces them (node
creation order follows the program's op order), one fused AllReduce per bucket,
a new bucket at each dtype change or when the bucket size is reached
(0: one AllReduce per gradient). The grouping depends only on the function, so
every rank builds the same collectives in the same order.

The bucket size is ``bucket_bytes``, lowered so that the gradients make at least
``min_buckets`` buckets: a bucket can only be sent once complete, so one bucket for
a whole small model would leave nothing to overlap with the backward pass (the
CPU backend starts each bucket's AllReduce as soon as it is complete).

Averaging is the AllReduce's ``avg`` reduction: the transport sums, then scales
by 1/N once, so that the update sees the mean gradient of the global batch.

``compress`` (bf16|fp16) marks the float32 buckets' AllReduce to travel as 16-bit
values (summed in float32, distributed/compress.py); buckets of other dtypes are
left uncompressed, since the scheme is defined for float32 accumulation only.
"""
from __future__ import annotations

from ..ir import Function
from ..errors import ConfigError
from ..ir.ops import AllReduce
from ..ir.ops.collective import COLLECTIVE_OPS, COMPRESSIONS
from ..ir.ops.optimizer import OptimizerUpdate
from ..ir.types import DType
from .base import FunctionPass


class InsertAllReduce(FunctionPass):
    name = "insert_allreduce"

    def __init__(self, nranks: int, bucket_bytes: int = 32 << 20, reduction: str = "avg", skip_params=(),
                 min_buckets: int = 1, compress: str = "none", raw_gradients=None):
        if compress not in COMPRESSIONS:
            raise ConfigError(f"insert_allreduce: compress '{compress}' is not one of {', '.join(COMPRESSIONS)}")
        if compress != "none" and reduction not in ("sum", "avg"):
            raise ConfigError(f"insert_allreduce: compress '{compress}' needs reduction sum or avg, not '{reduction}'")
        self.compress = compress
        self.nranks = nranks
        self.bucket_bytes = bucket_bytes
        self.min_buckets = max(1, int(min_buckets))
        self.reduction = reduction
        self.skip_params = set(skip_params)
        # Parameter name -> its raw gradient (before clipping), where the update reads a processed
        # one (transpiler/gradients.py): the AllReduce averages the raw one for all its readers.
        self.raw_gradients = dict(raw_gradients or {})
        self.buckets: list[list[str]] = []  # parameter names per bucket, for reports

    def run(self, function: Function) -> bool:
        if self.nranks <= 1:
            return False
        updates = [n for n in function.ordered_nodes() if isinstance(n, OptimizerUpdate)
                   and n.inputs[n.param_input].node.name not in self.skip_params
                   and n.inputs[n.grad_input].node.op_type not in COLLECTIVE_OPS]  # reduced already (ZeRO-1)
        if not updates:
            return False

        def gradient(update):
            raw = self.raw_gradients.get(update.inputs[update.param_input].node.name)
            return raw if raw is not None else update.inputs[update.grad_input]

        # Ready order: the gradient producer's creation order, then the parameter name for ties.
        updates.sort(key=lambda n: (gradient(n).node.id, n.inputs[n.param_input].node.name))
        groups, self.effective_bucket_bytes = plan_buckets([gradient(u) for u in updates], self.bucket_bytes,
                                                           self.min_buckets)
        buckets = [[updates[k] for k in group] for group in groups]
        replaced = {}
        for i, bucket in enumerate(buckets):
            grads = [gradient(u) for u in bucket]
            compress = self.compress if grads[0].dtype == DType.float32 else "none"
            reduce = AllReduce(*grads, reduction=self.reduction, bucket=f"grad_bucket_{i}", compress=compress,
                               name=f"allreduce_bucket_{i}")
            for j, update in enumerate(bucket):
                if grads[j] is update.inputs[update.grad_input]:
                    update.inputs[update.grad_input] = reduce.output(j)
                else:
                    replaced[(grads[j].node.id, grads[j].index)] = reduce.output(j)
            self.buckets.append([u.inputs[u.param_input].node.name for u in bucket])
        if replaced:
            # Every reader of a raw gradient (norms, clipping, the update) reads its average.
            for node in function.ordered_nodes():
                if node.op_type == "AllReduce":
                    continue
                node.inputs = [replaced.get((o.node.id, o.index), o) for o in node.inputs]
        return True


def plan_buckets(gradients: list, bucket_bytes: int, min_buckets: int = 1) -> tuple[list[list[int]], int]:
    """Groups ``gradients`` (IR values, in ready order) into buckets: a new bucket at each dtype
    change or when ``bucket_bytes`` is reached (0: one per gradient), the size lowered so that
    there are at least ``min_buckets``. Returns the buckets (indices) and the size used."""
    cap = bucket_bytes
    if cap > 0 and min_buckets > 1:
        total = sum(g.type.nbytes() for g in gradients)
        cap = min(cap, -(-total // min_buckets))
    buckets: list[list[int]] = []
    size = 0
    for k, grad in enumerate(gradients):
        nbytes = grad.type.nbytes()
        if (not buckets or cap == 0 or (size > 0 and size + nbytes > cap)
                or gradients[buckets[-1][0]].dtype != grad.dtype):
            buckets.append([])
            size = 0
        buckets[-1].append(k)
        size += nbytes
    return buckets, cap


def average_gradient_results(function: Function, names: list[str], bucket_bytes: int = 32 << 20,
                             min_buckets: int = 1, reduction: str = "avg", compress: str = "none") -> Function:
    """The function with its results ``names`` (gradients that leave it, as a dygraph backward's)
    averaged across ranks by bucketed AllReduce, buckets in the order backward makes them (the
    producers' creation order) so that early buckets travel while the rest of backward runs."""
    results = dict(function.results)
    ready = sorted(names, key=lambda n: (results[n].node.id, results[n].index, n))
    groups, _ = plan_buckets([results[n] for n in ready], bucket_bytes, min_buckets)
    for i, group in enumerate(groups):
        grads = [results[ready[k]] for k in group]
        mode = compress if grads[0].dtype == DType.float32 and reduction in ("sum", "avg") else "none"
        reduce = AllReduce(*grads, reduction=reduction, bucket=f"grad_bucket_{i}", compress=mode,
                           name=f"allreduce_bucket_{i}")
        for j, k in enumerate(group):
            results[ready[k]] = reduce.output(j)
    return Function(function.parameters, results, name=function.name)


def average_results(function: Function, names: list[str], reduction: str = "avg", compress: str = "none") -> Function:
    """The function with the results ``fetch:<name>`` (gradients that an optimizer update left to
    Paddle reads) passed through one AllReduce per dtype: with the fallback, the update is not
    in the function, so ``InsertAllReduce`` cannot find the gradient from it."""
    from ..ir.roles import FETCH_PREFIX

    results = dict(function.results)
    by_dtype: dict = {}
    for name in names:
        by_dtype.setdefault(results[FETCH_PREFIX + name].dtype, []).append(name)
    for i, (dtype, group) in enumerate(by_dtype.items()):
        mode = compress if dtype == DType.float32 and reduction in ("sum", "avg") else "none"
        reduce = AllReduce(*[results[FETCH_PREFIX + n] for n in group], reduction=reduction,
                           bucket=f"{function.name}_fallback_grads_{i}", compress=mode,
                           name=f"allreduce_{function.name}_fallback_grads_{i}")
        for j, name in enumerate(group):
            results[FETCH_PREFIX + name] = reduce.output(j)
    return Function(function.parameters, results, name=function.name)
