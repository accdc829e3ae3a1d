"""Converts a ``ProgramView`` (or part of it) into an IR ``Function``.

Variables not produced by a converted op become function parameters: feeds
(``Role.FEED``), trainable parameters (``Role.PARAMETER``) and other persistable
state (``Role.STATE``: optimizer moments, learning rate). Fetched variables are
``Role.FETCH`` results; persistable variables that the converted ops update are
``Role.STATE`` results (ir/roles.py).
"""
from __future__ import annotations

from collections import Counter

from ..errors import ConversionError, UnsupportedOpsError, ValidationError
from ..ir import Function, Output
from ..ir.groups import RankLayout
from ..ir.ops import Parameter
from ..ir.roles import Role, fetch_result, state_result
from .node_context import NodeContext
from .converters import OP_TABLE, SKIPPED_OPS
from .program_view import FORWARD, ProgramView


def find_unsupported(view: ProgramView, ops=None) -> list[dict]:
    counts: Counter = Counter()
    first: dict[str, object] = {}
    for op in view.ops if ops is None else ops:
        if op.type in OP_TABLE or op.type in SKIPPED_OPS:
            continue
        counts[op.type] += 1
        first.setdefault(op.type, op)
    return [{"op_type": t, "count": counts[t], "block": first[t].block, "op_index": first[t].index,
             "outputs": first[t].output_names()} for t in sorted(counts, key=lambda t: (first[t].block, first[t].index))]


class ConversionSession:
    """``sync_batch_norm``: every training-mode batch norm takes its statistics over the batch of
    all ranks (converters/norm.py); ``nranks``: the ranks the function will run on (Paddle's own
    sync_batch_norm does so when there are several); ``layout``: this rank's place among them
    (model parallelism; the groups of the ring ids of tensor-parallel ops, converters/collective.py),
    by default one data-parallel group of ``nranks``."""

    def __init__(self, view: ProgramView, sync_batch_norm: bool = False, nranks: int = 1,
                 layout: RankLayout | None = None):
        self.view = view
        self.sync_batch_norm = bool(sync_batch_norm)
        self.nranks = int(nranks)
        self.layout = layout or RankLayout(self.nranks)
        if self.layout.nranks != self.nranks:
            raise ValueError(f"layout of {self.layout.nranks} ranks for a session of {self.nranks}")
        self.env: dict[str, Output] = {}
        self.parameters: list[Parameter] = []
        self.initial: dict[str, Parameter] = {}
        self.produced: dict[int, dict[str, Output]] = {}  # id(OpView) -> what its converter bound
        # Ids of the nodes that forward ops' converters made (passes/recompute.py tells the forward
        # pass from the backward with it: IR nodes carry no op role), and of every node seen so far.
        self.forward_ids: set[int] = set()
        self._seen_ids: set[int] = set()

    # --- values ---------------------------------------------------------------------------
    def value(self, name: str, ctx: NodeContext | None = None) -> Output:
        if name in self.env:
            return self.env[name]
        info = self.view.vars.get(name)
        if info is None or info.dtype is None:
            where = f"{ctx.op.location()}: " if ctx else ""
            raise ConversionError(f"{where}variable '{name}' is read before any op defines it, and the program declares no type for it")
        role = Role.PARAMETER if info.is_parameter else Role.STATE if info.persistable else Role.FEED
        shape = info.shape
        param = Parameter(name=name, dtype=info.dtype.value, shape=list(shape), role=role)
        self.parameters.append(param)
        self.initial[name] = param
        self.env[name] = param.output()
        return self.env[name]

    def bind(self, name: str, value: Output, ctx: NodeContext):
        if not isinstance(value, Output):
            raise ctx.fail(f"converter bound {type(value).__name__} to output '{name}'")
        self.env[name] = value
        self.produced.setdefault(id(ctx.op), {})[name] = value

    # --- conversion ------------------------------------------------------------------------
    def convert_ops(self, ops):
        unsupported = find_unsupported(self.view, ops)
        if unsupported:
            raise UnsupportedOpsError(unsupported)
        for op in ops:
            if op.type in SKIPPED_OPS:
                continue
            refusal = self.try_convert(op)
            if refusal is not None:
                raise refusal

    def try_convert(self, op) -> ConversionError | None:
        """Converts one op; returns the converter's refusal (a ``RefusedOpError``, or a
        ``ValidationError`` of the nodes it built, as a ConversionError naming the op), None once
        converted. Any other exception is a bug of the converter: raised, naming the op."""
        try:
            OP_TABLE[op.type](NodeContext(op, self))
        except ConversionError as e:
            return e
        except ValidationError as e:  # the IR refuses the nodes (a shape, a dtype): a refusal too
            error = ConversionError(f"{op.location()}: {type(e).__name__}: {e}")
            error.__cause__ = e
            return error
        except Exception as e:
            raise ConversionError(f"{op.location()}: the converter of {op.type} failed with {type(e).__name__}: "
                                  f"{e} (a bug in paddle_ngraph: please report it with this message)") from e
        self._note_nodes(op)
        return None

    def _note_nodes(self, op):
        """Marks the nodes this op's converter made (those its outputs reach that no earlier op's
        did) as forward when the op is."""
        stack = [value.node for value in self.produced.get(id(op), {}).values()]
        forward = op.role == FORWARD
        while stack:
            node = stack.pop()
            if node.id in self._seen_ids:
                continue
            self._seen_ids.add(node.id)
            if forward:
                self.forward_ids.add(node.id)
            stack.extend(i.node for i in node.inputs)

    def function(self, fetch: list[str], name: str = "function") -> Function:
        results: dict[str, Output] = {}
        for var in fetch:
            results[fetch_result(var)] = self.value(var)
        for var, value in self.env.items():
            info = self.view.vars.get(var)
            unchanged = var in self.initial and value.node is self.initial[var]
            if info is not None and info.persistable and not unchanged:
                results[state_result(var)] = value
        return Function(self.parameters, results, name=name)
