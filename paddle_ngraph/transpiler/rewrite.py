"""Rewrites a Paddle program in place so that ``ngraph_engine`` ops run its segments.

Each engine segment (``segments.py``) becomes one ``ngraph_engine`` op placed where
its first op was; the ops it converted are removed. What stays: feed and parameter
declarations, the ops the engine lacks, and the forward sinks ("anchors": the final
mean of the loss, metrics, predictions), now reading the engine's outputs: in PIR,
the values a user holds for fetching belong to the ops that define them, so those
ops must survive for ``exe.run(fetch_list=[loss])`` to keep working. Anchors are
cheap reductions; the engine computes them as well.

Each segment's op has an ordering token: the next segment takes it as an input it ignores
(see ``segments.py``). It is the large size's last slot, or the one-slot size's value.

Paddle's executor frees every result after its last reader through its garbage collector,
which on CPU is a thread woken per freed tensor that then spins for more work. With two ranks
on two cores that spinning takes the core of the other rank's step (docs/PERFORMANCE.md,
"Paddle's garbage collector"), so a segment gets the smallest size of the operator that holds
its values (``engine_op.op_for``: one slot for the usual one value, the loss), and in a legacy
program the slots it leaves unused share one variable, freed once (a ``CompiledProgram`` of the
program, whose graph refuses a variable written twice by an op, gives each its own first:
``originals.distinct_unused_slots``). (Persistable placeholders,
never freed, would enter paddle.static.save's files in legacy programs, and in PIR they would be
persistable values without a name, on which ``program.list_vars()`` users fail.)
"""
from __future__ import annotations

from ..errors import ConversionError
from . import engine_op
from .segments import Plan

_KEPT_PIR_OPS = {"pd_op.data", "builtin.parameter"}


# --- legacy ProgramDesc -------------------------------------------------------------------------------
def rewrite_legacy(view, plan: Plan, engines: list):
    block = view.native.global_block()
    kept = {id(op.native) for op in plan.kept}
    # Ops of block 0 the engines converted (and are not kept): removed once the engines are in.
    converted = {id(op.native) for seg in plan.segments for op in seg.ops if id(op.native) not in kept}
    token = None
    renames = []  # (Paddle op, old input name, new name): updates reading an averaged copy
    placements = []
    for seg, engine in zip(plan.segments, engines):
        outputs = {}
        names = list(seg.outputs)
        if seg.before_op is not None:
            # Collective-only segment: the Paddle update reads the averaged copy under a new name.
            averaged = f"{names[0]}@ngraph_avg_{engine.id}"
            source = block.var(names[0])
            block.create_var(name=averaged, dtype=source.dtype, shape=source.shape)
            renames.append((seg.before_op.native, names[0], averaged))
            names = [averaged]
        for copy, name in seg.snapshots.items():  # state copied as the segment read it (segments.py)
            source = block.var(name)
            block.create_var(name=copy, dtype=source.dtype, shape=source.shape)
        for slot, name in enumerate(names):
            outputs[f"Out{slot}"] = [block.var(name)]
        op_type, token_slot = engine_op.op_for(len(names))
        if f"Out{token_slot}" in outputs:  # the one-slot size: its value orders the next segment
            token_name = outputs[f"Out{token_slot}"][0].name
        else:
            token_name = f"ngraph_engine_{engine.id}.token"
            outputs[f"Out{token_slot}"] = [block.create_var(name=token_name, dtype="float32", shape=[0])]
        # The slots it does not use share one variable: one free for Paddle's garbage collector.
        unused = None
        for slot in range(engine_op.OP_SLOTS[op_type]):
            if f"Out{slot}" not in outputs:
                if unused is None:
                    unused = block.create_var(name=f"ngraph_engine_{engine.id}.unused", dtype="float32", shape=[0])
                outputs[f"Out{slot}"] = [unused]
        order = ([token] if token is not None else []) + list(seg.after)
        inputs = [block.var(n) for n in engine.input_names] + [block.var(n) for n in order]
        placements.append((seg.place_at.native, dict(type=op_type, inputs={"X@VECTOR": inputs},
                                                  outputs=outputs, attrs={"engine_id": engine.id})))
        token = token_name
    for anchor_op, spec in reversed(placements):
        index = next(i for i, op in enumerate(block.ops) if op is anchor_op)
        block._insert_op(index, **spec)
    for index in range(len(block.ops) - 1, -1, -1):
        op = block.ops[index]
        if id(op) in converted:
            block._remove_op(index, sync=False)
    renames += [(op.native, name, copy) for op, name, copy in plan.snapshot_reads]
    for op, old, new in renames:
        op._rename_input(old, new)
    block._sync_with_cpp()


