"""Liveness: the step order of a function, and the first and last step of every buffer.

The order overlaps communication with computation: each collective starts as soon
as its inputs exist (its bucket is complete), nodes that need no collective result
run next (the rest of the backward pass), and the nodes that read a collective's
outputs (the updates) come last, each bucket's Wait just before its first reader.
Statistics collectives (sync_batch_norm's sums) are waited for by the next node of
the pass that made them; what follows them is not held back.

Storage: a Reshape's output is a view of its input (no copy). An AllReduce or
Broadcast gets one contiguous region holding all its outputs, so a bucket travels
as one message in place. Every value is assigned to a storage root, and a root lives
from the step that first writes it to the last step that reads it or any view of it;
results live to the end.

Gradients as bucket views (torch's ``gradient_as_bucket_view``): a value that an
in-place collective reduces is placed in the collective's region, at its offset
there, so the kernel producing it writes into the bucket and the Start step copies
nothing. Since the collective overwrites the region with the reduced values, this
needs every other read of the value (or of a view of it) to come before the Start,
and the value not to be a result; where that fails, or the value has storage of its
own (a parameter, a constant, a parameter updated in place), the Start packs it
into the region as before: ``Step.pack`` lists those inputs, empty for the gradients
of ordinary models. The same holds for a Concat that joins whole blocks (ZeRO-1's
flattened bucket before its ReduceScatter): its pieces are written at their place
in its output, which nothing overwrites, and the Concat kernel skips them.

In-place results: ``inplace`` maps result names to parameter names (an optimizer's
new parameter or moment to the input it replaces). Such a result is written straight
into its parameter's buffer, as Paddle's own ``sgd_`` and ``adam_`` do, when its node
updates elementwise (reads element i of its inputs before writing element i) and
every other reader of the parameter can run before it; the order then makes them do
so. This saves copying every parameter and moment back after each step.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ....ir import Function
from ....ir.ops.collective import COLLECTIVE_OPS, is_statistics
from ....ir.ops import Constant, Parameter
from ....passes.base import FunctionPass

# Updates whose kernels read element i of their inputs before writing element i of an output, and
# read whole inputs (Lamb's and LARS's norms) only before writing anything: an output may share
# the buffer of an input of the same shape.
ELEMENTWISE_UPDATES = {"SGDUpdate", "MomentumUpdate", "AdamUpdate", "LambUpdate", "LarsMomentumUpdate"}
# Collectives whose outputs have the types of their inputs: reduced in place in one region.
IN_PLACE_COLLECTIVES = {"AllReduce", "Broadcast"}


@dataclass
class Step:
    kind: str  # "compute", "start" or "wait"
    node: object
    # start of an in-place collective: indices of the inputs copied into its region (placed
    # elsewhere); the others were written there by their producers
    pack: tuple = ()


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

    def __init__(self, inplace: dict[str, str] | None = None):
        self.requested_inplace = dict(inplace or {})
        self.inplace: dict[tuple, int] = {}  # value (node id, index) -> parameter node id it overwrites

    def run(self, function: Function) -> bool:
        self.function = function
        after = self._choose_inplace(function)
        self.steps = self._schedule(function, after)
        self.placed = self._place_in_buckets(function)
        self._assign_storage(function)
        self._mark_packs()
        return False

    # --- in-place results ----------------------------------------------------------------------
    def _choose_inplace(self, function: Function) -> dict[int, set[int]]:
        """Picks the in-place results; returns the extra order they need: node id -> ids of the
        nodes that must run before it (the other readers of the parameter it overwrites)."""
        readers: dict[int, set[int]] = {}  # parameter id -> ids of nodes reading it or a view of it
        nodes = function.ordered_nodes()
        view_of = {}
        for n in nodes:
            if isinstance(n, Parameter):
                view_of[n.id] = n.id
            elif n.op_type == "Reshape" and n.inputs[0].node.id in view_of:
                view_of[n.id] = view_of[n.inputs[0].node.id]
        for n in nodes:
            for i in n.inputs:
                if i.node.id in view_of and n.op_type != "Reshape":
                    readers.setdefault(view_of[i.node.id], set()).add(n.id)
        after: dict[int, set[int]] = {}
        taken = set()
        params = {p.name: p for p in function.parameters}
        result_values = [(o.node.id, o.index) for o in function.results.values()]
        users = function.users()
        for result, param_name in sorted(self.requested_inplace.items()):
            value, param = function.results.get(result), params.get(param_name)
            if value is None or param is None or param.id in taken:
                continue
            node = value.node
            if (node.op_type not in ELEMENTWISE_UPDATES or value.type != param.output_types[0]
                    or result_values.count((node.id, value.index)) != 1
                    or (param.id, 0) in result_values):
                continue
            others = readers.get(param.id, set()) - {node.id}
            if self._reaches(users, node, others):
                continue  # a reader of the parameter needs this node's result: it cannot run first
            self.inplace[(node.id, value.index)] = param.id
            after.setdefault(node.id, set()).update(others)
            taken.add(param.id)
        return after

    @staticmethod
    def _reaches(users: dict, node, targets: set[int]) -> bool:
        """Whether any node in targets depends on node (directly or not); users: Function.users()."""
        if not targets:
            return False
        stack, seen = [node], set()
        while stack:
            n = stack.pop()
            for u in users.get(n.id, []):
                if u.id in targets:
                    return True
                if u.id not in seen:
                    seen.add(u.id)
                    stack.append(u)
        return False

    # --- order ---------------------------------------------------------------------------------
    @staticmethod
    def _schedule(function: Function, after: dict[int, set[int]]) -> list[Step]:
        nodes = [n for n in function.ordered_nodes() if not isinstance(n, (Parameter, Constant))]
        position = {n.id: k for k, n in enumerate(nodes)}
        # Nodes that need a gradient bucket's result (the updates). A statistics collective
        # (sync_batch_norm's sums) does not count: the rest of the forward and backward passes
        # depend on it, and holding them back would hold back the gradient buckets too.
        after_collective: set[int] = set()
        for n in nodes:
            if any((i.node.op_type in COLLECTIVE_OPS and not is_statistics(i.node)) or i.node.id in after_collective
                   for i in n.inputs):
                after_collective.add(n.id)

        # List scheduling: a collective as soon as it is ready, then the nodes that need no
        # collective result, then the rest; ties in the function's order.
        def priority(n):
            group = 0 if n.op_type in COLLECTIVE_OPS and n.id not in after_collective else (
                2 if n.id in after_collective else 1)
            return group, position[n.id]

        waiting_for = {n.id: {i.node.id for i in n.inputs if i.node.id in position} | after.get(n.id, set())
                       for n in nodes}
        dependents: dict[int, list] = {}
        for n in nodes:
            for d in waiting_for[n.id]:
                dependents.setdefault(d, []).append(n)
        ready = [(priority(n), n.id, n) for n in nodes if not waiting_for[n.id]]
        heapq.heapify(ready)
        steps: list[Step] = []
        while ready:
            _, _, n = heapq.heappop(ready)
            steps.append(Step("start" if n.op_type in COLLECTIVE_OPS else "compute", n))
            for d in dependents.get(n.id, []):
                waiting_for[d.id].discard(n.id)
                if not waiting_for[d.id]:
                    heapq.heappush(ready, (priority(d), d.id, d))
        assert len(steps) == len(nodes), "the order constraints have a cycle"

        # A Wait before the first step that reads each collective; the rest wait at the end.
        ordered: list[Step] = []
        waiting = set()
        for step in steps:
            for i in step.node.inputs:
                if i.node.op_type in COLLECTIVE_OPS and i.node.id in waiting:
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

    # --- gradients as bucket views -----------------------------------------------------------------
    def _place_in_buckets(self, function: Function) -> dict[tuple, tuple]:
        """Values written straight into the storage their collective or Concat reads them from:
        value -> (root key, byte offset, root bytes). A placed value is the storage owner (its
        Reshape views follow it); see the module docstring for when a value cannot be placed."""
        position = {s.node.id: pos for pos, s in enumerate(self.steps) if s.kind != "wait"}
        wait_position = {s.node.id: pos for pos, s in enumerate(self.steps) if s.kind == "wait"}

        def base(output):  # the value owning the storage of a value: through Reshape views
            while output.node.op_type == "Reshape":
                output = output.node.inputs[0]
            return output

        # Until when each value is read (by the node or through a view), and by which nodes.
        reads: dict[tuple, list[tuple[int, int]]] = {}  # value -> [(last step reading it, node id)]
        for step in self.steps:
            node = step.node
            if step.kind == "wait" or node.op_type == "Reshape":
                continue
            until = wait_position[node.id] if (node.op_type in COLLECTIVE_OPS
                                               and node.op_type not in IN_PLACE_COLLECTIVES) else position[node.id]
            for i in node.inputs:
                b = base(i)
                reads.setdefault((b.node.id, b.index), []).append((until, node.id))
        results = set()
        for value in function.results.values():
            b = base(value)
            results.add((b.node.id, b.index))

        placed: dict[tuple, tuple] = {}
        targets = set()  # nodes whose output holds placed values: not placed themselves

        def own_storage(b) -> bool:
            node = b.node
            return (node.id in position and node.op_type not in COLLECTIVE_OPS
                    and (node.id, b.index) not in self.inplace and (node.id, b.index) not in placed
                    and node.id not in targets)

        # In schedule order, so that a value read by two buckets goes to the later one (the earlier
        # reads it before that one's Start) and the first placement wins.
        for step in self.steps:
            node = step.node
            if step.kind != "start" or node.op_type not in IN_PLACE_COLLECTIVES:
                continue
            region_bytes = sum(t.nbytes() for t in node.output_types)
            offset = 0
            for i, t in zip(node.inputs, node.output_types):
                b = base(i)
                value = (b.node.id, b.index)
                if (own_storage(b) and value not in results and b.type.nbytes() == t.nbytes()
                        and all(until < position[node.id] for until, reader in reads.get(value, []) if reader != node.id)):
                    placed[value] = (("region", node.id), offset, region_bytes)
                offset += t.nbytes()
            targets.add(node.id)
        for step in self.steps:
            node = step.node
            if step.kind != "compute" or node.op_type != "Concat" or (node.id, 0) in placed:
                continue
            shape = node.output_types[0].shape
            axis = node.attrs["axis"] % len(shape) if shape else 0
            if any(d != 1 for d in shape[:axis]):
                continue  # each input is more than one block of the output
            total, offset, pieces = node.output_types[0].nbytes(), 0, []
            for i in node.inputs:
                b = base(i)
                if own_storage(b) and b.type.nbytes() == i.type.nbytes() and (b.node.id, b.index) not in pieces:
                    pieces.append((b.node.id, b.index))
                    placed[(b.node.id, b.index)] = (("value", node.id, 0), offset, total)
                offset += i.type.nbytes()
            if pieces:
                targets.add(node.id)
        return placed

    def _mark_packs(self):
        """Step.pack of every in-place collective's Start: the inputs not already in its region."""
        for step in self.steps:
            node = step.node
            if step.kind != "start" or node.op_type not in IN_PLACE_COLLECTIVES:
                continue
            step.pack = tuple(k for k, i in enumerate(node.inputs)
                              if self.value_root[(i.node.id, i.index)] != self.value_root[(node.id, k)]
                              or self.value_offset[(i.node.id, i.index)] != self.value_offset[(node.id, k)])

    # --- storage and lifetimes -------------------------------------------------------------------
    def _assign_storage(self, function: Function):
        self.roots: dict[tuple, Root] = {}
        self.value_root: dict[tuple, tuple] = {}   # value -> root key
        self.value_offset: dict[tuple, int] = {}   # byte offset of a value inside its root

        def add_root(key, nbytes, kind):
            self.roots[key] = Root(key, nbytes, kind)
            return key

        def arena_root(key, nbytes, pos):
            """The arena root key, created by its first writer: a bucket's region or a Concat's output
            is first written by the producer of the first value placed in it."""
            if key not in self.roots:
                add_root(key, nbytes, "arena")
                self.roots[key].first = pos
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
                region = arena_root(("region", node.id), sum(t.nbytes() for t in node.output_types), pos)
                offset = 0
                for k, t in enumerate(node.output_types):
                    self.value_root[(node.id, k)] = region
                    self.value_offset[(node.id, k)] = offset
                    offset += t.nbytes()
                continue
            for k, t in enumerate(node.output_types):
                if (node.id, k) in self.inplace:  # written into the parameter's buffer
                    self.value_root[(node.id, k)] = ("value", self.inplace[(node.id, k)], 0)
                    self.value_offset[(node.id, k)] = 0
                    continue
                if (node.id, k) in self.placed:  # written into its bucket (or Concat output)
                    key, offset, nbytes = self.placed[(node.id, k)]
                    self.value_root[(node.id, k)] = arena_root(key, nbytes, pos)
                    self.value_offset[(node.id, k)] = offset
                    continue
                key = arena_root(("value", node.id, k), t.nbytes(), pos)
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
            if node.op_type in COLLECTIVE_OPS and node.op_type not in IN_PLACE_COLLECTIVES:
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
