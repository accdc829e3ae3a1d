"""Splits a program into engine segments and the ops left to Paddle (the fallback).

As the historical Paddle nGraph bridge did, every maximal run of ops the engine
converts becomes one ``ngraph_engine`` operator; ops it lacks (and control-flow
ops, whose sub-blocks Paddle runs) stay Paddle ops between them, reading and
writing the same variables. A program the engine converts whole is one segment.
Ops left to Paddle off the engine's path run before or after the segment instead
of cutting it in two (``_merged_order``).

What crosses a segment's border:
- **Paddle inputs**: feeds, parameters, persistable state, and values the ops left
  to Paddle produce. Persistable variables are always read from Paddle: a segment
  that updates one writes it back in place, so a later segment sees the new value.
- **Paddle outputs**: values a Paddle op reads (the fallback ops, the forward sinks
  kept for fetching, the sub-blocks of control flow), copied into Paddle tensors.
- **Handed-over values**: values only later segments read (forward activations
  that the backward segment needs) stay engine arrays, passed in memory without
  a Paddle tensor or a copy.
- **Order**: each segment takes the previous segment's last output slot (an empty
  tensor, the "token") and one output of every Paddle op since, as inputs it
  ignores, so that Paddle's executor, which orders ops by the variables they
  read, cannot run a segment before the values it was handed are made or before
  a Paddle op that reads a parameter the segment updates in place.

Why an op stays with Paddle (``Plan.reasons``, what ``unsupported_ops``, the dump tool and the
``INFO`` line of ``transpile`` report): ``control flow`` (it holds sub-blocks: Paddle runs them,
reading and writing the scope; what they read and write, nested blocks included, counts as the
op's own inputs and outputs, the decoders' ``CAPTURED`` slot), ``variable kind`` (it reads or
writes something other than a dense tensor: a tensor array, selected rows, step scopes, ...; or it
makes a tensor with LoD, whose sequence offsets the engine's outputs would drop),
``no converter``, or ``refused`` (its converter, the IR or the backend refused it as it is).

Gradients: each is averaged across ranks exactly once, before its optimizer
update reads it. An update converted by the engine gets its AllReduce from the
``insert_allreduce`` pass inside its segment, wherever the gradient came from.
A gradient read by an update left to Paddle is averaged by the segment that
produces it, before it leaves that segment (``Segment.allreduce``); if a Paddle op
produced it too, a segment holding only that AllReduce runs just before the update. An update
inside a control-flow op's sub-block (GradientMergeOptimizer's ``conditional_block``) is served
the same way at the control-flow op: the gradient it reads, as the block holding the op has it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ConversionError
from ..frontend import OP_TABLE, OPTIMIZE, SKIPPED_OPS, ProgramView, forward_sinks
from ..frontend.converters.shape import XSHAPE_DIMS_ONLY
from ..frontend.program_view import DENSE, normalize
from .engine_op import MAX_VALUES  # values a segment can give Paddle: the operator's large size, less its token

# Source ops: declarations of feeds and parameters, which stay where they are (moved first in PIR).
SOURCE_OPS = {"feed", "fetch", "fetch_v2", "pd_op.data", "pd_op.feed", "pd_op.fetch", "builtin.parameter"}


# Why an op stays with Paddle.
CONTROL_FLOW, VARIABLE_KIND, NO_CONVERTER, REFUSED = "control flow", "variable kind", "no converter", "refused"


@dataclass
class Segment:
    index: int
    ops: list                                              # OpView, converted by this segment's engine
    constants: list = field(default_factory=list)          # input-less ops of other segments it reads (copied)
    inputs: list = field(default_factory=list)             # names read from Paddle
    handed_in: list = field(default_factory=list)          # names received in memory from earlier segments
    outputs: list = field(default_factory=list)            # names copied out for the ops left to Paddle
    handed_out: list = field(default_factory=list)         # names later segments read
    allreduce: list = field(default_factory=list)          # outputs averaged across ranks before they leave
    after: list = field(default_factory=list)              # Paddle values to run after (order only)
    snapshots: dict = field(default_factory=dict)          # output name -> the state it copies, as read
    before_op: object = None                               # collective-only segment: the Paddle update it serves

    # The op before which the rewrite inserts the segment's operator (None: ``first``): later than
    # ``first`` when ops left to Paddle that the plan runs before the segment stand among its ops.
    place: object = None

    @property
    def first(self):
        return self.ops[0] if self.ops else self.before_op

    @property
    def place_at(self):
        return self.place if self.place is not None else self.first


@dataclass
class Plan:
    segments: list
    kept: list                                             # OpView left to Paddle (fallback ops, sinks, constants)
    fallback: list                                         # the ops the engine lacks, in program order
    refused: dict = field(default_factory=dict)            # id(op) -> why its converter refused it
    reasons: dict = field(default_factory=dict)            # id(op) -> (category, detail) of every fallback op
    # (control-flow op, gradient): an update in its sub-block reads a gradient no segment makes
    # (a Paddle op does): on several ranks nothing could average it before the update.
    unaveraged: list = field(default_factory=list)
    # (kept op, state name, snapshot name): the op reads the segment's copy of the state instead.
    snapshot_reads: list = field(default_factory=list)

    def reason(self, op) -> tuple[str, str]:
        """(category, detail) of why ``op`` (one of ``fallback``) stays with Paddle."""
        return self.reasons[id(op)]

    def fallback_summary(self) -> str:
        counts: dict[str, int] = {}
        for op in self.fallback:
            counts[op.type] = counts.get(op.type, 0) + 1
        return ", ".join(f"{t} x{n}" if n > 1 else t for t, n in counts.items())

    def reason_summary(self) -> str:
        """The categories of the fallback with their op types: ``control flow: conditional_block; ...``."""
        by_category: dict[str, dict[str, int]] = {}
        for op in self.fallback:
            counts = by_category.setdefault(self.reasons[id(op)][0], {})
            counts[op.type] = counts.get(op.type, 0) + 1
        return "; ".join(f"{category}: " + ", ".join(f"{t} x{n}" if n > 1 else t for t, n in counts.items())
                         for category, counts in by_category.items())

    def left_to_paddle(self) -> list[dict]:
        """The ops left to Paddle by type, in program order of each type's first op:
        ``[{op_type, count, block, op_index, outputs, reason, detail}]`` (``reason``: the category,
        ``detail``: why, for the first op of the type)."""
        first: dict[str, object] = {}
        counts: dict[str, int] = {}
        for op in self.fallback:
            first.setdefault(op.type, op)
            counts[op.type] = counts.get(op.type, 0) + 1
        return [{"op_type": t, "count": counts[t], "block": op.block, "op_index": op.index,
                 "outputs": list(dict.fromkeys(op.output_names())), "reason": self.reasons[id(op)][0], "detail": self.reasons[id(op)][1]}
                for t, op in first.items()]


def structural_reason(view: ProgramView, op) -> tuple[str, str] | None:
    """Why ``op`` stays with Paddle whatever the converters say: it holds sub-blocks, or it reads or
    writes a variable the engine cannot hold (not a dense tensor). None otherwise."""
    if op.type in SKIPPED_OPS:
        return None
    if op.control_flow:
        return CONTROL_FLOW, "its sub-blocks run in Paddle"
    kinds = {}
    for name in op.input_names() + op.output_names():
        info = view.vars.get(name)
        if info is not None and info.kind != DENSE:
            kinds.setdefault(name, info.kind)
    if kinds:
        return VARIABLE_KIND, ", ".join(f"{name} is {kind}" for name, kind in kinds.items())
    # A value with LoD (legacy sequence ops): Paddle's kernels pass the offsets on from input to
    # output, the engine's outputs carry none, so the op making it stays with Paddle. Reading one is
    # fine: an op on the engine computes on the tensor as Paddle does.
    with_lod = [name for name in op.output_names()
                if (info := view.vars.get(name)) is not None and info.lod_level > 0]
    if with_lod:
        return VARIABLE_KIND, ", ".join(f"{name} is a LoD tensor (level {view.vars[name].lod_level}), "
                                        f"whose offsets the engine does not keep" for name in dict.fromkeys(with_lod))
    return None


def fallback_reasons(view: ProgramView, ops, refused: dict) -> dict:
    """``{id(op): (category, detail)}`` for the ops of ``ops`` left to Paddle."""
    reasons = {}
    for op in ops:
        if op.type in SKIPPED_OPS:
            continue
        reason = structural_reason(view, op)
        if reason is None and op.type not in OP_TABLE:
            reason = NO_CONVERTER, f"no converter for {op.type}"
        if reason is None and id(op) in refused:
            reason = REFUSED, refused[id(op)]
        if reason is not None:
            reasons[id(op)] = reason
    return reasons


def _is_update(op) -> bool:
    return op.role == OPTIMIZE and "param" in op.inputs and "grad" in op.inputs


def refused_by_converters(view: ProgramView, backend=None, session=None) -> dict:
    """``{id(op): reason}`` for the ops of block 0 whose converter exists but refuses them (an
    attribute or a dynamic dimension it does not handle: ``RefusedOpError``, or nodes the IR
    refuses), found by converting the program once in ``session`` (default: a new one), and, given
    the ``backend`` that will run the segments, those whose nodes it cannot run
    (``Backend.refuses``: the CPU backend and bfloat16). Ops reading what a refused op makes see
    it as an input; they may be refused in turn. Any other exception of a converter is a bug and
    is raised, naming the op."""
    from ..frontend import ConversionSession

    session = session if session is not None else ConversionSession(view)
    refused = {}
    seen: set[int] = set()
    for op in view.ops:
        if op.block != 0 or op.type in SKIPPED_OPS or op.type not in OP_TABLE or structural_reason(view, op):
            continue
        refusal = session.try_convert(op)
        if refusal is not None:
            refused[id(op)] = f"{type(refusal.__cause__ or refusal).__name__}: {refusal}".splitlines()[0]
            continue
        if backend is not None:
            reason = _backend_refusal(backend, session.produced.get(id(op), {}).values(), seen)
            if reason:
                refused[id(op)] = f"{backend.name}: {reason}"
    return refused


def _backend_refusal(backend, outputs, seen: set) -> str | None:
    """The backend's first objection to the nodes an op's converter made: those its outputs
    reach that no earlier op's did (``seen``, updated)."""
    stack = [value.node for value in outputs]
    reason = None
    while stack:
        node = stack.pop()
        if node.id in seen:
            continue
        seen.add(node.id)
        reason = reason or backend.refuses(node)
        stack.extend(i.node for i in node.inputs)
    return reason


