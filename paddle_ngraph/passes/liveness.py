"""Liveness: the step order of a function, and the first and last step of every buffer.

The order overlaps communication with computation: each collective starts as soon
as its inputs exist (its bucket is complete), nodes that need no collective result
run next (the rest of the backward pass), and the nodes that read a collective's
outputs (the updates) come last, each bucket's Wait just before its first reader.

Storage: a Reshape's output is a view of its input (no copy). An AllReduce or
Broadcast gets one contiguous region holding all its outputs, so a bucket travels
as one message in place; its inputs are packed into it when it starts.
Every value is assigned to a storage root, and a root lives from the step that
first writes it to the last step that reads it or any view of it; results live
to the end.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Function
from ..ir.ops.core import Constant, Parameter
from .base import FunctionPass

COLLECTIVES = {"AllReduce", "Broadcast", "AllGather", "ReduceScatter", "Send", "Recv"}
# Collectives whose outputs have the types of their inputs: reduced in place in one region.
IN_PLACE_COLLECTIVES = {"AllReduce", "Broadcast"}


@dataclass
class Step:
    kind: str  # "compute", "start" or "wait"
    node: object


@dataclass
class Root:
    """A piece of storage: one value, or the region of an in-place collective."""

    key: tuple
    nbytes: int
    kind: str  # "arena", "input", "constant"
    first: int = 0
    last: int = 0
    views: list = field(default_factory=list)


class Liveness(FunctionPass):
    name = "liveness"

    def run(self, function: Function) -> bool:
        self.function = function
        self.steps = self._schedule(function)
        self._assign_storage(function)
        return False

    # --- order ---------------------------------------------------------------------------------
    @staticmethod
    def _schedule(function: Function) -> list[Step]:
        nodes = [n for n in function.ordered_nodes() if not isinstance(n, (Parameter, Constant))]
        after_collective: set[int] = set()
        for n in nodes:
            if any(i.node.op_type in COLLECTIVES or i.node.id in after_collective for i in n.inputs):
                after_collective.add(n.id)
        early = [n for n in nodes if n.id not in after_collective]
        late = [n for n in nodes if n.id in after_collective]

        steps: list[Step] = []
        produced = {n.id for n in function.ordered_nodes() if isinstance(n, (Parameter, Constant))}
        pending = [n for n in early if n.op_type in COLLECTIVES]

        def start_ready():
            for c in list(pending):
                if all(i.node.id in produced for i in c.inputs):
                    steps.append(Step("start", c))
                    produced.add(c.id)
                    pending.remove(c)

        start_ready()
        for n in early:
            if n.op_type in COLLECTIVES:
                continue
            steps.append(Step("compute", n))
            produced.add(n.id)
            start_ready()
        assert not pending, "a collective whose inputs never became ready"
        for n in late:
            steps.append(Step("start" if n.op_type in COLLECTIVES else "compute", n))

        # A Wait before the first step that reads each collective; the rest wait at the end.
        ordered: list[Step] = []
        waiting = set()
        for step in steps:
            for i in step.node.inputs:
                if i.node.op_type in COLLECTIVES and i.node.id in waiting:
                    ordered.append(Step("wait", i.node))
                    waiting.discard(i.node.id)
            ordered.append(step)
            if step.kind == "start":
                waiting.add(step.node.id)
        for step in steps:
            if step.kind == "start" and step.node.id in waiting:
                ordered.append(Step("wait", step.node))
                waiting.discard(step.node.id)
        return ordered

    # --- storage and lifetimes -------------------------------------------------------------------
    def _assign_storage(self, function: Function):
        self.roots: dict[tuple, Root] = {}
        self.value_root: dict[tuple, tuple] = {}   # value -> root key
        self.value_offset: dict[tuple, int] = {}   # byte offset of a value inside its root

        def add_root(key, nbytes, kind):
            self.roots[key] = Root(key, nbytes, kind)
            return key

        for p in function.parameters:
            self.value_root[(p.id, 0)] = add_root(("value", p.id, 0), p.output_types[0].nbytes(), "input")
            self.value_offset[(p.id, 0)] = 0
        for node in function.ordered_nodes():
            if isinstance(node, Constant):
                self.value_root[(node.id, 0)] = add_root(("value", node.id, 0), node.output_types[0].nbytes(),
                                                         "constant")
                self.value_offset[(node.id, 0)] = 0
        position = {}
        for pos, step in enumerate(self.steps):
            node = step.node
            if step.kind == "wait":
                continue
            position[node.id] = pos
            if node.op_type == "Reshape":
                base = (node.inputs[0].node.id, node.inputs[0].index)
                self.value_root[(node.id, 0)] = self.value_root[base]
                self.value_offset[(node.id, 0)] = self.value_offset[base]
                continue
            if node.op_type in IN_PLACE_COLLECTIVES:
                region = add_root(("region", node.id), sum(t.nbytes() for t in node.output_types), "arena")
                self.roots[region].first = pos
                offset = 0
                for k, t in enumerate(node.output_types):
                    self.value_root[(node.id, k)] = region
                    self.value_offset[(node.id, k)] = offset
                    offset += t.nbytes()
                continue
            for k, t in enumerate(node.output_types):
                key = add_root(("value", node.id, k), t.nbytes(), "arena")
                self.roots[key].first = pos
                self.value_root[(node.id, k)] = key
                self.value_offset[(node.id, k)] = 0

        # Last uses. Inputs of a collective that is not in place are read until its Wait.
        wait_position = {s.node.id: pos for pos, s in enumerate(self.steps) if s.kind == "wait"}
        for root in self.roots.values():
            root.last = root.first
        for pos, step in enumerate(self.steps):
            if step.kind == "wait":
                continue
            node = step.node
            read_until = pos
            if node.op_type in COLLECTIVES and node.op_type not in IN_PLACE_COLLECTIVES:
                read_until = wait_position[node.id]
            if node.op_type == "Reshape":
                continue  # a view: its readers keep the root alive
            for i in node.inputs:
                root = self.roots[self.value_root[(i.node.id, i.index)]]
                root.last = max(root.last, read_until)
        end = len(self.steps)
        for value in function.results.values():
            self.roots[self.value_root[(value.node.id, value.index)]].last = end
        # An in-place collective's region is read by its communication until the Wait.
        for root in self.roots.values():
            if root.key[0] == "region":
                root.last = max(root.last, wait_position[root.key[1]])
