"""One engine segment from Paddle ops to the functions its engine runs: conversion, then the pass
pipeline (passes/pipeline.py). ``transpile`` compiles what this returns; ``paddle-ngraph-dump``
prints it, so the tool shows the graph that ``transpile`` runs."""
from __future__ import annotations

import logging
from dataclasses import dataclass

from ..errors import ConfigError, ConversionError
from ..frontend import FORWARD, ConversionSession, loss_name
from ..ir import Function
from ..ir.groups import RankLayout
from ..ir.ops import Convert
from ..passes.pipeline import Facts, Lowered, build_passes, run_pipeline
from .gradients import clipped_updates, raw_gradients
from .segments import Plan, Segment, plan_segments, refused_by_converters
from .sparse_gradients import densify_sparse_gradients

log = logging.getLogger("paddle_ngraph.transpiler")


@dataclass
class LoweredSegment:
    segment: Segment
    session: ConversionSession
    lowered: Lowered

    @property
    def function(self) -> Function:
        return self.lowered.function


def function_name(plan: Plan, segment: Segment) -> str:
    """``main`` for a program the engine runs whole, ``main_<i>`` for each of several segments."""
    return "main" if len(plan.segments) == 1 else f"main_{segment.index}"


@dataclass
class ConvertedSegment:
    """A segment's function as its converters made it, before the passes."""
    segment: Segment
    session: ConversionSession
    function: Function
    facts: Facts


def new_session(view, config, nranks: int, rank: int = 0) -> ConversionSession:
    """``rank``: this rank, which decides its model-parallel groups (``config.mp_degree``)."""
    return ConversionSession(view, sync_batch_norm=config.sync_batch_norm and nranks > 1, nranks=nranks,
                             layout=RankLayout(nranks, rank, config.mp_degree))


def plan_program(view, config, nranks: int, backend, fetch_list=(), rank: int = 0
                 ) -> tuple[Plan, ConversionSession | None]:
    """The segment plan of block 0, converting the program once.

    The plan is first cut as if every converter accepted its op; with ``fallback`` the program is
    then converted op by op, each refusal (of a converter, or of the ``backend`` that will run the
    nodes) recorded, and the plan cut again if there were any. When the engine runs the program
    whole, as one segment, that conversion is the segment's (its parameters created first, in the
    segment's input order): the session is returned, and the segment is not converted again.
    Without ``fallback`` nothing is tried: a refusal is raised by the segment's conversion.

    On several ranks, sparse embedding gradients become dense variables of ``view`` first (or a
    ``ConfigError`` says why they cannot: sparse_gradients.py)."""
    densify_sparse_gradients(view, nranks)
    plan = plan_segments(view, fetch_list)
    if not config.fallback:
        return plan, None
    session = new_session(view, config, nranks, rank)
    whole = len(plan.segments) == 1 and not plan.fallback
    if whole:
        for name in plan.segments[0].inputs:
            session.value(name)
    refused = refused_by_converters(view, backend, session)
    if refused:
        return plan_segments(view, fetch_list, refused), None
    return plan, session if whole else None


def lower_segment(view, plan: Plan, seg: Segment, config, nranks: int, unmade: set, checkpoints=(),
                  converted: ConversionSession | None = None, dump_dir: str | None = None,
                  rank: int = 0) -> LoweredSegment:
    """Converts one segment and runs the pass pipeline on it (see ``convert_segment``)."""
    return run_passes(convert_segment(view, plan, seg, config, nranks, unmade, checkpoints, converted, rank), config,
                      nranks, dump_dir)


def run_passes(converted: ConvertedSegment, config, nranks: int, dump_dir: str | None = None) -> LoweredSegment:
    lowered = run_pipeline(converted.function, build_passes(config, nranks, converted.facts), dump_dir)
    if lowered.marked:
        log.info("engine segment %d: %d node(s) compute in %s (precision)", converted.segment.index,
                 len(lowered.marked), config.precision)
    return LoweredSegment(converted.segment, converted.session, lowered)


