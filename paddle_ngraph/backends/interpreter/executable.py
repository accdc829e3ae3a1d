"""Runs a function node by node, like torch.fx's Interpreter.

Values are freed after their last use, and every failure is re-raised naming
the node being executed.
"""
from __future__ import annotations

import time

import numpy as np

from ...errors import ExecutionError, NgraphError
from ...ir import Function
from ...ir.ops.collective import COLLECTIVE_OPS
from ...ir.ops import Constant, Parameter
from .. import timeline
from ..base import Backend, Executable, collective_labels, register_backend
from .bfloat16 import kernel_for
from .kernels import KERNELS


class InterpreterExecutable(Executable):
    def __init__(self, function: Function):
        self.function = function
        self.nodes = [n for n in function.ordered_nodes() if not isinstance(n, Parameter)]
        missing = sorted({n.op_type for n in self.nodes if n.op_type not in KERNELS})
        if missing:
            raise ExecutionError(f"INTERPRETER has no kernel for op type(s): {', '.join(missing)}")
        self.kernels = [kernel_for(n, KERNELS) for n in self.nodes]
        self.param_index = {p.id: i for i, p in enumerate(function.parameters)}
        collectives = [n for n in self.nodes if n.op_type in COLLECTIVE_OPS]
        self.collective_ids = {n.id for n in collectives}
        self.labels = collective_labels(function, collectives)
        self.submitted = self.completed = 0  # of the running call, for the stall watchdog
        self._spans = timeline.Spans()  # of the last call, when tracing
        # Last position at which each node's outputs are read; results are kept to the end.
        last_use: dict[int, int] = {}
        for pos, node in enumerate(self.nodes):
            for inp in node.inputs:
                last_use[inp.node.id] = pos
        for out in function.results.values():
            last_use[out.node.id] = len(self.nodes)
        self.free_after: list[list[int]] = [[] for _ in self.nodes]
        for node_id, pos in last_use.items():
            if pos < len(self.nodes):
                self.free_after[pos].append(node_id)

    #: Peak bytes of the intermediate values of the last call (inputs and constants not counted).
    peak_bytes = None

    def collective_progress(self):
        return self.labels, self.submitted, self.completed

    def call(self, inputs, transport=None):
        params = self.function.parameters
        if len(inputs) != len(params):
            raise ExecutionError(f"function '{self.function.name}' takes {len(params)} inputs, got {len(inputs)}")
        values: dict[int, list] = {}
        for p, value in zip(params, inputs):
            values[p.id] = [value]
        self.submitted = self.completed = 0
        # Bytes of the values computed and not yet freed (a view counted as its own array): their
        # peak over the call is this backend's counterpart of the CPU backend's planned arena.
        sizes: dict[int, int] = {}
        live = peak = 0
        tracing = self.tracing
        if tracing:
            spans = self._spans = timeline.Spans()
        for pos, node in enumerate(self.nodes):
            args = [values[i.node.id][i.index] for i in node.inputs]
            collective = node.id in self.collective_ids
            self.submitted += collective
            try:
                begin = time.monotonic() if tracing else 0.0
                outs = self.kernels[pos](node, args, transport)
                if tracing:
                    spans.add(self._describe(node, collective), begin, time.monotonic())
                self.completed += collective
            except NgraphError as e:
                if node.name in str(e):
                    raise
                raise type(e)(f"while executing node '{node.name}' ({node.op_type}): {e}") from e
            except Exception as e:  # a kernel bug or bad data: name the node
                shapes = ", ".join(f"{np.shape(a)}" for a in args)
                raise ExecutionError(
                    f"while executing node '{node.name}' ({node.op_type}) on inputs of shapes {shapes}: "
                    f"{type(e).__name__}: {e}") from e
            values[node.id] = outs
            if not isinstance(node, Constant):
                sizes[node.id] = sum(getattr(o, "nbytes", 0) for o in outs)
                live += sizes[node.id]
                peak = max(peak, live)
            for node_id in self.free_after[pos]:
                values.pop(node_id, None)
                live -= sizes.pop(node_id, 0)
        self.peak_bytes = peak
        return [values[o.node.id][o.index] for o in self.function.results.values()]

    @staticmethod
    def _describe(node, collective: bool):
        """The node's place in the timeline; collectives are synchronous here, on the one thread."""
        if collective:
            bucket = timeline.bucket_of(node)
            return f"{node.op_type} {bucket}", "transfer", "compute", timeline.collective_args(node)
        return node.name, timeline.update_category(node) or node.op_type, "compute", {}

    def last_spans(self):
        return self._spans if self.tracing else timeline.Spans()


@register_backend("INTERPRETER")
class InterpreterBackend(Backend):
    # ``threads`` of the native backends is accepted and unused: NumPy decides.
    def __init__(self, **options):
        if options.get("check_finite"):
            from ...errors import ConfigError

            raise ConfigError("check_finite is an option of the CPU backend; the INTERPRETER does not check")
        self.options = options

    def compile(self, function: Function, inplace_results=None) -> InterpreterExecutable:
        # inplace_results is an optimization hint (see Backend.compile); the reference ignores it.
        return InterpreterExecutable(function)
