"""``Function``: the unit the transpiler produces and the backends compile.

A function has ordered parameters (the graph inputs), named results, and the
nodes between them in a topological order derived from the results.
"""
from __future__ import annotations

from ..errors import ValidationError
from .node import Node, Output
from .ops import Parameter
from .roles import Role


class Function:
    def __init__(self, parameters: list[Parameter], results: dict[str, Output], name: str = "function"):
        self.name = name
        self.parameters = list(parameters)
        self.results = dict(results)
        for p in self.parameters:
            if not isinstance(p, Parameter):
                raise ValidationError(f"function '{name}': parameter {p!r} is not a Parameter node")
        names = [p.name for p in self.parameters]
        if len(set(names)) != len(names):
            raise ValidationError(f"function '{name}': duplicate parameter names")
        self._check_closed()

    # --- structure ---------------------------------------------------------------
    def ordered_nodes(self) -> list[Node]:
        """Every node reachable from the results or parameters, inputs before users.

        Ties keep creation order (node ids), so that the order is deterministic and
        the same on every rank for the same program. Copies of forward nodes that
        passes/recompute.py made for backward (``Role.RECOMPUTE_COPY``) come after a node's
        other inputs, so that they run as late as possible: just before the first node that
        needs them, once the gradient it also reads exists.
        """
        seen: set[int] = set()
        order: list[Node] = []
        roots = sorted({o.node for o in self.results.values()} | set(self.parameters), key=lambda n: n.id)
        for root in roots:
            stack = [(root, False)]
            while stack:
                node, expanded = stack.pop()
                if expanded:
                    order.append(node)
                    continue
                if node.id in seen:
                    continue
                seen.add(node.id)
                stack.append((node, True))
                for inp in sorted({i.node for i in node.inputs},
                                  key=lambda n: (n.role is not Role.RECOMPUTE_COPY, -n.id)):
                    if inp.id not in seen:
                        stack.append((inp, False))
        return order

    def _check_closed(self):
        params = {p.id for p in self.parameters}
        for node in self.ordered_nodes():
            if isinstance(node, Parameter) and node.id not in params:
                raise ValidationError(
                    f"function '{self.name}': node '{node.name}' is a Parameter that is not "
                    f"among the function's parameters"
                )

    def users(self) -> dict[int, list[Node]]:
        """Map node id -> nodes that consume one of its outputs."""
        result: dict[int, list[Node]] = {}
        for node in self.ordered_nodes():
            for inp in node.inputs:
                result.setdefault(inp.node.id, []).append(node)
        return result

    def parameter(self, name: str) -> Parameter:
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(name)

    def __repr__(self):
        return f"<Function {self.name}: {len(self.parameters)} parameters, {len(self.results)} results>"


def clone_function(function: Function, shapes: dict[str, tuple] | None = None,
                   copies: dict[int, Node] | None = None) -> Function:
    """A deep copy of ``function`` with the same node names; every node re-infers its types.

    ``shapes`` gives parameters new (typically concrete) shapes by name: cloning with the
    shapes of the actual inputs specializes a function with dynamic dimensions. ``copies``, if
    given, is filled with original node id -> its copy (to find a known value in the copy).
    """
    from .ops import Constant

    copies = {} if copies is None else copies
    for node in function.ordered_nodes():
        if isinstance(node, Parameter):
            attrs = dict(node.attrs)
            if shapes and node.name in shapes:
                attrs["shape"] = tuple(int(d) for d in shapes[node.name])
            copy = Parameter(name=node.name, **attrs)
        elif isinstance(node, Constant):
            copy = Constant(node.attrs["value"], dtype=node.attrs["dtype"], name=node.name)
        else:
            inputs = [copies[i.node.id].output(i.index) for i in node.inputs]
            copy = type(node)(*inputs, name=node.name, **node.attrs)
            copy.role = node.role
        copies[node.id] = copy
    return Function([copies[p.id] for p in function.parameters],
                    {k: copies[o.node.id].output(o.index) for k, o in function.results.items()}, name=function.name)
