"""Rewrites a Paddle program in place so that one ``ngraph_engine`` op runs it.

The engine takes over every op of block 0 except the feed and parameter
declarations. The forward sinks ("anchors": the final mean of the loss,
metrics, predictions) stay in the program too, now reading the engine's
outputs: in PIR, the values a user holds for fetching belong to the ops that
define them, so those ops must survive for ``exe.run(fetch_list=[loss])`` to
keep working. Anchors are cheap reductions; the engine computes them as well.
"""
from __future__ import annotations

from ..errors import ConversionError
from ..frontend import ConversionSession, ProgramView, forward_sinks
from ..frontend.op_table import SKIPPED_OPS
from . import engine_op

_KEPT_PIR_OPS = {"pd_op.data", "builtin.parameter"}


def plan(view: ProgramView, extra_fetch=()):
    """Returns (session, anchors, fetch names) after converting every op of block 0."""
    if any(op.block != 0 for op in view.ops):
        raise ConversionError("programs with sub-blocks (control flow) are not supported yet")
    session = ConversionSession(view)
    session.convert_ops(view.ops)
    anchors = forward_sinks(view)
    extra = {view.name_of(h) for h in extra_fetch}
    if extra:
        anchors += [op for op in view.ops if op not in anchors and extra & set(op.output_names())
                    and op.type not in SKIPPED_OPS]
    producer = {n: op for op in view.ops if op.type not in SKIPPED_OPS for n in op.output_names()}
    # Constants the anchors read (PIR's full_int_array axes) stay in Paddle: Paddle wants
    # such operands defined by constant ops, and they cost nothing.
    constants = []
    fetch = []
    for op in anchors:
        for name in op.input_names():
            source = producer.get(name)
            if source is None:
                continue
            if not source.input_names():
                if source not in constants and source not in anchors:
                    constants.append(source)
            elif name not in fetch:
                fetch.append(name)
    anchors = anchors + constants
    if len(fetch) > engine_op.max_outputs():
        raise ConversionError(f"the ops left to Paddle read {len(fetch)} values from the engine; the ngraph_engine "
                              f"operator has {engine_op.max_outputs()} output slots")
    return session, anchors, fetch


def rewrite_legacy(view: ProgramView, anchors, engine, input_names: list[str], fetch: list[str]):
    program = view.native
    block = program.global_block()
    keep = {id(op.native) for op in anchors}
    for index in range(len(block.ops) - 1, -1, -1):
        op = block.ops[index]
        if id(op) not in keep and op.type not in ("feed", "fetch", "fetch_v2"):
            block._remove_op(index, sync=False)
    outputs = {}
    for slot in range(engine_op.max_outputs()):
        if slot < len(fetch):
            outputs[f"Out{slot}"] = [block.var(fetch[slot])]
        else:
            name = f"ngraph_engine_{engine.id}.unused_{slot}"
            outputs[f"Out{slot}"] = [block.create_var(name=name, dtype="float32", shape=[0])]
    first = next((i for i, op in enumerate(block.ops) if op.type != "feed"), len(block.ops))
    block._insert_op(first, type="ngraph_engine", inputs={"X@VECTOR": [block.var(n) for n in input_names]},
                     outputs=outputs, attrs={"engine_id": engine.id})
    block._sync_with_cpp()


def rewrite_pir(view: ProgramView, anchors, engine, input_names: list[str], fetch: list[str]):
    import paddle
    from paddle import _C_ops

    program = view.native
    block = program.global_block()
    anchor_ops = [op.native for op in anchors]
    ops = list(block.ops)
    removed = [op for op in ops if op.name() not in _KEPT_PIR_OPS and not any(op is a for a in anchor_ops)]
    sources = [op for op in ops if op.name() in _KEPT_PIR_OPS]
    first_other = next((op for op in ops if op.name() not in _KEPT_PIR_OPS), None)
    if first_other is None:
        return
    # The engine reads every feed and parameter: their declarations must come before it.
    for op in sources:
        op.move_before(first_other)
    inputs = [view.values[n] for n in input_names]
    with paddle.static.program_guard(program):
        paddle.pir.set_insertion_point(first_other)
        outs = _C_ops._run_custom_op("ngraph_engine", inputs, engine.id)
        paddle.pir.reset_insertion_point_to_end()
    produced_by_engine = dict(zip(fetch, outs))
    for op in anchor_ops:
        for i, value in enumerate(op.operands_source()):
            name = view.value_names.get(value.id) if value.initialized() else None
            if name in produced_by_engine:
                op.operand(i).set_source(produced_by_engine[name])
    for op in reversed(removed):
        block.remove_op(op)