def plan_segments(view: ProgramView, extra_fetch=(), refused=None) -> Plan:
    """Chooses the segments of block 0 and the ops left to Paddle: ops without converter, and
    those in ``refused`` (``refused_by_converters``)."""
    refused = refused or {}
    block0 = _Block(view)
    reasons = fallback_reasons(view, block0.ops, refused)
    _keep_xshape_producers(block0, reasons)
    fallback_ids = {id(op) for op in block0.ops if id(op) in reasons}
    anchors = _anchors(view, block0.ops, extra_fetch, fallback_ids)
    kept_ids = _kept(block0, fallback_ids | {id(op) for op in anchors})
    segments = None
    state = {name for name, info in view.vars.items() if info.persistable}
    order = _merged_order(block0.ops, fallback_ids, kept_ids, state)
    if order is not None:
        merged = _Block(view, order)
        segments = _runs(merged.ops, fallback_ids)
        if _place(merged, segments, [op for op in merged.ops if id(op) in fallback_ids], kept_ids):
            block0 = merged
        else:
            segments = None
    if segments is None:
        segments = _runs(block0.ops, fallback_ids)
    fallback = [op for op in block0.ops if id(op) in fallback_ids]
    kept = [op for op in block0.ops if id(op) in kept_ids]
    segment_of = {id(op): s for s in segments for op in s.ops}
    _wire_inputs(view, block0, segments, segment_of)
    _wire_outputs(block0, kept, kept_ids, segment_of)
    # A run of only constants that Paddle keeps for the ops it runs (the fill_constant of a
    # recurrent layer's initial states, before its rnn op) would be an engine op with nothing to
    # read or give: Paddle's operator refuses one without inputs, and it would compute nothing.
    segments = [seg for seg in segments
                if seg.outputs or seg.handed_out or not all(id(op) in kept_ids for op in seg.ops)]
    for i, seg in enumerate(segments):
        seg.index = i
    snapshot_reads = _snapshot_state_read_before_update(view, block0, kept, segments)
    unaveraged: list = []
    segments = _average_gradients_of_paddle_updates(block0, fallback, segments, segment_of, unaveraged)
    _order_inputs(view, block0, fallback, segments, kept)
    if segments:
        _give_the_first_segment_an_input(view, segments[0])
    for seg in segments:
        if len(seg.outputs) > MAX_VALUES:
            raise ConversionError(
                f"engine segment {seg.index} (ops {seg.ops[0].location()} ... {seg.ops[-1].location()}) would hand "
                f"{len(seg.outputs)} values to the ops left to Paddle; the ngraph_engine operator has "
                f"{MAX_VALUES} output slots for them")
    return Plan(segments, kept, fallback, {k: v for k, v in refused.items() if k in fallback_ids}, reasons,
                unaveraged, snapshot_reads)


