"""The public entry points: convert, unsupported_ops."""
from __future__ import annotations

from .frontend import ConversionSession, decode, find_unsupported, forward_sinks
from .ir import Function


def unsupported_ops(program) -> list[dict]:
    """Op types without a converter: ``[{op_type, count, block, op_index, outputs}]``, empty if none."""
    return find_unsupported(decode(program))


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
