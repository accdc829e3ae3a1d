"""``paddle.Model`` (hapi) on the engine: with ``strategy.ngraph``, and around a wrapped network.

hapi's ``DynamicGraphAdapter`` wraps the network in a ``paddle.DataParallel`` of its own when
``ParallelEnv().nranks > 1``, which neither ``fleet.distributed_model`` nor ``strategy.ngraph``
reaches. ``install()`` (at ``import paddle_ngraph``, with the fleet hooks) replaces its constructor:

- ``fleet.init(is_collective=True, strategy=strategy)`` with ``strategy.ngraph = True`` before
  ``paddle.Model(net)``: the network becomes ``fleet.distributed_model(net)``, i.e.
  ``paddle_ngraph.DataParallel(net, strategy.ngraph_configs)``, at any number of ranks, so
  ``paddle.Model(net)`` is ``paddle.Model(paddle_ngraph.DataParallel(net))``;
- a network that is a ``paddle_ngraph.DataParallel`` (given so, or made so above) is not wrapped in
  ``paddle.DataParallel`` again: the engine already averages its gradients in backward, and
  Paddle's reducer would average them a second time.

Everything else of hapi is Paddle's: ``dist.init_parallel_env()`` still runs with several ranks
(``evaluate`` gathers every rank's outputs and labels for the metrics over Paddle's group), each
rank reads its shard through hapi's ``DistributedBatchSampler``, and the optimizer is the user's.
"""
from __future__ import annotations

import logging
import sys

log = logging.getLogger("paddle_ngraph.fleet")

_ORIGINAL: dict = {}


def _fleet_with_ngraph():
    """The fleet's strategy when ``strategy.ngraph`` is on and fleet is initialized, else None."""
    from paddle.distributed.fleet import fleet as fleet_obj

    from .dygraph import strategy_in_effect

    strategy = strategy_in_effect(fleet_obj)
    if not getattr(strategy, "ngraph", False) or getattr(fleet_obj, "_role_maker", None) is None:
        return None
    return fleet_obj


def adapter_init(self, model):
    """``DynamicGraphAdapter.__init__``, with the network on the engine (module docstring)."""
    import paddle

    from ..dygraph import DataParallel
    from .dygraph import distributed_model

    fleet_obj = _fleet_with_ngraph()
    network = model.network
    if fleet_obj is not None and not isinstance(network, DataParallel):
        model.network = network = distributed_model(fleet_obj, network)
        log.info("paddle.Model: %s runs on the engine (strategy.ngraph)", type(network._layers).__name__)
    if not isinstance(network, DataParallel) or paddle.distributed.ParallelEnv().nranks < 2:
        return _ORIGINAL["__init__"](self, model)
    # Paddle 3.3.1's constructor, but for its paddle.DataParallel: the wrapper is the distributed model.
    self.model = model
    self._nranks = paddle.distributed.ParallelEnv().nranks
    self._local_rank = paddle.distributed.ParallelEnv().local_rank
    self._merge_count = {"eval_total": 0, "test_total": 0, "eval_batch": 0, "test_batch": 0}
    self._input_info = None
    self._amp_level = "O0"
    self._amp_configs = {}
    self._amp_custom_lists = {}
    self._use_fp16_guard = True
    # evaluate() gathers the ranks' outputs over Paddle's default group.
    paddle.distributed.init_parallel_env()
    self.ddp_model = network


def install() -> bool:
    """Replaces ``DynamicGraphAdapter.__init__``; idempotent. False when ``paddle.hapi.model`` is not
    (completely) imported yet; in Paddle 3.3.1 it is whenever the fleet hooks install, in either order
    of ``import paddle`` and ``import paddle_ngraph``."""
    module = sys.modules.get("paddle.hapi.model")
    adapter = getattr(module, "DynamicGraphAdapter", None)
    if adapter is None:
        return False
    if "__init__" not in _ORIGINAL:
        _ORIGINAL["__init__"] = adapter.__init__
        adapter.__init__ = adapter_init
    return True
