"""Fleet in dygraph mode with ``strategy.ngraph = True``: the two lines users add, served by the engine.

    fleet.init(is_collective=True, strategy=strategy)
    model = fleet.distributed_model(MyNet())         # -> paddle_ngraph.DataParallel(MyNet(), configs)
    opt = fleet.distributed_optimizer(paddle.optimizer.Momentum(...))   # -> that optimizer, as it is

Paddle would wrap the model in ``paddle.DataParallel`` over gloo (and refuse a plain Layer where
it sees one process) and the optimizer in ``HybridParallelOptimizer``. Here the engine averages
the gradients inside backward, so the user's optimizer needs no wrapper: its ``step()`` runs in
Paddle on the averaged gradients, with its own clipping, weight decay and LR schedule. The
configuration is ``strategy.ngraph_configs``, resolved as for static training (config.py).
"""
from __future__ import annotations

import copy
import logging

from ..errors import ConfigError
from . import features, tensor_parallel_clip
from .features import check_strategy
from ..config_sources import resolve_config

log = logging.getLogger("paddle_ngraph.fleet")


def strategy_in_effect(fleet_obj, strategy=None):
    """The strategy passed now, else the one fleet.init kept."""
    return strategy if strategy is not None else getattr(fleet_obj, "_user_defined_strategy", None)


def check_dygraph(fleet_obj, strategy) -> dict:
    if getattr(fleet_obj, "_role_maker", None) is None:
        raise ConfigError("strategy.ngraph: call fleet.init(is_collective=True, strategy=strategy) before "
                          "fleet.distributed_model / fleet.distributed_optimizer")
    if not fleet_obj._is_collective:
        raise ConfigError("strategy.ngraph needs collective training: fleet.init(is_collective=True) "
                          "(parameter-server mode is not supported)")
    check_strategy(strategy, dygraph=True)
    inner = [f"strategy.{name}" for name in ("lars", "lamb") if features.enabled(strategy, name)]
    if inner:
        raise ConfigError(f"{', '.join(inner)} in dygraph mode: the optimizer is yours and runs in Paddle; use "
                          f"paddle.incubate.optimizer.LarsMomentumOptimizer or paddle.optimizer.Lamb directly")
    return resolve_config(features.merged_overrides(strategy))


def distributed_model(fleet_obj, model):
    """``paddle_ngraph.DataParallel`` over the launcher's ranks, configured by the strategy."""
    from ..dygraph import DataParallel

    strategy = strategy_in_effect(fleet_obj)
    check_dygraph(fleet_obj, strategy)
    wrapped = DataParallel(model, configs=features.merged_overrides(strategy))
    wrapped.broadcast_inputs = wrapped.broadcast_inputs and need_broadcast_data(strategy)
    # What runs where (the engine, Paddle ops between its segments, or all eager) is known at the
    # Layer's first call, which logs it.
    log.info("rank %d/%d: %s wrapped for the engine (%s transport)", wrapped.engine.transport.rank,
             wrapped.engine.transport.size, type(model).__name__, wrapped.engine.transport.name)
    return wrapped


def need_broadcast_data(strategy) -> bool:
    """``hybrid_configs["mp_configs"].need_broadcast_data``: whether Paddle's TensorParallel would give
    the ranks of a model-parallel group its first rank's inputs (Paddle's default: yes)."""
    try:
        return bool(strategy.hybrid_configs["mp_configs"].need_broadcast_data)
    except (AttributeError, KeyError, TypeError):
        return True


def distributed_optimizer(fleet_obj, optimizer, strategy=None):
    """The user's optimizer itself: gradients arrive averaged (fleet's bookkeeping is kept)."""
    if strategy is not None:
        fleet_obj._user_defined_strategy = copy.deepcopy(strategy)
    config = check_dygraph(fleet_obj, strategy_in_effect(fleet_obj))
    tensor_parallel_clip.install(optimizer, config, int(config.get("mp_degree", 1)))
    fleet_obj.user_defined_optimizer = optimizer
    return optimizer
