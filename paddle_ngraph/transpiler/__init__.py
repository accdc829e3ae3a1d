"""``transpile``: make a Paddle program run on this engine under a plain ``exe.run``.

Mechanism (documented in the README): the program's ops are converted into one
IR function; they are replaced in place by a single ``ngraph_engine`` Paddle
custom operator whose kernel calls the compiled function; the forward sinks
(loss, metrics) stay as Paddle ops reading the engine's outputs, so feed names
and fetch handles stay valid. Parameters and optimizer state remain Paddle
variables in the scope, updated in place, so ``paddle.static.save``/``load`` work.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping

from .. import _bridge
from ..backends import backend_for
from ..config import FIELDS, KEYS, Config, unknown_keys_error, valid_keys
from ..errors import ConfigError, UnsupportedOpsError
from ..frontend import FORWARD, decode, find_unsupported
from ..frontend.shard_axes import shard_axes
from ..ir.groups import RankLayout
from ..ir.roles import Role, written_back
from . import engine_op, originals
from .engine import Engine, SegmentLinks, engines
from .engine_op import is_engine_op
from .lowering import lower_segment, plan_program
from .rewrite import leave_feed_checks_to_engines, rewrite_legacy, rewrite_pir
from .schedules import AccumulationSchedule, LocalSGDSchedule, Schedule, Variant
from .sharded_state import ShardedState

__all__ = ["transpile", "engines", "engines_of", "release", "Config"]
log = logging.getLogger("paddle_ngraph.transpiler")


def _default_log_level() -> None:
    """Gives the ``paddle_ngraph`` logger a level when nobody has: ``PADDLE_NGRAPH_LOG_LEVEL``, else
    WARNING. ``import paddle`` sets the root logger to INFO, so a logger left at NOTSET would
    print our INFO lines. Fleet training (``log_level``) or the user may have set one: kept."""
    import os

    from ..config_sources import ENV_PREFIX, validate_value
    from ..log_level import apply_log_level

    if logging.getLogger("paddle_ngraph").level != logging.NOTSET:
        return
    name = ENV_PREFIX + "LOG_LEVEL"
    text = os.environ.get(name)
    apply_log_level(validate_value("log_level", text.strip(), f"environment variable {name}") if text else "WARNING")


# Arguments of one call, not configuration: the ranks expected, a transport object (a name is
# the ``transport`` configuration key), values to keep fetchable.
PER_CALL_ARGUMENTS = ("nranks", "transport", "fetch_list")


def transpile(program, config: Config | None = None, *, nranks: int | None = None, transport=None, fetch_list=(),
              **overrides):
    """Rewrites ``program`` in place; returns it.

    ``config``: a ``paddle_ngraph.Config`` (default: ``Config()``); keyword ``overrides`` of its
    keys take precedence over it (a keyword given as None keeps the config's value).
    ``nranks``: ranks of data-parallel training (default: the transport's; checked against it).
    ``transport``: a ``paddle_ngraph.distributed`` transport, or the name of one (the ``transport``
    key; default ``auto``: chosen from the launcher).
    ``fetch_list``: further values to keep fetchable beyond the loss and metrics.

    With ``PADDLE_NGRAPH_TIMELINE=path.json`` in the environment (read here, once), every step's
    kernels and collectives are recorded into a Chrome trace per rank (backends/timeline.py).

    Configuration keys (the fields of ``paddle_ngraph.Config``; documented in configs/defaults.yaml):
    {keys}
    """
    if isinstance(transport, str):
        overrides["transport"], transport = transport, None
    view, config = _configured(program, config, overrides)
    from ..backends.timeline import timeline_from_env
    from ..distributed import resolve_transport

    engine_op.library()  # registers the operator before the program refers to it
    checkpoints = recompute_checkpoints(view, config.recompute_checkpoints)
    unsupported = find_unsupported(view, [op for op in view.ops if op.block == 0])
    if unsupported and not config.fallback:
        raise UnsupportedOpsError(unsupported)
    # With fallback=False a converter's refusal is raised by the conversion below, naming the op.
    compiler = backend_for(config)
    transport = resolve_transport(transport, nranks, config.transport, config.timeout_s)
    plan, converted = plan_program(view, config, transport.size, compiler, fetch_list, rank=transport.rank)
    _check_plan(view, plan, config, transport.size)
    timeline = timeline_from_env(transport.rank, transport.size)
    if transport.size > 1:
        transport.set_hierarchical(config.hierarchical)
        transport.shared_memory = config.shm_allreduce
    handover: dict = {}
    unmade: set[str] = set()
    engines = [_build_engine(view, plan, seg, compiler, transport, timeline, handover, config, checkpoints, unmade,
                             converted, ordered=i > 0) for i, seg in enumerate(plan.segments)]
    if checkpoints and not any(e.recomputed for e in engines):
        log.warning("%s: recompute_checkpoints %s: no forward value is computed before them and read by the "
                    "backward pass, so nothing is recomputed", view.source, ", ".join(checkpoints))
    if engines and plan.fallback and transport.size > 1:
        _start_paddle_state_equal(view, plan, engines, transport)
    original = originals.remember(view)  # for evaluation clones, export and fetch checks
    original.config = config
    original.nranks = transport.size
    if view.ir == "pir":
        rewrite_pir(view, plan, engines)
    else:
        rewrite_legacy(view, plan, engines)
        if transport.size > 1:
            leave_feed_checks_to_engines(view, engines)
    originals.complete(original)
    log.info("rank %d/%d: %s transpiled: %d engine segment(s), %s backend, %s transport", transport.rank,
             transport.size, view.source, len(engines), compiler.name, transport.name)
    return program


def _configured(program, config, overrides: dict):
    """The program's view and the effective ``Config`` (recompute checkpoints given as Variables or
    Values become their names); sets the log level the configuration asks for, if it asks."""
    view = None
    handles = overrides.get("recompute_checkpoints")
    if isinstance(handles, (list, tuple)) and any(not isinstance(h, str) for h in handles):
        view = decode(program)  # Variables or PIR Values: their names in this program
        overrides["recompute_checkpoints"] = [checkpoint_name(view, h) for h in handles]
    log_level_given = config is not None or overrides.get("log_level") is not None
    config = options(config, overrides)
    if log_level_given:
        from ..log_level import apply_log_level

        apply_log_level(config.log_level)
    else:  # a level the application (or fleet) set is kept
        _default_log_level()
    return view or decode(program), config


# Paddle's own collectives and stream synchronisations. Paddle 3.3.1 has no communicator for them in
# a static program on CPU (the ranks' transport is the engine's, not Paddle's): one left to Paddle,
# in block 0 or in a sub-block Paddle runs, fails at the first step.
PADDLE_COMMUNICATION = frozenset({
    "all_reduce", "c_allreduce_sum", "c_allreduce_max", "c_allreduce_min", "c_allreduce_prod",
    "c_allreduce_avg", "mp_allreduce_sum", "broadcast", "c_broadcast", "reduce", "c_reduce_sum",
    "all_gather", "c_allgather", "reduce_scatter", "c_reducescatter", "c_concat", "barrier",
    "c_sync_calc_stream", "c_sync_comm_stream", "c_comm_init", "c_comm_init_all", "c_gen_nccl_id"})
DATA_PARALLEL_HINT = ("the program already holds Paddle's own data-parallel communication (fleet's "
                      "RawProgramOptimizer inserts it: strategy.without_graph_optimization, or test_dist_base's "
                      "_insert_comm_op); build it with the optimizer's own minimize and transpile that (the engine "
                      "averages the gradients over the ranks), or use fleet with strategy.ngraph = True, which "
                      "replaces RawProgramOptimizer")


def _check_paddle_communication(view, plan):
    """Refuses what Paddle's data-parallel rewrite left in the program that cannot train as it means:
    a gradient buffer fused by ``coalesce_tensor`` (its outputs are views of the fused buffer that an
    ``all_reduce`` reduces in place; the engine's outputs are its own, so such a reduction would miss
    the gradients and the ranks train on half of them without a word), and Paddle's communication ops
    left to Paddle."""
    fused = {}
    for op in view.ops:
        if op.type.removeprefix("pd_op.") == "coalesce_tensor":
            for name in op.outputs.get("fusedoutput") or []:
                fused[name] = op
    for op in view.ops:
        for name in op.input_names():
            if name in fused and op is not fused[name]:
                made = ", ".join(fused[name].outputs.get("output") or [])
                raise ConfigError(f"{fused[name].location()} fuses {made} into the buffer '{name}', which "
                                  f"{op.location()} reads; the engine keeps those variables apart, not as views of "
                                  f"one buffer, so that op would miss what the engine writes into them; "
                                  f"{DATA_PARALLEL_HINT}")
    left = {id(op) for op in plan.fallback}
    for op in view.ops:
        if op.type.removeprefix("pd_op.") in PADDLE_COMMUNICATION and (op.block != 0 or id(op) in left):
            raise ConfigError(f"{op.location()} is one of Paddle's communication operations (a collective or its stream synchronisation) and would run in Paddle "
                              f"({'in a sub-block' if op.block else 'left to Paddle'}), which has no communicator "
                              f"for it in a static program on CPU; {DATA_PARALLEL_HINT}")


# Ops that take the norm of a gradient for clipping (ClipGradByNorm's clip_by_norm, the squared
# norms ClipGradByGlobalNorm sums): on a shard they measure this rank's part of the gradient only.
NORM_OPS = frozenset({"clip_by_norm", "squared_l2_norm", "p_norm", "frobenius_norm", "norm"})


def _check_norms_of_shards(view, config):
    """Under model parallelism, refuses clipping by the norm of a sharded parameter's gradient: the
    op sees this rank's shard, so each rank would clip by another norm than the dense model's and
    the shards would train no model, without a word. (Paddle's static TensorParallelOptimizer does
    not correct these norms either; in dygraph fleet.distributed_optimizer does.)"""
    if config.mp_degree == 1:
        return
    sharded = set(shard_axes(view))
    for op in view.ops:
        if op.type.removeprefix("pd_op.") not in NORM_OPS:
            continue
        shards = sorted({n.split("@GRAD")[0] for n in op.input_names() if "@GRAD" in n} & sharded)
        if shards:
            raise ConfigError(
                f"{op.location()} takes the norm of the gradient of {', '.join(repr(n) for n in shards)}, a shard of "
                f"a tensor-parallel layer (mp_degree {config.mp_degree}): it would clip by this rank's part of the "
                "gradient, not by the dense model's norm. Clip by value (paddle.nn.ClipGradByValue, exact on "
                "shards), or train the model in dygraph, where fleet.distributed_optimizer clips by the dense norms "
                "(docs/model-parallel.md)")


def _check_plan(view, plan, config, nranks: int):
    """Refuses what needs the whole program on the engine when ops fall back, on several ranks
    an update in a sub-block whose gradient nothing averages, Paddle's own communication that
    would run in Paddle or miss the engine's values, and norms of shards' gradients; says what
    falls back and why."""
    _check_paddle_communication(view, plan)
    _check_norms_of_shards(view, config)
    if nranks > 1 and plan.unaveraged:
        op, name = plan.unaveraged[0]
        what = (f"an optimizer update in its sub-block reads the gradient '{name}', which an op left to Paddle makes"
                if op.control_flow else f"its gradient '{name}' is {view.vars[name].kind}, which the engine does "
                                        f"not hold")
        raise ConfigError(f"{op.location()}: {what}; on {nranks} ranks nothing averages it before the update")
    if len(plan.segments) > 1 and (config.zero_stage or config.accumulate_steps > 1 or config.localsgd_k_steps):
        what = ("zero_stage 1" if config.zero_stage else "accumulate_steps" if config.accumulate_steps > 1
                else "localsgd_k_steps (local SGD)")
        raise ConfigError(f"{what} needs the whole program on the engine; these ops fall back to Paddle: "
                          f"{plan.fallback_summary()}")
    if plan.fallback:
        log.info("%s: %d op(s) left to Paddle (%s); %d engine segment(s)", view.source, len(plan.fallback),
                 plan.reason_summary(), len(plan.segments))
        for op in plan.fallback:
            log.debug("%s left to Paddle: %s: %s", op.location(), *plan.reason(op))


def _start_paddle_state_equal(view, plan, engines, transport):
    """Ranks start identical: the engines broadcast what they read at their first step; what
    Paddle ops read (a parameter of a custom op) is broadcast here too, since Paddle may run such
    an op before the engine that reads it, or no engine reads it."""
    read = {n for e in engines for n in e.input_names}
    by_paddle = {n for op in plan.fallback for n in op.input_names()}
    names = sorted(n for n, v in view.vars.items()
                   if v.persistable and (v.is_parameter or _is_optimizer_state(n, view))
                   and (n in by_paddle or n not in read))
    if names and any(e.replicas is not None for e in engines):
        raise ConfigError(f"mp_degree > 1 (tensor parallelism) with parameters that ops left to Paddle read "
                          f"({', '.join(names)}): their start values cannot be made equal per group yet; run "
                          f"with fallback=False to see the ops the engine does not convert")
    if names:
        from ..distributed import broadcast_scope_variables

        # Now if the startup program has run (every rank transpiles at the same point): at the
        # first step Paddle may run such an op before the first engine, which nothing orders.
        # Otherwise (fleet transpiles before the startup program) the first engine does it.
        if not broadcast_scope_variables(names, transport):
            engines[0].scope_sync = names


def options(config: Config | None, overrides: dict, source: str = "transpile") -> Config:
    """``config`` (default ``Config()``) with the keyword ``overrides`` over it, validated; errors
    name ``source``, an unknown keyword lists the valid ones."""
    unknown = [k for k in overrides if k not in KEYS]
    if unknown:
        raise unknown_keys_error(unknown, source, f"; per-call arguments: {', '.join(PER_CALL_ARGUMENTS)}")
    given = {k: v for k, v in overrides.items() if v is not None}
    if config is None:
        config = Config.build(given, source)
    elif isinstance(config, Config):
        config = config.replace(source, **given) if given else config
    elif isinstance(config, Mapping):
        config = Config.build({**config, **given}, source)
    else:
        raise ConfigError(f"{source}: config must be a paddle_ngraph.Config or a dict of configuration values, got "
                          f"{type(config).__name__} {config!r}; valid keys: {valid_keys()}")
    return config


transpile.__doc__ = transpile.__doc__.replace("{keys}", "\n    ".join(
    f"``{f.name}`` (default ``{(f.metadata['shown_default'] or f.default)!r}``): {f.metadata['summary']}"
    for f in FIELDS.values()))


def _build_engine(view, plan, seg, compiler, transport, timeline, handover, config, checkpoints, unmade, converted,
                  ordered: bool) -> Engine:
    """Lowers one segment (conversion and passes), compiles its functions and registers its engine."""
    from ..distributed import initial_sync

    lowered = lower_segment(view, plan, seg, config, transport.size, unmade, checkpoints, converted,
                            rank=transport.rank).lowered
    function = lowered.function
    compile_ = lambda f: compiler.compile(f, inplace_results=written_back(f))  # noqa: E731
    sharded = None
    if lowered.sharding is not None and lowered.sharding.buckets:
        slices = [p.name for p in function.parameters if p.role is Role.SHARD]
        sharded = ShardedState(lowered.sharding.buckets, slices, transport.rank, transport.size)
    watchdog = None
    if transport.size > 1 and transport.stall_watchdog:
        from ..distributed.watchdog import watchdog_for

        watchdog = watchdog_for(transport, config.timeout_s)
    links = SegmentLinks(handover, seg.handed_in, seg.handed_out, order_inputs=(1 if ordered else 0) + len(seg.after))
    engine = Engine(_schedule(lowered, config, compile_, list(seg.outputs)), list(seg.outputs), transport=transport,
                    on_first_run=initial_sync if transport.size > 1 else None, watchdog=watchdog, sharded=sharded,
                    timeline=timeline, links=links)
    engine.recomputed = lowered.recomputed
    engine.plan, engine.segment = plan, seg  # the plan transpile executed: what runs here, what Paddle runs
    engine.replicas = _replica_groups(view, config, transport)
    if engine.replicas is not None:
        engine.shard_axes = shard_axes(view)
    if engine.recomputed:
        log.info("engine segment %d: %d forward node(s) recomputed in backward (recompute_checkpoints)", seg.index,
                 len(engine.recomputed))
    engine_op.set_output_meta(engine.id, engine.output_codes, engine.output_shapes())
    _bridge.register_engine(engine.id, engine)
    return engine


def _replica_groups(view, config, transport):
    """Under model parallelism, the groups among which the engine's values start equal
    (``initial_sync``); None without it (every rank starts from rank 0's)."""
    if config.mp_degree == 1:
        return None
    from ..distributed import ReplicaGroups

    layout = RankLayout(transport.size, transport.rank, config.mp_degree)
    return ReplicaGroups(layout.dp_group(), layout.mp_group(),
                         frozenset(n for n, v in view.vars.items() if v.is_distributed))


def _schedule(lowered, config, compile_, fetch_names) -> Schedule:
    """The variants of a lowered segment, compiled, and the schedule that chooses among them."""
    function = lowered.function
    apply = Variant(function, compile_(function), fetch_names)
    accumulation, localsgd = lowered.accumulation(), lowered.local_sgd(config)
    if accumulation:
        accumulate = Variant(accumulation.accumulate, compile_(accumulation.accumulate), fetch_names)
        return AccumulationSchedule(apply, accumulate, accumulation.steps, accumulation.accumulators)
    if localsgd:
        local = Variant(localsgd.local, compile_(localsgd.local), fetch_names)
        return LocalSGDSchedule(apply, local, localsgd, [p.name for p in function.parameters])
    return Schedule(apply)


def checkpoint_name(view, handle) -> str:
    """Our name of a checkpoint given as a name, a legacy Variable or a PIR Value."""
    try:
        return view.name_of(handle)
    except (KeyError, AttributeError):
        raise ConfigError(f"recompute_checkpoints: {handle!r} is not a value of this program") from None


def recompute_checkpoints(view, names) -> list[str]:
    """The checkpoints that name forward values. Feeds and parameters are kept anyway and are
    dropped; any other name is a ConfigError naming it (with the forward variables most like it)."""
    if not names:
        return []
    forward = {n for op in view.ops if op.role == FORWARD for n in op.output_names()}
    found = []
    for name in names:
        if name in forward:
            found.append(name)
            continue
        info = view.vars.get(name)
        if info is not None and (info.is_data or info.persistable) and not any(
                name in op.output_names() for op in view.ops):
            continue  # a graph input: kept without asking
        if info is not None:
            raise ConfigError(f"recompute_checkpoints: '{name}' is not a forward variable of {view.source} (no "
                              f"forward op makes it: a gradient, or state the optimizer updates); checkpoints are "
                              f"activations of the forward pass")
        import difflib

        close = difflib.get_close_matches(name, sorted(forward), n=5, cutoff=0.6)
        hint = f"; forward variables with similar names: {', '.join(close)}" if close else ""
        if view.ir == "pir":
            hint += ("; in PIR, values are named '%<op index>.<output>' here: pass the Values themselves to "
                     "transpile(..., recompute_checkpoints=[...])")
        raise ConfigError(f"recompute_checkpoints: no variable '{name}' in {view.source}{hint}")
    return found


def _is_optimizer_state(name: str, view) -> bool:
    """Persistable variables that ops left to Paddle update (their moments, accumulators)."""
    return any(name in op.output_names() for op in view.ops if op.role == "optimize")


def _engine_ids(program) -> list[int]:
    """The ids of the engine operators of a transpiled ``program``, in program order."""
    ops = program.global_block().ops
    if ops and hasattr(ops[0], "name") and callable(ops[0].name):
        return [int(op.attrs()["engine_id"]) for op in ops if is_engine_op(op.name())]
    return [int(op.attr("engine_id")) for op in ops if is_engine_op(op.type)]


def engines_of(program) -> list[Engine]:
    """The engines a transpiled ``program`` runs, in program order (none: not transpiled)."""
    by_id = {e.id: e for e in engines()}
    return [by_id[i] for i in _engine_ids(program) if i in by_id]


def release(program) -> int:
    """Frees the engines of a transpiled ``program`` (compiled functions, their memory); the
    program can no longer run. Returns how many were freed. For processes that transpile many
    programs: an engine otherwise lives as long as the process."""
    ids = _engine_ids(program)
    for engine_id in ids:
        _bridge.unregister_engine(engine_id)
    originals.forget(program)
    return len(ids)