def _keep_xshape_producers(block0: "_Block", reasons: dict):
    """A legacy ``*2`` op (reshape2, squeeze2, ...) whose grad op stays with Paddle stays too. Its
    ``XShape`` output carries X's dims to the grad op, declared [0] + X's dims; the engine has no
    dims-only value and binds XShape to X itself (converters/shape.py), so Paddle's grad kernel,
    taking X's dims as XShape's dims[1:], would give X's gradient the wrong shape."""
    for op in block0.ops:
        if id(op) not in reasons or op.type not in XSHAPE_DIMS_ONLY:
            continue
        for name in op.inputs.get(normalize("XShape"), ()):
            producer = block0.producer(name, block0.position[id(op)])
            if producer is not None and id(producer) not in reasons:
                reasons[id(producer)] = (REFUSED, f"its XShape {name} is read by {op.location()}, which "
                                                  f"stays with Paddle and takes X's dims from it")


class _Block:
    """Block 0's ops in the order the plan runs them (default: program order), their positions in
    it, and which op last wrote a name before a position."""

    def __init__(self, view: ProgramView, order: list | None = None):
        self.view = view
        self.ops = order if order is not None else [op for op in view.ops if op.block == 0]
        self.position = {id(op): i for i, op in enumerate(self.ops)}
        self.writers: dict[str, list] = {}
        for op in self.ops:
            if op.type in SOURCE_OPS or op.type in SKIPPED_OPS:
                continue
            for name in op.output_names():
                self.writers.setdefault(name, []).append(op)

    def producer(self, name: str, reader_position: int):
        """The latest op (program order) writing ``name`` before ``reader_position``."""
        found = None
        for op in self.writers.get(name, ()):
            if self.position[id(op)] < reader_position:
                found = op
        return found


