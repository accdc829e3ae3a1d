"""The public entry points: convert, unsupported_ops."""
from __future__ import annotations

from .backends.interpreter import evaluate_nodes
from .frontend import ConversionSession, constant_folding, decode, forward_sinks
from .ir import Function

# Constant folding (frontend) computes with the reference kernels (backends), a layer above it.
constant_folding.use_evaluator(evaluate_nodes)


def unsupported_ops(program, config=None, nranks: int | None = None, **overrides) -> list[dict]:
    """The ops ``transpile`` leaves to Paddle, by type, read from the segment plan it executes
    (``transpiler/lowering.py`` ``plan_program``): ``[{op_type, count, block, op_index,
    outputs, reason, detail}]``, empty when the engine runs the whole program. ``reason`` is why:
    ``no converter``, ``refused`` (the converter, the IR or the backend refused it as it is),
    ``variable kind`` (it touches something other than a dense tensor, or makes a LoD tensor) or ``control flow`` (its
    sub-blocks run in Paddle); ``detail`` says it for the type's first op. ``config`` and keyword
    ``overrides``: as for ``transpile`` (the backend decides some refusals).
    ``nranks``: the ranks to plan for; default: the ranks ``transpile`` would train on here, those
    of the launcher that started this process (one for the ``null`` transport). The plan depends on
    it: on several ranks a legacy sparse embedding's gradient and its SGD update run on the engine
    (``transpiler/sparse_gradients.py``), in one process they stay with Paddle. Asking communicates
    with no other rank."""
    from .backends import backend_for
    from .distributed.launcher import detect_launcher
    from .transpiler import options
    from .transpiler.lowering import plan_program

    config = options(config, overrides, "unsupported_ops")
    launched = detect_launcher()
    if nranks is None:
        nranks = 1 if config.transport == "null" else launched.size
    rank = launched.rank if nranks == launched.size else 0
    plan, _ = plan_program(decode(program), config.replace("unsupported_ops", fallback=True), nranks,
                           backend_for(config), rank=rank)
    return plan.left_to_paddle()


def convert(program, fetch_list=None, name: str | None = None, sync_batch_norm: bool = False) -> Function:
    """Converts a whole Paddle program (legacy, PIR, or a saved file) into a ``Function``.

    Results: the variables fetched by the program's fetch ops if it has any
    (saved inference programs), else the outputs of its forward sinks (loss,
    metrics, predictions); plus every persistable variable the program updates.
    ``fetch_list`` (Variables, PIR Values or names) chooses the fetched results instead.
    ``sync_batch_norm``: training-mode batch norms take their statistics over the batch of all
    ranks (an AllReduce of per-channel sums, as ``transpile(..., sync_batch_norm=True)`` builds).
    """
    view = decode(program)
    session = ConversionSession(view, sync_batch_norm=sync_batch_norm)
    ops = [op for op in view.ops if op.block == 0]
    session.convert_ops(ops)
    if fetch_list is not None:
        fetch = [view.name_of(h) for h in fetch_list]
        return session.function(list(dict.fromkeys(fetch)), name=name or "main")
    fetch = []
    for op in ops:
        if op.type in ("fetch", "fetch_v2", "pd_op.fetch", "builtin.shadow_output"):
            fetch.extend(op.input_names())
    if not fetch:
        for op in forward_sinks(view):
            fetch.extend(n for n in op.output_names() if n in session.env)
    return session.function(list(dict.fromkeys(fetch)), name=name or "main")
