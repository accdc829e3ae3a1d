"""Paddle's hybrid communicate group under ``strategy.ngraph``: its groups, without the gloo
process groups of part of the ranks, which Paddle 3.3.1 cannot make reliably on CPU.

``fleet.init`` in dygraph with ``hybrid_configs`` (``dp_degree`` x ``mp_degree``) builds a
``HybridCommunicateGroup``: one ``paddle.distributed.new_group`` per data-parallel, model-parallel,
pipeline, sharding and check group, each with a gloo process group on CPU. Measured on 4 ranks
(dp 2 x mp 2), under ``mpirun`` and under ``paddle.distributed.launch`` alike: the job fails in most
runs with ``gloo/transport/tcp/pair.cc:784 connect [127.0.0.1]:<port>: Connection refused`` (or a
rank that got through has the others fail with ``TCP connection reset by peer``). Paddle's
``ProcessGroupGloo`` rendezvouses its full mesh through the job's TCPStore without a prefix per
group, so two groups made at once by disjoint ranks ({0, 2} and {1, 3}) read each other's
addresses. Groups of every rank (dp only, or mp = every rank) are made one at a time and work.

With ``strategy.ngraph`` every collective of the model runs on the engine's transport over its own
groups (docs/model-parallel.md), and Paddle's process groups of part of the ranks are never used:
``without_partial_process_groups()`` makes ``new_group`` record such groups (ids, ranks, this
rank's place: what the tensor-parallel layers and the engine read) without a process group. Eager
collectives of the user's over such a group (``paddle.distributed.all_reduce(t, group=hcg.get_data_parallel_group())``)
are not available then.
"""
from __future__ import annotations

import contextlib
import logging

log = logging.getLogger("paddle_ngraph.fleet")


@contextlib.contextmanager
def without_partial_process_groups():
    """While active, ``new_group`` over part of the job's ranks makes no gloo process group."""
    from paddle.distributed import collective

    make = collective._new_process_group_impl
    world = collective._get_global_env().world_size

    def make_unless_partial(backend, store, rank, world_size, *args, **kwargs):
        if backend == "gloo" and world_size < world:
            return None
        return make(backend, store, rank, world_size, *args, **kwargs)

    collective._new_process_group_impl = make_unless_partial
    try:
        yield
    finally:
        collective._new_process_group_impl = make


def init_hybrid_parallel_env(original):
    """``Fleet._init_hybrid_parallel_env`` that, under ``strategy.ngraph``, builds Paddle's groups
    without the process groups of part of the ranks (see the module's docstring)."""

    def init(fleet_obj):
        strategy = getattr(fleet_obj, "_user_defined_strategy", None)
        from .eager_tensor_parallel import follow

        follow(strategy)  # the layers' eager ops on CPU under the flag only
        if not getattr(strategy, "ngraph", False):
            return original(fleet_obj)
        with without_partial_process_groups():
            result = original(fleet_obj)
        log.debug("Paddle's hybrid groups made without gloo process groups of part of the ranks "
                  "(the engine's transport runs their collectives)")
        return result

    init.__wrapped__ = original
    return init