def _anchors(view, block0: list, extra_fetch, fallback_ids: set) -> list:
    """The forward sinks (loss, metrics) and the producers of ``extra_fetch``, which stay Paddle
    ops reading the engine's outputs so that fetch handles stay valid."""
    anchors = forward_sinks(view)
    extra = {view.name_of(h) for h in extra_fetch}
    if extra:
        anchors += [op for op in block0 if op not in anchors and extra & set(op.output_names())
                    and op.type not in SKIPPED_OPS and id(op) not in fallback_ids]
    return [op for op in anchors if id(op) not in fallback_ids]


def _kept(block0: _Block, kept_ids: set) -> set:
    """The ids of the ops Paddle keeps: ``kept_ids``, and the constants (ops without inputs) they
    read. Paddle wants such operands (axes, shapes) defined by constant ops, and they cost nothing."""
    kept_ids = set(kept_ids)
    changed = True
    while changed:
        changed = False
        for op in block0.ops:
            if id(op) not in kept_ids:
                continue
            for name in op.input_names():
                source = block0.producer(name, block0.position[id(op)])
                if (source is not None and id(source) not in kept_ids and not source.input_names()
                        and source.type in OP_TABLE):
                    kept_ids.add(id(source))
                    changed = True
    return kept_ids


def _runs(block0: list, fallback_ids: set) -> list[Segment]:
    """Segments: maximal runs of engine ops between the fallback ops. Sinks and constants, which
    the engine converts as well, do not split a run."""
    segments: list[Segment] = []
    current: list = []
    for op in block0:
        if op.type in SKIPPED_OPS:
            continue
        if id(op) in fallback_ids:
            if current:
                segments.append(Segment(len(segments), current))
                current = []
            continue
        current.append(op)
    if current:
        segments.append(Segment(len(segments), current))
    return segments