def leave_feed_checks_to_engines(view, engines: list):
    """On several ranks, a legacy program's feeds that only engines read are checked by the engines
    alone. Paddle's executor checks a feed's shape and dtype against its declaration before the
    step (``need_check_feed``), on the rank that was given it: that rank raises, while the others,
    already in the step, wait for it at the engine's input check until the watchdog ends the job
    with a stall. The engine checks the same declaration, and its ranks agree on the result, so every
    rank stops at once naming the rank and the variable. Feeds a Paddle op also reads keep Paddle's
    check: that op would run on the bad feed before any engine."""
    program = view.native
    read_by_engines = {name for engine in engines for name in engine.input_names}
    read_by_paddle = {name for block in program.blocks for op in block.ops if not engine_op.is_engine_op(op.type)
                      for name in op.input_arg_names}
    block = program.global_block()
    for name in sorted(read_by_engines - read_by_paddle):
        var = block._find_var_recursive(name)
        if var is not None and var.desc.need_check_feed():
            var.desc.set_need_check_feed(False)


# --- PIR ---------------------------------------------------------------------------------------------
# PIR's Python op objects are made afresh on each access: ops are compared by ``op.id()``.
def rewrite_pir(view, plan: Plan, engines: list):
    import paddle
    from paddle import _C_ops

    program = view.native
    block = program.global_block()
    kept = {op.native.id() for op in plan.kept}
    ops = list(block.ops)
    converted = {op.native.id() for seg in plan.segments for op in seg.ops} - kept
    # PIR's list packing and unpacking (builtin.combine/split) follow their users and producers.
    removed = [op for op in ops if op.id() in converted or _follows_converted(op, converted)]
    removed_ids = {op.id() for op in removed}
    sources = [op for op in ops if op.name() in _KEPT_PIR_OPS]
    first_other = next((op for op in ops if op.name() not in _KEPT_PIR_OPS), None)
    if first_other is None:
        return
    # The engines read feeds and parameters: their declarations come first.
    for op in sources:
        op.move_before(first_other)
    position = {op.id(): i for i, op in enumerate(ops)}
    written_from = _paddle_writes_of_engine_state(view, plan, removed_ids, position)
    later_values: dict = {}  # name -> the values of converted ops bearing it after its first
    for op in removed:
        for result in op.results():
            name = view.value_names.get(result.id) if result.initialized() else None
            if name is not None and view.values.get(name) is not None and view.values[name].id != result.id:
                later_values.setdefault(name, []).append(result)
    token = None
    # Values an engine gave Paddle, by name: a later engine reading the same name from Paddle reads
    # the engine's output (a control-flow op may have updated it in place in between).
    current: dict = {}
    value = lambda name: current.get(name, view.values[name])  # noqa: E731
    for seg, engine in zip(plan.segments, engines):
        order = ([token] if token is not None else []) + [value(n) for n in seg.after]
        inputs = [value(n) for n in engine.input_names] + order
        with paddle.static.program_guard(program):
            paddle.pir.set_insertion_point(seg.place_at.native)
            op_type, token_slot = engine_op.op_for(len(seg.outputs))
            outs = _C_ops._run_custom_op(op_type, inputs, engine.id)
            paddle.pir.reset_insertion_point_to_end()
        made_by = outs[0].get_defining_op()
        # The engine's own inputs (packed by a builtin.combine) keep reading the values as they were
        # before it: an input the engine also outputs (a value it updates) is not its own result.
        own = {made_by.id()} | {v.get_defining_op().id() for v in made_by.operands_source()
                                  if v.initialized() and v.get_defining_op() is not None
                                  and v.get_defining_op().name() == "builtin.combine"}
        for slot, name in enumerate(seg.outputs):
            if name in seg.snapshots:  # state copied as the segment read it, for the ops that read it so
                readers = {op.native.id() for op, _, copy in plan.snapshot_reads if copy == name}
                _replace_uses(view.values[seg.snapshots[name]], outs[slot],
                              lambda user, readers=readers: user.id() in readers)
                continue
            info = view.vars.get(name)
            persistable = info is not None and info.persistable
            if seg.before_op is not None:  # collective-only: just the update it serves
                target = seg.before_op.native.id()
                accept = lambda user, target=target: user.id() == target  # noqa: E731
            elif persistable:
                # State the engine updates in place through its input: Paddle ops after the segment read
                # the engine's copy (which orders them after it) until a Paddle op writes the variable in
                # place; that op and the ones after read the variable itself, which Paddle's executor
                # orders after the engine (a write after its read) and after that op (a read after write).
                start, end = position[seg.place_at.native.id()], written_from.get((seg.index, name), len(ops))
                accept = (lambda user, start=start, end=end: user.id() not in removed_ids  # noqa: E731
                          and user.id() not in own and start < position.get(user.id(), -1) < end)
            else:
                accept = lambda user: user.id() not in removed_ids and user.id() not in own  # noqa: E731
                # An in-place op the engine converted (assign_value_ filling a constant made by
                # full) gives its result the name of its operand: Paddle ops may read either value.
                for made in later_values.get(name, ()):
                    _replace_uses(made, outs[slot], accept)
            _replace_uses(view.values[name], outs[slot], accept)
            if seg.before_op is None and not persistable:  # state: its variable
                current[name] = outs[slot]
        token = outs[token_slot]
    # Check before removing anything: a half-removed PIR program aborts the process when freed.
    for op in removed:
        for value in op.results():
            if not value.initialized():
                continue
            users = [u for u in value.all_used_ops() if _outermost(u).id() not in removed_ids]
            if users:
                raise ConversionError(f"internal: {users[0].name()} still reads a result of the converted op "
                                      f"{op.name()}, which no engine outputs")
    for op in reversed(removed):
        block.remove_op(op)


