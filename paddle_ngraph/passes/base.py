"""The pass interface: ``run(function) -> bool`` (whether the graph changed).

Every pass changes the function it is given in place, so the caller's function is the result.
A pass built on a function builder (a variant made on a copy, such as accumulation's apply
variant) moves the new graph into the given function with ``replace_graph``."""
from __future__ import annotations

from ..ir import Function


class FunctionPass:
    name = "pass"

    def run(self, function: Function) -> bool:
        raise NotImplementedError


def replace_graph(function: Function, new: Function) -> bool:
    """Moves ``new``'s parameters, results and name into ``function``; True if anything changed."""
    changed = (new.parameters != function.parameters or new.results != function.results
               or new.name != function.name)
    function.name, function.parameters, function.results = new.name, list(new.parameters), dict(new.results)
    return changed
