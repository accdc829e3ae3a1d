"""The pass pipeline, built in one place from the configuration and the number of ranks.

``transpile`` (each engine segment), the dygraph runner (each captured Layer's backward) and
``paddle-ngraph-dump`` all take their passes from ``build_passes`` and run them with
``run_pipeline``, so the dump tool shows the graph ``transpile`` runs.

Every pass has one signature, ``run(function) -> bool``: it changes the function in place (a
pass that builds a new graph moves it into the function: ``replace_graph``). Passes that make
more than the function (the variants of accumulation and local SGD, ZeRO-1's buckets, the
recomputed nodes) keep it on themselves; ``Lowered`` gathers it for the engine.

The order, and why:
1. mixed precision first, so that every copy made below carries its marks;
2. recompute, so that the variants and the collectives see the recomputed copies;
3. averaging of the gradients that leave the function for an update left to Paddle;
4. local SGD's check and split into its local and synchronizing variants (parameters are
   averaged, not gradients: no gradient collective follows);
5. accumulation's apply variant takes the function's place, so the collectives below rewrite it;
6. ZeRO-1's reduce-scatter/update/all-gather, then the bucketed gradient AllReduce;
7. accumulation's micro-step variant, built from the function before the collectives, with the
   inputs the apply variant kept after them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..errors import ConfigError
from ..ir import Function, Output
from ..ir.roles import Role
from .accumulate_gradients import Accumulation, build_accumulate, build_apply
from .base import FunctionPass, replace_graph
from .insert_allreduce import InsertAllReduce, average_gradient_results, average_results
from .local_sgd import LocalSGD, build_local, build_sync, supported_updates, with_adaptive_results
from .manager import PassManager
from .mixed_precision import MixedPrecision
from .recompute import Recompute
from .shard_optimizer import ShardOptimizer
from .validate import Validate


@dataclass
class Facts:
    """What the caller knows about the function beyond the configuration.

    ``averaged_results``: names of results (``fetch:`` gradients an update left to Paddle reads)
    to average across ranks; ``gradient_results``: results that are gradients leaving the function
    (a dygraph backward's), averaged in buckets; ``raw_gradients``: parameter -> the IR value of its
    gradient before clipping; ``clipped_params``: parameters whose gradient is clipped (not only
    weight-decayed) before the update; ``skip_params``: parameters not averaged (Paddle's ``is_distributed``);
    ``recompute``: the checkpoint values and the ids of the forward nodes; ``loss``: returns the
    loss value (adaptive local SGD reads it; called only then); ``dp_group``: the ranks over which
    gradients are averaged (ir/groups.py; ``()``: every rank), this rank's data-parallel group
    under model parallelism (``config.mp_degree``)."""

    averaged_results: list = field(default_factory=list)
    gradient_results: list = field(default_factory=list)
    raw_gradients: dict = field(default_factory=dict)
    clipped_params: set = field(default_factory=set)
    skip_params: set = field(default_factory=set)
    recompute: tuple[list[Output], set[int]] | None = None
    loss: Callable[[], Output] | None = None
    dp_group: tuple = ()


# --- the passes that wrap a function builder ------------------------------------------------------
class AverageResults(FunctionPass):
    """One AllReduce per dtype over the named results (gradients an update left to Paddle reads)."""
    name = "average_results"

    def __init__(self, names, reduction: str, compress: str, group=()):
        self.names, self.reduction, self.compress, self.group = list(names), reduction, compress, tuple(group)

    def run(self, function: Function) -> bool:
        return replace_graph(function, average_results(function, self.names, self.reduction, self.compress,
                                                       self.group))


class AverageGradientResults(FunctionPass):
    """Bucketed AllReduce over gradient results, in the order backward makes them."""
    name = "average_gradient_results"

    def __init__(self, names, bucket_bytes: int, min_buckets: int, reduction: str, compress: str, group=()):
        self.names, self.bucket_bytes, self.min_buckets = list(names), bucket_bytes, min_buckets
        self.reduction, self.compress, self.group = reduction, compress, tuple(group)

    def run(self, function: Function) -> bool:
        return replace_graph(function, average_gradient_results(function, self.names, self.bucket_bytes,
                                                                self.min_buckets, self.reduction, self.compress,
                                                                self.group))


class CheckLocalSGD(FunctionPass):
    """Refuses updates Paddle's local SGD does not cover (on one rank too)."""
    name = "check_local_sgd"

    def run(self, function: Function) -> bool:
        supported_updates(function)
        return False


class AddAdaptiveResults(FunctionPass):
    """Adaptive local SGD reads the loss and the learning rate: both become results."""
    name = "add_adaptive_results"

    def __init__(self, loss: Callable[[], Output]):
        self.loss = loss

    def run(self, function: Function) -> bool:
        return replace_graph(function, with_adaptive_results(function, self.loss()))


class SplitLocalSGD(FunctionPass):
    """Local SGD's two variants: ``local`` (kept here) and the synchronizing one (returned)."""
    name = "split_local_sgd"

    def __init__(self, nranks: int, bucket_bytes: int, min_buckets: int, skip_params):
        self.nranks, self.bucket_bytes, self.min_buckets, self.skip = nranks, bucket_bytes, min_buckets, skip_params
        self.local = self.params = self.snapshots = None

    def run(self, function: Function) -> bool:
        self.local = build_local(function)
        Validate().run(self.local)
        sync, self.params, self.snapshots = build_sync(function, self.nranks, self.bucket_bytes, self.min_buckets,
                                                       self.skip)
        return replace_graph(function, sync)


class SplitAccumulation(FunctionPass):
    """Accumulation's apply variant takes the function's place; the function before it
    (``original``, a copy of its graph) is kept for the micro-step variant."""
    name = "split_accumulation"

    def __init__(self, steps: int, average: bool, raw_gradients: dict):
        self.steps, self.average = steps, average
        self.original = self.accumulators = None
        # Shared with the collective passes after this one (build_passes): the raw gradients of the
        # function before this pass, replaced here by the merged ones of the apply variant.
        self.raw_gradients = raw_gradients
        self.original_raw = dict(raw_gradients)

    def run(self, function: Function) -> bool:
        self.original = Function(function.parameters, function.results, name=function.name)
        apply, self.accumulators, merged = build_apply(function, self.steps, self.average, self.original_raw)
        self.raw_gradients.clear()
        self.raw_gradients.update(merged)
        return replace_graph(function, apply)


class BuildAccumulate(FunctionPass):
    """Accumulation's micro-step variant, from the function before the collectives, taking the
    Paddle inputs the apply variant kept after them in the same order (one operator feeds both)."""
    name = "build_accumulate"

    def __init__(self, split: SplitAccumulation):
        self.split = split
        self.accumulate = None

    def run(self, function: Function) -> bool:
        inputs = [p.name for p in function.parameters if p.role not in (Role.ACCUMULATOR, Role.SHARD)]
        self.accumulate = build_accumulate(self.split.original, inputs, self.split.original_raw)
        Validate().run(self.accumulate)
        return False


# --- the pipeline ---------------------------------------------------------------------------------
def build_passes(config, nranks: int, facts: Facts | None = None) -> list[FunctionPass]:
    """The passes for a function that ``nranks`` ranks run under ``config`` (a ``Config``, read by
    attribute). A pass that would change nothing is not in the list. Gradients are averaged over
    the data-parallel group (``facts.dp_group``): ``nranks // config.mp_degree`` ranks."""
    facts = facts or Facts()
    nranks = _data_parallel_ranks(config, nranks)
    bucket_bytes = int(config.bucket_mb * (1 << 20))
    passes: list[FunctionPass] = []
    if config.precision != "fp32":
        passes.append(MixedPrecision(config.precision))
    if facts.recompute is not None and facts.recompute[0]:
        passes.append(Recompute(*facts.recompute))
    if facts.averaged_results and nranks > 1:
        passes.append(AverageResults(facts.averaged_results, config.reduction, config.compress, facts.dp_group))
    if facts.gradient_results and nranks > 1:
        passes.append(AverageGradientResults(facts.gradient_results, bucket_bytes, config.min_buckets,
                                             config.reduction, config.compress, facts.dp_group))
    local_sgd = config.localsgd_k_steps > 0
    if local_sgd and facts.averaged_results:
        raise ConfigError(f"localsgd_k_steps (local SGD) needs the optimizer updates on the engine; the updates of "
                          f"{', '.join(facts.averaged_results)} fall back to Paddle")
    if local_sgd:
        passes.append(CheckLocalSGD())
    if local_sgd and nranks > 1:  # as Paddle's _can_apply: one rank trains as it is
        if config.localsgd_adaptive:
            passes.append(AddAdaptiveResults(facts.loss or _no_loss))
        passes.append(SplitLocalSGD(nranks, bucket_bytes, config.min_buckets, facts.skip_params))
    # One dict for the passes below: accumulation replaces each raw gradient by the merged one,
    # which the AllReduce reduces.
    raw_gradients = dict(facts.raw_gradients)
    split = None
    if config.accumulate_steps > 1:
        split = SplitAccumulation(config.accumulate_steps, config.accumulate_avg, raw_gradients)
        passes.append(split)
    if nranks > 1 and not local_sgd:  # local SGD averages parameters, not gradients
        buckets = dict(bucket_bytes=bucket_bytes, reduction=config.reduction, skip_params=facts.skip_params,
                       min_buckets=config.min_buckets)
        if config.zero_stage == 1:
            passes.append(ShardOptimizer(nranks, clipped_params=facts.clipped_params, **buckets))
        passes.append(InsertAllReduce(nranks, compress=config.compress, raw_gradients=raw_gradients,
                                      group=facts.dp_group, **buckets))
    if split is not None:
        passes.append(BuildAccumulate(split))
    return passes


def _data_parallel_ranks(config, nranks: int) -> int:
    """The ranks of one data-parallel group: ``nranks`` without model parallelism."""
    mp_degree = int(getattr(config, "mp_degree", 1))
    if nranks % mp_degree:
        raise ConfigError(f"mp_degree {mp_degree} does not divide the number of ranks {nranks}")
    return nranks // mp_degree


def _no_loss():
    raise ConfigError("localsgd_adaptive: adaptive local SGD reads the loss, and none was found")


@dataclass
class Lowered:
    """A function after its passes, with what the passes made beside it."""

    function: Function
    passes: list

    def find(self, kind: type):
        return next((p for p in self.passes if isinstance(p, kind)), None)

    @property
    def marked(self) -> list:
        """Nodes the mixed-precision pass marked."""
        mixed = self.find(MixedPrecision)
        return mixed.marked if mixed else []

    @property
    def recomputed(self) -> list:
        recompute = self.find(Recompute)
        return recompute.recomputed if recompute else []

    @property
    def sharding(self) -> ShardOptimizer | None:
        return self.find(ShardOptimizer)

    @property
    def allreduce(self) -> InsertAllReduce | None:
        return self.find(InsertAllReduce)

    def accumulation(self) -> Accumulation | None:
        built = self.find(BuildAccumulate)
        if built is None:
            return None
        return Accumulation(built.split.steps, built.accumulate, built.split.accumulators)

    def local_sgd(self, config) -> LocalSGD | None:
        split = self.find(SplitLocalSGD)
        if split is None:
            return None
        return LocalSGD(config.localsgd_k_steps, config.localsgd_begin_step, config.localsgd_adaptive, split.local,
                        split.params, split.snapshots)


def run_pipeline(function: Function, passes: list[FunctionPass], dump_dir: str | None = None) -> Lowered:
    """Runs ``passes`` on ``function`` (in place) through the pass manager: validation after each
    pass, dumps into ``dump_dir`` or ``PADDLE_NGRAPH_DUMP_PASSES``."""
    PassManager(passes, dump_dir=dump_dir).run(function)
    return Lowered(function, passes)
