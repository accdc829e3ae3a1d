"""``NgraphOptimizer``: the fleet meta optimizer of ``strategy.ngraph``, and the hooks into fleet.

Paddle 3.3.1's static collective training does not run on CPU: in PIR mode
``Fleet._minimize_impl`` fails before choosing a meta optimizer (it calls
``startup.clone(for_test=False)``, a legacy-only signature); in legacy mode it picks
``RawProgramOptimizer``, whose NCCL/XPU communicator ops fail with ``comm_id must be
generated in paddlepaddle-xpu``. So, when ``strategy.ngraph`` is on, the wrapped
``Fleet._minimize_impl`` takes its own path, which follows Paddle's for the
bookkeeping (meta optimizers found by ``MetaOptimizerFactory`` and filtered with
``_can_apply``, ``strategy_compiler``, ``valid_strategy``, the collective runtime) and
skips those two failing steps. With the flag off, Paddle's own path runs unchanged.

This module imports Paddle: it is imported only once ``paddle.distributed.fleet`` is.
"""
from __future__ import annotations

import copy
import logging
import os

import paddle
from paddle.distributed.fleet.meta_optimizers.meta_optimizer_base import MetaOptimizerBase
from paddle.framework import in_dynamic_mode

from ..errors import ConfigError
from ..quiet import paddle_minimize_warnings_ignored
from . import dygraph, features
from .features import check_strategy
from .hybrid_groups import init_hybrid_parallel_env
from ..config import Config
from ..config_sources import resolve_config
from ..log_level import apply_log_level

log = logging.getLogger("paddle_ngraph.fleet")

# Meta optimizers that implement the plain data parallelism we replace (those of the features the
# engine implements itself: features.ABSORBED).
REPLACED = ("RawProgramOptimizer",)


def validate_for_fleet(fleet_obj, strategy) -> dict:
    """Everything that can be checked before minimize; returns the effective configuration."""
    if getattr(fleet_obj, "_role_maker", None) is None:
        raise ConfigError("strategy.ngraph: call fleet.init(is_collective=True) before fleet.distributed_optimizer")
    if not fleet_obj._is_collective:
        raise ConfigError("strategy.ngraph needs collective training: fleet.init(is_collective=True) "
                          "(parameter-server mode is not supported)")
    check_strategy(strategy)
    check_ranks_agree(fleet_obj._role_maker)
    return resolve_config(features.merged_overrides(strategy))


def check_ranks_agree(role_maker) -> None:
    """Fleet counts its workers from Paddle's variables (``PADDLE_TRAINER_ENDPOINTS`` alone is
    enough), the engine from its launcher's (``mpirun``, or ``PADDLE_TRAINERS_NUM`` of
    ``paddle.distributed.launch``). Where they disagree, each process would train alone, with no
    AllReduce, while fleet hands it a shard of the data: refused, on every process alike."""
    from ..distributed import detect_launcher

    info = detect_launcher()
    workers, index = role_maker._worker_num(), role_maker._worker_index()
    if workers != info.size:
        started = (f"{info.launcher} started {info.size} rank(s)" if info.launcher != "none" else
                   "this process was started alone (neither mpirun nor paddle.distributed.launch: "
                   "PADDLE_TRAINERS_NUM is not set)")
        raise ConfigError(f"strategy.ngraph: fleet sees {workers} workers (this is worker {index}; "
                          f"PADDLE_TRAINER_ENDPOINTS={os.environ.get('PADDLE_TRAINER_ENDPOINTS', '')!r}) but "
                          f"{started}: the engine would not average over fleet's workers. Start every worker "
                          f"with mpirun or paddle.distributed.launch, or, for one process, unset Paddle's "
                          f"PADDLE_TRAINER_* variables")


