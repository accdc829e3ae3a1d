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

In static mode (``StaticGraphAdapter`` for legacy programs, ``StaticPIRGraphAdapter`` for PIR) on
several ranks with ``strategy.ngraph``, ``install()`` replaces their ``_make_program``: the train
program is minimized with the user's strategy and transpiled (``static_make_program``,
``static_pir_make_program``); in one process hapi static is Paddle's.

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


class _FleetForStaticHapi:
    """``fleet`` as hapi's ``StaticGraphAdapter._make_program`` sees it while it builds the train
    program on several ranks with ``strategy.ngraph``: fleet itself, except that ``init`` keeps the
    fleet the user initialized (with the strategy; hapi's own ``fleet.init(role)`` would replace it
    by a default strategy) and ``DistributedStrategy()`` is the user's strategy, so that hapi's
    ``fleet.distributed_optimizer(optimizer, strategy=...)`` minimizes with ``strategy.ngraph``
    (the engine averages the gradients) instead of Paddle's RawProgramOptimizer, whose
    communicator Paddle 3.3.1 cannot make on CPU."""

    def __init__(self, fleet_module, strategy):
        self._fleet, self._strategy = fleet_module, strategy

    def init(self, *args, **kwargs):
        return None

    def DistributedStrategy(self):  # noqa: N802 (the name hapi calls)
        return self._strategy

    def __getattr__(self, name):
        return getattr(self._fleet, name)


def _identity(x):
    return x


def static_make_program(self, mode):
    """``StaticGraphAdapter._make_program`` (legacy programs): with ``strategy.ngraph`` on several
    ranks, the train program is minimized by ``strategy.ngraph`` (``_FleetForStaticHapi``), and the
    eval and test programs gather nothing: hapi's ``dist.all_gather`` of the outputs and labels
    would be a Paddle collective, for which Paddle 3.3.1 has no communicator on CPU (its kernel
    crashes the process); each rank evaluates its own batch, as hapi's PIR adapter does."""
    from .dygraph import strategy_in_effect

    fleet_obj = _fleet_with_ngraph()
    module = sys.modules["paddle.hapi.model"]
    if fleet_obj is None or self._nranks < 2 or self._progs.get(mode) is not None:
        return _ORIGINAL["_make_program"](self, mode)
    if mode != "train":
        gather = module._all_gather
        module._all_gather = _identity
        try:
            if not _ORIGINAL.get("warned_eval"):
                _ORIGINAL["warned_eval"] = True
                log.warning("paddle.Model (static mode, strategy.ngraph, %d ranks): evaluate and predict give each "
                            "rank's own results (its batch's outputs and metrics), not gathered over the ranks",
                            self._nranks)
            return _ORIGINAL["_make_program"](self, mode)
        finally:
            module._all_gather = gather
    real = module.fleet
    module.fleet = _FleetForStaticHapi(real, strategy_in_effect(fleet_obj))
    try:
        log.info("paddle.Model (static mode): the train program is minimized with strategy.ngraph on %d ranks",
                 self._nranks)
        return _ORIGINAL["_make_program"](self, mode)
    finally:
        module.fleet = real


def static_pir_make_program(self, mode):
    """``StaticPIRGraphAdapter._make_program``: Paddle's minimizes the train program with the
    optimizer alone, whatever the ranks (each rank would train on its own batch). With
    ``strategy.ngraph`` on several ranks, its ``minimize`` is ``strategy.ngraph``'s (the strategy
    checked and mapped, lars and lamb wrapping the optimizer as fleet's NgraphOptimizer does), and
    the program is then transpiled keeping what hapi fetches (outputs, losses, metrics), which in
    PIR are not all sinks of the program."""
    from ..config import Config
    from ..distributed import detect_launcher, make_transport
    from ..quiet import paddle_minimize_warnings_ignored
    from ..transpiler import transpile
    from . import features
    from .dygraph import strategy_in_effect
    from .meta_optimizer import validate_for_fleet

    fleet_obj = _fleet_with_ngraph()
    optimizer = getattr(self.model, "_optimizer", None)
    if (fleet_obj is None or mode != "train" or self._nranks < 2 or optimizer is None
            or self._progs.get(mode) is not None):
        return _ORIGINAL["pir_make_program"](self, mode)
    strategy = strategy_in_effect(fleet_obj)
    config = Config(**validate_for_fleet(fleet_obj, strategy))

    def minimize(loss, *args, **kwargs):
        del optimizer.minimize  # the optimizer's own again
        inner = features.inner_optimizer(optimizer, strategy)
        with paddle_minimize_warnings_ignored():
            return inner.minimize(loss, *args, **kwargs)

    optimizer.minimize = minimize
    try:
        result = _ORIGINAL["pir_make_program"](self, mode)
    finally:
        optimizer.__dict__.pop("minimize", None)
    endpoints = self._endpoints[mode]
    fetch = [v for key in ("output", "loss") for v in endpoints[key]]
    fetch += [v for metric in endpoints["metric"] for v in metric]
    info = detect_launcher()
    transport = make_transport(config.transport, timeout_s=config.timeout_s, info=info)
    transpile(self._progs[mode], config, nranks=info.size, transport=transport, fetch_list=fetch)
    log.info("paddle.Model (static mode, PIR): the train program is transpiled for %d ranks (strategy.ngraph)",
             info.size)
    return result


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
    static = getattr(module, "StaticGraphAdapter", None)
    if static is not None and "_make_program" not in _ORIGINAL:
        _ORIGINAL["_make_program"] = static._make_program
        static._make_program = static_make_program
    static_pir = getattr(module, "StaticPIRGraphAdapter", None)
    if static_pir is not None and "pir_make_program" not in _ORIGINAL:
        _ORIGINAL["pir_make_program"] = static_pir._make_program
        static_pir._make_program = static_pir_make_program
    return True