def _merged_order(ops: list, fallback_ids: set, kept_ids: set, state: set) -> list | None:
    """The order in which to run block 0 so that an op left to Paddle off the engine's path does not
    cut a segment in two (as nGraph's bridges clustered the ops they converted), or None to keep
    program order.

    A run of ops left to Paddle between two engine runs moves past the run after it when that run
    neither reads nor writes what they write, nor writes what they read (a metric computed from the
    forward, before the backward); else before the run ahead of it on the same terms (the |w| of a
    feed, read at the end of the forward), when that run holds no op Paddle keeps reading a value
    (a forward sink would then read the segment's output before it ran) and they read no persistable
    state (the first engine of a program gives every rank rank 0's parameters before a Paddle op
    reads them). The two engine runs then make one segment. Control flow, optimizer updates and ops without outputs stay where they are: Paddle
    runs those by program order, and gradients are averaged for the updates where they stand. The
    ops left to Paddle keep their order among themselves, the engine's among themselves."""
    runs: list[list] = []      # [is_engine_run, ops], alternating once adjacent items are joined
    pending: list = []         # skipped ops (list packing, declarations): they go with the next op
    for op in ops:
        if op.type in SKIPPED_OPS:
            pending.append(op)
            continue
        engine = id(op) not in fallback_ids
        if runs and runs[-1][0] == engine:
            runs[-1][1].extend(pending + [op])
        else:
            runs.append([engine, pending + [op]])
        pending = []
    if pending:
        if not runs:
            return None
        runs[-1][1].extend(pending)
    if sum(1 for engine, _ in runs if engine) < 2:
        return None

    def names(group, outputs):
        return {n for op in group if op.type not in SKIPPED_OPS
                for n in (op.output_names() if outputs else op.input_names())}

    def movable(group):
        return all(op.type in SKIPPED_OPS or (not op.control_flow and not _is_update(op) and not op.nested_updates
                                               and op.output_names()) for op in group)

    def independent(first, second):
        """Whether ``first`` and ``second`` may run in either order (no value passes between them)."""
        return not (names(first, True) & (names(second, False) | names(second, True))
                    or names(first, False) & names(second, True))

    moved = False
    changed = True
    while changed:
        changed = False
        for i in range(len(runs) - 2):
            (a_engine, a), (g_engine, group), (b_engine, b) = runs[i:i + 3]
            if not a_engine or g_engine or not b_engine or not movable(group):
                continue
            if independent(group, b):
                merged = [[True, a + b], [False, group]]
            elif (independent(a, group) and not names(group, False) & state
                  and not any(id(op) in kept_ids and op.input_names() for op in a)):
                merged = [[False, group], [True, a + b]]
            else:
                continue
            runs[i:i + 3] = merged
            joined: list[list] = []
            for engine, items in runs:  # the moved run now meets its neighbours of the same kind
                if joined and joined[-1][0] == engine:
                    joined[-1][1].extend(items)
                else:
                    joined.append([engine, items])
            runs, moved, changed = joined, True, True
            break
    return [op for _, items in runs for op in items] if moved else None


def _place(block0: _Block, segments: list, fallback: list, kept_ids: set) -> bool:
    """Where each segment's operator goes in the program when the plan has moved ops left to Paddle
    (``_merged_order``): after those the plan runs before it, before those it runs after and before
    the ops Paddle keeps that read its values, after the segment before it. (``op.index`` is the
    position in the program, ``block0.position`` the planned one.) Sets ``Segment.place``; False
    if some segment has no such place (the order's rules exclude it; the plan then keeps program
    order)."""
    previous = -1
    for seg in segments:
        start = block0.position[id(seg.ops[0])]
        before = [op.index for op in fallback if block0.position[id(op)] < start]
        after = [op.index for op in fallback if block0.position[id(op)] > start]
        readers = [op.index for op in seg.ops if id(op) in kept_ids and op.input_names()]
        lowest = max(before + [previous])
        place = next((op for op in sorted(seg.ops, key=lambda o: o.index) if op.index > lowest), None)
        if place is None or any(i < place.index for i in after + readers):
            return False
        seg.place = place if place is not seg.first else None
        previous = place.index
    return True