def convert_segment(view, plan: Plan, seg: Segment, config, nranks: int, unmade: set, checkpoints=(),
                    converted: ConversionSession | None = None, rank: int = 0) -> ConvertedSegment:
    """Converts one segment's ops into its function. ``unmade``: values earlier segments'
    converters did not make (updated), which are then not handed over. ``converted``: the session
    that converted the whole program as this one segment (``plan_program``), used as it is."""
    # Values an earlier segment's converters did not make (an input its reader's converter
    # ignores, such as batch_norm_grad's reserve_space) are not handed over.
    seg.handed_in = [n for n in seg.handed_in if n not in unmade]
    session = converted
    if session is None:
        session = new_session(view, config, nranks, rank)
        for name in seg.inputs + seg.handed_in:  # parameter order: Paddle's inputs, then the handed-over values
            session.value(name)
        session.convert_ops(seg.constants + seg.ops)
    for copy, name in seg.snapshots.items():
        # The state as the segment read it (segments.py, _snapshot_state_read_before_update): a
        # node of its own, so that the copy is made before the update overwrites the variable.
        state = session.initial[name].output() if name in session.initial else session.value(name)
        session.env[copy] = Convert(state, dtype=state.dtype.value).output()
    unmade.update(n for n in seg.handed_out if n not in session.env)
    seg.handed_out = [n for n in seg.handed_out if n in session.env]
    missing = [n for n in seg.outputs if n not in session.env]
    if missing:
        raise ConversionError(f"engine segment {seg.index}: the ops left to Paddle read {', '.join(missing)}, which "
                              f"the engine's converters do not make; run with fallback=False to see the ops")
    function = session.function(list(dict.fromkeys(seg.outputs + seg.handed_out)), name=function_name(plan, seg))
    with_raw = nranks > 1 or config.accumulate_steps > 1
    facts = Facts(averaged_results=list(seg.allreduce),
                  raw_gradients=_raw_gradient_values(view, seg, session) if with_raw else {},
                  clipped_params=_clipped_parameters(view, seg, session) if with_raw else set(),
                  skip_params=_not_averaged(view, config),
                  dp_group=session.layout.dp_group(),
                  recompute=_recompute_values(seg, session, checkpoints),
                  loss=lambda: _loss_value(view, session))
    return ConvertedSegment(seg, session, function, facts)


def _not_averaged(view, config) -> set[str]:
    """Parameters whose gradients no AllReduce averages. Without model parallelism, Paddle's
    ``is_distributed`` ones (each rank's own shard). With it (``mp_degree`` > 1) none: every
    gradient, sharded or not, is averaged over the data-parallel group, the ranks that hold the same
    shard (as Paddle's TensorParallelOptimizer does over its data-parallel ring)."""
    if config.mp_degree > 1:
        return set()
    return {n for n, v in view.vars.items() if v.is_distributed}


def _recompute_values(seg: Segment, session: ConversionSession, checkpoints):
    """The checkpoints' IR values among this segment's forward values, and the forward node ids;
    None without checkpoints."""
    if not checkpoints:
        return None
    made = {name: value for op in seg.ops if op.role == FORWARD
            for name, value in session.produced.get(id(op), {}).items()}
    return [made[n] for n in checkpoints if n in made], session.forward_ids


def _loss_value(view, session):
    """The IR value of the loss the backward pass starts from, for adaptive local SGD. The loss op
    itself is usually a forward sink left to Paddle for fetching: it is converted here once more."""
    name = loss_name(view)
    if name is None:
        raise ConfigError("localsgd_adaptive: no loss found (the backward pass's seed, the gradient of the loss, "
                          "is not in the program's main block); adaptive local SGD reads the loss")
    if name not in session.env:
        producer = next((op for op in view.ops if op.block == 0 and name in op.output_names()), None)
        if producer is None or not all(n in session.env for n in producer.input_names()):
            raise ConfigError(f"localsgd_adaptive: the loss '{name}' is not computed by the engine")
        session.convert_ops([producer])
    return session.env[name]


def _update_node(session, update_id):
    from ..ir.ops.optimizer import OptimizerUpdate

    return next((o.node for o in session.produced.get(update_id, {}).values()
                 if isinstance(o.node, OptimizerUpdate)), None)


def _clipped_parameters(view, seg, session) -> set[str]:
    """Names of the parameters of this segment's updates whose gradient is clipped (gradients.py)."""
    updates = [_update_node(session, update_id) for update_id in clipped_updates(view, seg.ops)]
    return {u.inputs[u.param_input].node.name for u in updates if u is not None}


def _raw_gradient_values(view, seg, session) -> dict:
    """Parameter name -> the IR value of its raw gradient (before clipping), for the updates of
    this segment that read a processed one (gradients.py)."""
    values = {}
    for update_id, (producer, name) in raw_gradients(view, seg.ops).items():
        update = _update_node(session, update_id)
        if update is None:
            continue
        if producer is not None and id(producer) in session.produced:
            raw = session.produced[id(producer)].get(name)
        else:
            raw = session.initial[name].output() if name in session.initial else None
        if raw is not None:
            values[update.inputs[update.param_input].node.name] = raw
    return values