class NgraphOptimizer(MetaOptimizerBase):
    """Appends backward and the optimizer with the inner optimizer, then transpiles the program
    for this launcher's ranks with the configured backend, transport, bucket size and reduction."""

    def __init__(self, optimizer):
        super().__init__(optimizer)
        self.inner_opt = optimizer
        self.meta_optimizers_white_list = []
        self.meta_optimizers_black_list = []
        self.config = None
        self.transport = None
        self.program = None

    def _can_apply(self):
        if in_dynamic_mode() or not self.role_maker._is_collective:
            return False
        return bool(getattr(self.user_defined_strategy, "ngraph", False))

    def _disable_strategy(self, dist_strategy):
        dist_strategy.ngraph = False

    def _enable_strategy(self, dist_strategy, context=None):
        return  # never switched on by strategy.auto: it changes where the program runs

    def minimize_impl(self, loss, startup_program=None, parameter_list=None, no_grad_set=None):
        from ..transpiler import transpile
        from ..distributed import detect_launcher, make_transport

        strategy = self.user_defined_strategy
        config = Config(**(self.config or resolve_config(features.merged_overrides(strategy))))
        apply_log_level(config.log_level)
        refuse_transpiled(loss.block.program)
        inner = features.inner_optimizer(self.inner_opt, strategy)  # lars, lamb: as Paddle's meta optimizers
        checkpoints = _checkpoint_values(loss.block.program, config.recompute_checkpoints)
        with paddle_minimize_warnings_ignored():  # Paddle's own, on every PIR minimize (quiet.py)
            optimize_ops, params_grads = inner.minimize(loss, startup_program, parameter_list, no_grad_set)
        info = detect_launcher()
        self.transport = make_transport(config.transport, timeout_s=config.timeout_s, info=info)
        self.program = loss.block.program
        transpile(self.program, config, nranks=info.size, transport=self.transport, recompute_checkpoints=checkpoints)
        log.info("rank %d/%d: program transpiled for the %s backend over the %s transport, zero_stage %d, "
                 "compress %s", self.transport.rank, self.transport.size, config.backend, self.transport.name,
                 config.zero_stage, config.compress)
        return optimize_ops, params_grads


def _checkpoint_values(program, names):
    """``recompute_configs['checkpoints']`` of a PIR program as its Values, read before ``minimize``:
    a PIR value's name here is its op's position ('%<op index>.<output>', which a user can only read
    from the forward program), and minimize inserts ops before the forward's. Legacy names are the
    variables' own: kept as they are. None without checkpoints (the config's value stands)."""
    if not names:
        return None
    from ..frontend import decode

    view = decode(program)
    if view.ir != "pir":
        return None
    return [view.values.get(name, name) for name in names]


def refuse_transpiled(program) -> None:
    """A second ``minimize`` on one program (a second optimizer) would append its backward to the
    engine operators the first one left, which have no gradient: Paddle fails there, naming an
    operator the user never wrote. The whole program is transpiled once, after every optimizer."""
    from ..transpiler import engines_of

    if engines_of(program):
        raise ConfigError("strategy.ngraph: this program was already transpiled by an earlier "
                          "fleet.distributed_optimizer(...).minimize, and a program is transpiled once, with all "
                          "its optimizers. With several optimizers, call each one's own minimize (without "
                          "fleet.distributed_optimizer), then paddle_ngraph.transpile(main) once "
                          "(docs/fleet.md, \"Several optimizers\")")


# --- hooks into fleet ---------------------------------------------------------------------------
_ORIGINALS: dict = {}


def _clone_startup(program):
    try:
        return program.clone() if paddle.framework.in_pir_mode() else program.clone(for_test=False)
    except Exception:  # bookkeeping only
        return program