def _wire_inputs(view, block0: _Block, segments: list, segment_of: dict):
    """Each segment's inputs: read from Paddle, handed over in memory by an earlier segment, or a
    constant it converts its own copy of."""
    for seg in segments:
        inputs, handed_in = [], []
        for op in seg.ops:
            for name in op.input_names():
                if op.type in XSHAPE_DIMS_ONLY and name in op.inputs.get(normalize("XShape"), ()):
                    continue  # dims only, read from its declaration; Paddle gives it no data
                source = block0.producer(name, block0.position[id(op)])
                owner = segment_of.get(id(source)) if source is not None else None
                if owner is seg:
                    continue
                if owner is not None and not source.input_names():
                    # A constant (full_int_array of a pool's kernel size, ...): converters need it
                    # as a constant, so each segment reading it converts its own copy.
                    if source not in seg.constants:
                        seg.constants.append(source)
                    continue
                info = view.vars.get(name)
                if owner is not None and not (info is not None and info.persistable):
                    if name not in handed_in:
                        handed_in.append(name)
                        if name not in owner.handed_out:
                            owner.handed_out.append(name)
                elif name not in inputs:
                    inputs.append(name)
        seg.inputs, seg.handed_in = inputs, handed_in


def _wire_outputs(block0: _Block, kept: list, kept_ids: set, segment_of: dict):
    """Values kept ops read that segments produce. (Ops of legacy sub-blocks read at their owner's
    position: the owner lists them as CAPTURED.)"""
    for op in kept:
        for name in op.input_names():
            source = block0.producer(name, block0.position[id(op)])
            if source is None or id(source) in kept_ids:
                continue
            owner = segment_of.get(id(source))
            if owner is not None and name not in owner.outputs:
                owner.outputs.append(name)


def _snapshot_state_read_before_update(view, block0: _Block, kept: list, segments: list) -> list:
    """Kept ops (forward sinks, the producers of values named in ``fetch_list``) that read
    persistable state a segment running before them updates later in program order: a sink
    ``add(matmul, bias)`` of a fetched prediction reads the bias the optimizer updates. The segment
    (forward, backward and update) runs first and updates the variable in place, so such an op would
    read the new value where Paddle's op reads the old one; it reads a copy the segment makes of the
    state as its forward read it instead. Returns (kept op, name, copy name); the segments list
    their copies in ``snapshots`` and ``outputs``."""
    reads = []
    for op in kept:
        at = block0.position[id(op)]
        for name in dict.fromkeys(op.input_names()):
            info = view.vars.get(name)
            if info is None or not info.persistable or block0.producer(name, at) is not None:
                continue
            seg = next((s for s in segments if s.before_op is None and block0.position[id(s.ops[0])] < at
                        and any(block0.position[id(o)] > at and name in o.output_names() for o in s.ops)), None)
            if seg is None:
                continue
            copy = f"{name}@ngraph_read_{seg.index}"
            if copy not in seg.snapshots:
                seg.snapshots[copy] = name
                seg.outputs.append(copy)
            reads.append((op, name, copy))
    return reads


def _average_gradients_of_paddle_updates(block0: _Block, fallback: list, segments: list, segment_of: dict,
                                         unaveraged: list) -> list:
    """Gradients of updates left to Paddle: averaged where they are produced, or by a segment
    holding only that AllReduce, just before the update, if a Paddle op produced them."""
    collective_only = []
    for op in fallback:
        grads = list(op.inputs["grad"]) if _is_update(op) else [grad for _, grad in op.nested_updates]
        for name in dict.fromkeys(grads):
            if not name:
                continue
            source = block0.producer(name, block0.position[id(op)])
            owner = segment_of.get(id(source)) if source is not None else None
            if owner is not None:
                if name not in owner.allreduce:
                    owner.allreduce.append(name)
                if name not in owner.outputs:
                    owner.outputs.append(name)
            elif op.control_flow or _kind(block0, name) != DENSE:
                # A collective-only segment hands its update an averaged copy under a new name; the
                # ops of a sub-block read the gradient by its own name. Nor does an engine average
                # selected rows (a sparse embedding's gradient). transpile refuses both on ranks.
                unaveraged.append((op, name))
            else:
                collective_only.append(Segment(-1, [], inputs=[name], outputs=[name], allreduce=[name], before_op=op))
    if not collective_only:
        return segments
    ordered = sorted(segments + collective_only, key=lambda s: block0.position[id(s.first)])
    for i, seg in enumerate(ordered):
        seg.index = i
    return ordered