def _follows_converted(op, converted: set) -> bool:
    """``builtin.combine`` goes with its users; ``builtin.split``, ``shadow_output`` and
    ``set_parameter`` with the op whose result they take, when an engine converted it."""
    name = op.name()
    if name == "builtin.combine":  # (one nobody reads goes too)
        users = [u for r in op.results() if r.initialized() for u in r.all_used_ops()]
        return all(u.id() in converted for u in users)
    if name in ("builtin.split", "builtin.shadow_output", "builtin.set_parameter"):
        sources = [v.get_defining_op() for v in op.operands_source() if v is not None and v.initialized()]
        return bool(sources) and all(s is not None and s.id() in converted for s in sources)
    return False


def _paddle_writes_of_engine_state(view, plan: Plan, removed_ids: set, position: dict) -> dict:
    """(segment index, name) -> the position of the first op left to Paddle after the segment that
    writes in place into persistable state the segment updates (LookAhead's ``assign_out_`` of the
    slow weights into a parameter after ``sgd_``). The engine updates that state in the variable, so
    the op must write the variable, not the engine's copy of it (``rewrite_pir``).

    Such a write inside a control-flow region is refused, before the program changes: the region's
    other reads of the state would need the same split, which is not made."""
    from ..frontend.pir_decoder import updated_in_place

    written_from = {}
    for seg in plan.segments:
        if seg.before_op is not None:
            continue
        start = position[seg.place_at.native.id()]
        for name in seg.outputs:
            info = view.vars.get(name)
            if info is None or not info.persistable or name in seg.snapshots:
                continue
            value = view.values[name]
            for user in value.all_used_ops():
                outer = _outermost(user)
                at = position.get(outer.id(), -1)
                if outer.id() in removed_ids or at <= start:
                    continue
                if not any(v.id == value.id for v in updated_in_place(user)):
                    continue
                if outer.id() != user.id():
                    raise ConversionError(
                        f"{user.name()} (left to Paddle, inside {outer.name()}) writes in place into {name}, which "
                        f"engine segment {seg.index} updates: such a write in a control-flow region after the "
                        f"engine's update is not supported in a PIR program (run this program in legacy IR)")
                written_from[seg.index, name] = min(at, written_from.get((seg.index, name), at))
    return written_from


def _replace_uses(old, new, accept):
    """Points the operands that read ``old`` at ``new`` in the users ``accept`` admits, judged by
    their block-0 ancestor (ops inside control-flow regions read outer values directly)."""
    for user in list(old.all_used_ops()):
        if not accept(_outermost(user)):
            continue
        for i, operand in enumerate(user.operands_source()):
            if operand is not None and operand.initialized() and operand.id == old.id:
                user.operand(i).set_source(new)


def _outermost(op):
    """The block-0 op enclosing ``op`` (itself if it is in block 0)."""
    while True:
        block = op.get_parent_block()
        parent = getattr(block, "parent_op", None) if block is not None else None
        parent = parent() if callable(parent) else parent
        if parent is None or parent.name() == "builtin.module":  # block 0 belongs to the module op
            return op
        op = parent