def ngraph_minimize(fleet_obj, loss, startup_program=None, parameter_list=None, no_grad_set=None):
    """``Fleet._minimize_impl`` for ``strategy.ngraph``: Paddle's static collective path without
    the steps that fail on CPU, with NgraphOptimizer as the one meta optimizer."""
    from paddle.distributed import fleet
    from paddle.distributed.fleet.base.meta_optimizer_factory import MetaOptimizerFactory
    from paddle.distributed.fleet.base.runtime_factory import RuntimeFactory

    strategy = fleet_obj._user_defined_strategy
    config = validate_for_fleet(fleet_obj, strategy)
    program = loss.block.program
    if startup_program is None:
        startup_program = paddle.static.default_startup_program()
    fleet_obj.origin_main_program = program
    fleet_obj.origin_startup_program = _clone_startup(startup_program)
    context = {"user_defined_strategy": copy.deepcopy(strategy), "origin_main_program": program,
               "origin_main_programs": [program], "loss": loss, "origin_startup_program": startup_program,
               "origin_startup_programs": [startup_program], "role_maker": fleet_obj._role_maker}

    strategy_copy = copy.deepcopy(strategy)
    ours, others, not_applied = None, [], []
    for opt in MetaOptimizerFactory()._get_valid_meta_optimizers(fleet_obj.user_defined_optimizer):
        opt._set_basic_info(loss, fleet_obj._role_maker, fleet_obj.user_defined_optimizer, strategy_copy)
        try:
            applies = opt._can_apply()
        except Exception:
            applies = False
        if isinstance(opt, NgraphOptimizer) and applies:
            ours = opt
        elif applies and type(opt).__name__ not in REPLACED and type(opt).__name__ not in features.ABSORBED:
            others.append(type(opt).__name__)
        else:
            not_applied.append(opt)
    if ours is None:  # pragma: no cover - validate_for_fleet checked what _can_apply checks
        raise ConfigError("strategy.ngraph is on but NgraphOptimizer cannot apply (is the program static and "
                          "fleet.init(is_collective=True) called?)")
    if others:
        raise ConfigError(f"strategy.ngraph cannot be combined with the meta optimizer(s) {', '.join(others)}")
    ours.config = config

    meta_optimizer, _ = fleet_obj.strategy_compiler.generate_optimizer(
        loss, fleet_obj._role_maker, fleet_obj.user_defined_optimizer, strategy_copy, [ours], [])
    try:
        valid_strategy = fleet_obj.strategy_compiler._get_valid_strategy(strategy_copy, not_applied)
    except Exception:  # bookkeeping only
        valid_strategy = strategy_copy
    context["valid_strategy"] = copy.deepcopy(valid_strategy)
    context["applied_meta_list"] = fleet_obj.strategy_compiler._get_applied_meta_list()
    context["applied_graph_list"] = []
    fleet_obj._context = context
    fleet_obj.valid_strategy = valid_strategy

    optimize_ops, params_grads = meta_optimizer.minimize(loss, startup_program, parameter_list,
                                                         no_grad_set=no_grad_set)
    context["program_optimize_ops"] = optimize_ops
    context["program_params_grads"] = params_grads
    if fleet_obj._runtime_handle is None:
        fleet_obj._runtime_handle = RuntimeFactory()._create_runtime(context)
    fleet.util._set_strategy(context["valid_strategy"])
    return optimize_ops, params_grads


def _minimize_impl(self, loss, startup_program=None, parameter_list=None, no_grad_set=None):
    strategy = getattr(self, "_user_defined_strategy", None)
    if getattr(strategy, "ngraph", False):
        return ngraph_minimize(self, loss, startup_program, parameter_list, no_grad_set)
    return _ORIGINALS["_minimize_impl"](self, loss, startup_program, parameter_list, no_grad_set)


def _fleet_distributed_optimizer(self, optimizer, strategy=None):
    if in_dynamic_mode() and getattr(dygraph.strategy_in_effect(self, strategy), "ngraph", False):
        return dygraph.distributed_optimizer(self, optimizer, strategy)
    result = _ORIGINALS["Fleet.distributed_optimizer"](self, optimizer, strategy)
    chosen = getattr(self, "_user_defined_strategy", None)
    if getattr(chosen, "ngraph", False):
        validate_for_fleet(self, chosen)  # fails here, on every rank, before any communication
    return result


