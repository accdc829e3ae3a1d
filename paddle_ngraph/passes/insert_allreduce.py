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

The bucketing and the compression rule are ``allreduce_buckets``'s, shared with the other
places that reduce values across ranks.
"""
from __future__ import annotations

from ..errors import ConfigError, ValidationError
from ..ir import Function
from ..ir.ops.collective import COLLECTIVE_OPS, COMPRESSIONS
from ..ir.ops.optimizer import OptimizerUpdate
from ..ir.ops import COMPRESSIBLE_REDUCTIONS
from .allreduce_buckets import allreduce_in_buckets, dtype_groups, emit_allreduce
from .base import FunctionPass


class InsertAllReduce(FunctionPass):
    name = "insert_allreduce"

    def __init__(self, nranks: int, bucket_bytes: int = 32 << 20, reduction: str = "avg", skip_params=(),
                 min_buckets: int = 1, compress: str = "none", raw_gradients=None, group=()):
        if compress not in COMPRESSIONS:
            raise ConfigError(f"insert_allreduce: compress '{compress}' is not one of {', '.join(COMPRESSIONS)}")
        if compress != "none" and reduction not in COMPRESSIBLE_REDUCTIONS:
            raise ConfigError(f"insert_allreduce: compress '{compress}' needs reduction sum or avg, not '{reduction}'")
        self.compress = compress
        self.nranks = nranks
        self.group = tuple(group)  # the ranks averaged over (ir/groups.py): () every rank
        self.bucket_bytes = bucket_bytes
        self.min_buckets = max(1, int(min_buckets))
        self.reduction = reduction
        self.skip_params = set(skip_params)
        # Parameter name -> its raw gradient (before clipping), where the update reads a processed
        # one (transpiler/gradients.py): the AllReduce averages the raw one for all its readers.
        # Read when the pass runs: gradient accumulation, before it, sets the merged ones.
        self.raw_gradients = raw_gradients if raw_gradients is not None else {}
        self.buckets: list[list[str]] = []  # parameter names per bucket, for reports

    def run(self, function: Function) -> bool:
        if self.nranks <= 1:
            return False
        updates = [n for n in function.ordered_nodes() if isinstance(n, OptimizerUpdate)
                   and n.inputs[n.param_input].node.name not in self.skip_params
                   and n.inputs[n.grad_input].node.op_type not in COLLECTIVE_OPS]  # reduced already (ZeRO-1)
        if not updates:
            return False

        in_function = {node.id for node in function.ordered_nodes()}

        def gradient(update):
            name = update.inputs[update.param_input].node.name
            raw = self.raw_gradients.get(name)
            if raw is not None and raw.node.id not in in_function:
                # An AllReduce of a value no result reads would never run: the ranks would diverge.
                raise ValidationError(f"insert_allreduce: the raw gradient of '{name}' ({raw.node.name}) is not "
                                      f"in function '{function.name}' (a pass before this one replaced it)")
            return raw if raw is not None else update.inputs[update.grad_input]

        # Ready order: the gradient producer's creation order, then the parameter name for ties.
        updates.sort(key=lambda n: (gradient(n).node.id, n.inputs[n.param_input].node.name))
        grads = [gradient(u) for u in updates]
        reduced, groups, self.effective_bucket_bytes = allreduce_in_buckets(
            grads, self.reduction, self.compress, self.bucket_bytes, self.min_buckets, ranks=self.group)
        replaced = {}
        for update, grad, mean in zip(updates, grads, reduced):
            if grad is update.inputs[update.grad_input]:
                update.inputs[update.grad_input] = mean
            else:
                replaced[(grad.node.id, grad.index)] = mean
        self.buckets += [[updates[k].inputs[updates[k].param_input].node.name for k in group] for group in groups]
        if replaced:
            # Every reader of a raw gradient (norms, clipping, the update) reads its average.
            for node in function.ordered_nodes():
                if node.op_type == "AllReduce":
                    continue
                node.inputs = [replaced.get((o.node.id, o.index), o) for o in node.inputs]
        return True


def average_gradient_results(function: Function, names: list[str], bucket_bytes: int = 32 << 20,
                             min_buckets: int = 1, reduction: str = "avg", compress: str = "none",
                             group=()) -> Function:
    """The function with its results ``names`` (gradients that leave it, as a dygraph backward's)
    averaged across the ranks of ``group`` (``()``: every rank) by bucketed AllReduce, buckets in
    the order backward makes them (the producers' creation order) so that early buckets travel
    while the rest of backward runs."""
    results = dict(function.results)
    ready = sorted(names, key=lambda n: (results[n].node.id, results[n].index, n))
    reduced, _, _ = allreduce_in_buckets([results[n] for n in ready], reduction, compress, bucket_bytes, min_buckets,
                                         ranks=group)
    results.update(zip(ready, reduced))
    return Function(function.parameters, results, name=function.name)


def average_results(function: Function, names: list[str], reduction: str = "avg", compress: str = "none",
                    group=()) -> Function:
    """The function with the results ``fetch:<name>`` (gradients that an optimizer update left to
    Paddle reads) passed through one AllReduce per dtype: with the fallback, the update is not
    in the function, so ``InsertAllReduce`` cannot find the gradient from it."""
    from ..ir.roles import FETCH_PREFIX, STATE_PREFIX

    results = dict(function.results)
    keys = [FETCH_PREFIX + n for n in names]
    values = [results[k] for k in keys]
    fallback = f"{function.name}_fallback_grads"
    reduced = emit_allreduce(values, dtype_groups(values), reduction, compress,
                             lambda i: (f"{fallback}_{i}", f"allreduce_{fallback}_{i}"), ranks=group)
    results.update(zip(keys, reduced))
    # A persistable gradient (GradientMergeOptimizer's sum of gradients) is also written back to its
    # variable as state: the same variable Paddle reads, so it gets the average too.
    for name, value, average in zip(names, values, reduced):
        state = results.get(STATE_PREFIX + name)
        if state is not None and state.node is value.node and state.index == value.index:
            results[STATE_PREFIX + name] = average
    return Function(function.parameters, results, name=function.name)