def _kind(block0: _Block, name: str) -> str:
    info = block0.view.vars.get(name)
    return info.kind if info is not None else DENSE


def _give_the_first_segment_an_input(view, seg):
    """A first segment computing from constants alone (a loop's counter and bound, compared before
    a ``while`` that Paddle runs) reads nothing, and Paddle's custom operators refuse an empty
    input list (the process aborted in the rewrite). Later segments read the previous one's token.
    Such a segment reads a feed, else a parameter, for order only: both exist before any op runs."""
    if seg.inputs or seg.handed_in or seg.after or seg.before_op is not None:
        return
    declared = [name for name, info in view.vars.items() if info.dtype is not None and (info.is_data or info.persistable)]
    feeds = [name for name in declared if view.vars[name].is_data]
    if not declared:
        raise ConversionError(f"engine segment 0 (ops {seg.ops[0].location()} ... {seg.ops[-1].location()}) reads "
                              f"nothing, and the program has no feed or parameter it could wait for: a program "
                              f"computing from constants alone has nothing to run on the engine (run it untranspiled)")
    seg.after = [(feeds or declared)[0]]


def _order_inputs(view, block0: _Block, fallback: list, segments: list, kept: list = ()):
    """Order-only inputs: the previous segment's token (added by the rewrite) and one output of
    every Paddle op since the previous segment. Paddle's operator refuses an input no kernel wrote,
    and an op may leave an output it lists unwritten (sequence_pool's MaxIndex unless it pools by
    max, which sequence_pool_grad still lists as an input; an ``XShape`` holds dims, no data), so
    the output is, by preference, one of the op's ``Out`` slot, one a segment reads, one any op
    reads, else its first; never an ``XShape``. A control-flow op writes what its sub-block writes
    only when the sub-block runs, and ``select_output`` only the output its mask picks: of theirs,
    only a variable that holds a value before the op counts (persistable, fed, or written by an op
    before it, such as a ``ConditionalBlock``'s default); with none, the op orders nothing (what a
    segment reads from it is then a value Paddle could not read either when the block did not run)."""
    engine_read = {name for seg in segments for op in seg.ops for name in op.input_names()}
    read = {name for op in view.ops for name in op.input_names()}

    def may_leave_unwritten(op):
        return op.control_flow or op.type == "select_output"

    def holds_value_before(name, op):
        info = view.vars.get(name)
        if info is not None and (info.persistable or info.is_data):
            return True
        producer = block0.producer(name, block0.position[id(op)])
        # Another block that may not have run (two conditional blocks writing one variable) proves nothing.
        return producer is not None and (not may_leave_unwritten(producer) or holds_value_before(name, producer))

    def order_output(op):
        xshape = set(op.outputs.get(normalize("XShape")) or ())
        names = [n for n in op.output_names() if n not in xshape]
        if may_leave_unwritten(op):
            names = [n for n in names if holds_value_before(n, op)]
            return next(iter(names), None)
        preferred = ([n for n in (op.outputs.get("out") or []) if n] + [n for n in names if n in engine_read]
                     + [n for n in names if n in read] + names)
        return next(iter(preferred), None)

    def reads_state_it_updates(op, seg):
        # A kept op before the segment reading persistable state the segment writes: without the
        # order, Paddle's executor may run it after the segment has updated the state in place
        # (a forward sink reading a parameter the last segment's optimizer updates).
        names = {n for n in op.input_names() if (info := view.vars.get(n)) is not None and info.persistable}
        return bool(names) and any(names & set(o.output_names()) for o in seg.ops)

    fallback_ids = {id(op) for op in fallback}
    previous_position = -1
    for seg in segments:
        start = block0.position[id(seg.first)]
        # Not a PIR builtin.split's: it unpacks its producer's vector, which orders the segment
        # already, and its elements may hold no memory (einsum's inner cache and xshape).
        seg.after = [order_output(op) for op in fallback
                     if previous_position < block0.position[id(op)] < start and op.type != "builtin.split"]
        seg.after += [order_output(op) for op in kept if id(op) not in fallback_ids and op.input_names()
                      and block0.position[id(op)] < start and reads_state_it_updates(op, seg)]
        seg.after = list(dict.fromkeys(seg.after))
        seg.after = [n for n in seg.after if n and view.vars.get(n) is not None and view.vars[n].dtype is not None]
        previous_position = start