def _distributed_optimizer(*args, **kwargs):
    """``fleet.distributed_optimizer``: with ``strategy.ngraph`` in dynamic mode, the user's
    optimizer as it is (the engine averages the gradients in backward; fleet/dygraph.py)."""
    if in_dynamic_mode():
        from paddle.distributed.fleet import fleet as fleet_obj

        strategy = kwargs.get("strategy", args[1] if len(args) > 1 else None)
        if getattr(dygraph.strategy_in_effect(fleet_obj, strategy), "ngraph", False):
            optimizer = kwargs.get("optimizer", args[0] if args else None)
            return dygraph.distributed_optimizer(fleet_obj, optimizer, strategy)
    return _ORIGINALS["distributed_optimizer"](*args, **kwargs)


def _distributed_model(model, *args, **kwargs):
    """``fleet.distributed_model``: with ``strategy.ngraph`` in dynamic mode, the Layer on the
    engine (``paddle_ngraph.DataParallel``), else Paddle's."""
    from paddle.distributed.fleet import fleet as fleet_obj

    if in_dynamic_mode() and getattr(dygraph.strategy_in_effect(fleet_obj), "ngraph", False):
        return dygraph.distributed_model(fleet_obj, model)
    return _ORIGINALS["distributed_model"](model, *args, **kwargs)


def _collective_env(self):
    """Under mpirun without Paddle's launcher variables, Paddle sees one lone worker per process;
    make ``fleet.worker_index()``/``worker_num()`` report MPI's rank and size instead."""
    _ORIGINALS["_collective_env"](self)
    from ..distributed import detect_launcher

    info = detect_launcher()
    if info.launcher == "mpirun" and info.size > 1 and getattr(self, "_non_distributed", False):
        self._current_id = info.rank
        self._trainers_num = info.size


def install(fleet_module) -> None:
    """Registers NgraphOptimizer where the factory looks and wraps the fleet entry points; idempotent."""
    from paddle.distributed.fleet import meta_optimizers
    from paddle.distributed.fleet import model as fleet_model
    from paddle.distributed.fleet import optimizer as fleet_optimizer
    from paddle.distributed.fleet.base import meta_optimizer_factory
    from paddle.distributed.fleet.base.role_maker import PaddleCloudRoleMaker
    from paddle.distributed.fleet.fleet import Fleet

    if getattr(Fleet, "_paddle_ngraph_installed", False):
        return
    meta_optimizers.NgraphOptimizer = NgraphOptimizer
    meta_optimizer_factory.NgraphOptimizer = NgraphOptimizer  # the factory looks names up in its globals
    if "NgraphOptimizer" not in meta_optimizer_factory.meta_optimizer_names:
        meta_optimizer_factory.meta_optimizer_names.append("NgraphOptimizer")

    _ORIGINALS["_minimize_impl"] = Fleet._minimize_impl
    _ORIGINALS["Fleet.distributed_optimizer"] = Fleet.distributed_optimizer
    _ORIGINALS["distributed_optimizer"] = fleet_optimizer.distributed_optimizer
    _ORIGINALS["_collective_env"] = PaddleCloudRoleMaker._collective_env
    _ORIGINALS["distributed_model"] = fleet_model.distributed_model
    fleet_model.distributed_model = _distributed_model
    fleet_module.distributed_model = _distributed_model
    Fleet._minimize_impl = _minimize_impl
    Fleet.distributed_optimizer = _fleet_distributed_optimizer
    fleet_optimizer.distributed_optimizer = _distributed_optimizer
    fleet_module.distributed_optimizer = _distributed_optimizer
    PaddleCloudRoleMaker._collective_env = _collective_env
    _ORIGINALS["_init_hybrid_parallel_env"] = Fleet._init_hybrid_parallel_env
    Fleet._init_hybrid_parallel_env = init_hybrid_parallel_env(Fleet._init_hybrid_parallel_env)
    Fleet._paddle_ngraph_installed = True


# Imported directly before Paddle (``import paddle_ngraph.fleet.meta_optimizer``), this module
# imports fleet itself while half-defined; the hooks are installed now that it is complete.
from . import install_hooks as _install_hooks  # noqa: E402

_install_hooks()
