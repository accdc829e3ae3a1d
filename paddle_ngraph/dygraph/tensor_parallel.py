"""Tensor (model) parallelism of a dygraph Layer: where this rank stands in Paddle's hybrid groups.

``fleet.meta_parallel``'s layers take their groups from the hybrid communicate group that
``fleet.init`` builds from ``hybrid_configs`` (``fleet.get_hybrid_communicate_group()``); the ops
they emit name a group by its Paddle id (``ring_id`` = ``Group.id``: ids such as 14 and 12, not the
0/1/2 of a legacy static program). ``paddle_layout`` reads those groups into a ``RankLayout``
whose rings map each id to its global ranks, and checks that Paddle's layout is the engine's
(model parallelism innermost, ranks as the transport numbers them).

The parameters of a sharded layer are ``is_distributed``: each rank of a model-parallel group
holds its own shard. ``initial_broadcasts`` says which group each parameter starts from, as
Paddle's hybrid ``distributed_model`` does (every tensor from the data-parallel group's first rank,
the unsharded ones also from the model-parallel group's first rank), so a shard is never
overwritten by another shard.
"""
from __future__ import annotations

from ..errors import ConfigError
from ..ir.groups import RankLayout


def paddle_layout(transport, mp_degree: int) -> RankLayout:
    """This rank's layout with Paddle's groups as its rings; a ConfigError where fleet has no
    hybrid group of ``mp_degree`` or lays ranks out otherwise than the engine."""
    from paddle.distributed import collective
    from paddle.distributed.fleet.base import topology as tp

    hcg = tp._HYBRID_PARALLEL_GROUP  # what fleet.init made (other Paddle APIs may leave other kinds here)
    if not isinstance(hcg, tp.HybridCommunicateGroup):
        raise ConfigError(f"mp_degree {mp_degree} in dygraph: the tensor-parallel layers need Paddle's hybrid groups; "
                          f"call fleet.init(is_collective=True, strategy=strategy) with strategy.hybrid_configs = "
                          f"{{'mp_degree': {mp_degree}, ...}} before building the model")
    paddle_degree = hcg.get_model_parallel_world_size()
    if paddle_degree != mp_degree:
        raise ConfigError(f"mp_degree {mp_degree}, but fleet's hybrid_configs made model-parallel groups of "
                          f"{paddle_degree} rank(s); set one degree")
    layout = RankLayout(transport.size, transport.rank, mp_degree)
    rank = collective._get_global_env().rank
    mp_ranks = tuple(hcg.get_model_parallel_group().ranks)
    dp_ranks = tuple(hcg.get_data_parallel_group().ranks)
    expected = (transport.rank, _listed(layout.mp_group(), transport.size), _listed(layout.dp_group(), transport.size))
    if (rank, mp_ranks, dp_ranks) != expected:
        raise ConfigError(f"rank {transport.rank}: Paddle's hybrid groups (rank {rank}, model parallel "
                          f"{list(mp_ranks)}, data parallel {list(dp_ranks)}) are not the engine's (model parallel "
                          f"{list(expected[1])}, data parallel {list(expected[2])}); only dp_degree x mp_degree "
                          f"(pp, sharding and sep degrees 1) is supported")
    rings = tuple(sorted((int(ring_id), tuple(int(r) for r in group.ranks))
                         for ring_id, group in collective._get_group_map().items()))
    return RankLayout(transport.size, transport.rank, mp_degree, rings=rings)


def _listed(group: tuple, nranks: int) -> tuple:
    """A group in Paddle's spelling: every rank listed (the engine writes the whole job as ())."""
    return group if group else tuple(range(nranks))


def sharded(layer) -> set[str]:
    """Names of the Layer's parameters that are shards (``is_distributed``)."""
    return {p.name for p in layer.parameters() if getattr(p, "is_distributed", False)}


def initial_broadcasts(layout: RankLayout, names, sharded_names) -> list[tuple[tuple, list[str]]]:
    """(group, names broadcast from its first rank) in the order every rank runs them: the
    data-parallel group for every tensor, then the model-parallel group for those not sharded.
    Groups of one rank are left out; ``()`` is every rank."""
    plan = []
    if layout.dp_degree > 1:
        plan.append((layout.dp_group(), list(names)))
    if layout.mp_degree > 1:
        plan.append((layout.mp_group(), [n for n in names if n not in sharded_names]))
    return plan


SEQUENCE_PARALLEL_MODULE = "paddle.distributed.fleet.utils.sequence_parallel_utils"


def check_no_sequence_parallelism(layer) -> None:
    """Refuses, before any step, a Layer built for Paddle's sequence parallelism: its linears
    (``ColumnSequenceParallelLinear``, ...) and ``ScatterOp``/``GatherOp`` are PyLayers of their own
    that the capture cannot trace (to_static stops inside them with a message that names none of
    them), and the parameters marked ``sequence_parallel`` get their gradients summed over the group
    by hooks that the engine's backward does not run."""
    parts = [f"{name or type(layer).__name__} ({type(sub).__name__})"
             for name, sub in layer.named_sublayers(include_self=True)
             if type(sub).__module__ == SEQUENCE_PARALLEL_MODULE]
    parts += [f"parameter {name} (mark_as_sequence_parallel_parameter)"
              for name, p in layer.named_parameters() if getattr(p, "sequence_parallel", False)]
    if parts:
        raise ConfigError(f"Layer {type(layer).__name__} uses Paddle's sequence parallelism ({SEQUENCE_PARALLEL_MODULE}), "
                          f"which the engine does not run: {', '.join(parts)}. Use fleet.meta_parallel's "
                          "ColumnParallelLinear and RowParallelLinear (docs/model-parallel.md)")
