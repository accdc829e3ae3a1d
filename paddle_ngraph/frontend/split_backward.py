"""Splits a forward+backward function into a forward and a backward function.

A dygraph Layer's captured program computes outputs and gradients in one graph, with the
gradients of the outputs as inputs (``seeds``). Eager autograd needs them apart: the forward
runs when the Layer is called, the backward when ``loss.backward()`` brings the output
gradients. The backward part is every node that depends on a seed; everything else is
forward. Forward values the backward part reads cross as ``saved:<k>`` results of the forward
function and parameters of the backward one (``Role.SAVED``), except graph inputs (weights, the batch),
which the backward function takes itself, and constants, which it re-creates: neither is
worth keeping alive between the two calls.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ValidationError
from ..ir import Function
from ..ir.node import Node, Output
from ..ir.ops import Constant, Parameter
from ..ir.roles import ResultName, Role

SAVED_PREFIX = "saved:"


@dataclass
class Split:
    forward: Function
    backward: Function
    saved: list[str]  # forward result names the backward function takes, in its parameter order


def split_backward(function: Function, seeds: list[str], forward_results: list[str],
                   backward_results: list[str]) -> Split:
    """``seeds``: parameter names of the output gradients; the result names say which results
    belong to which function. A forward result depending on a seed is a ValidationError."""
    typed = {str(name): name for name in function.results}  # the names with their roles
    forward_results = [typed[name] for name in forward_results]
    backward_results = [typed[name] for name in backward_results]
    seed_ids = {function.parameter(name).id for name in seeds}
    order = function.ordered_nodes()
    depends = set(seed_ids)
    for node in order:
        if any(i.node.id in depends for i in node.inputs):
            depends.add(node.id)
    for name in forward_results:
        if function.results[name].node.id in depends:
            raise ValidationError(f"function '{function.name}': forward result '{name}' depends on an output gradient")

    # The backward function: copies of the dependent nodes (and of the constants and graph inputs
    # they read); every other value they read becomes a saved value.
    copies: dict[int, Node] = {}
    saved: dict[tuple[int, int], Parameter] = {}
    saved_values: list[Output] = []
    parameters: list[Parameter] = []

    def backward_value(output: Output) -> Output:
        node = output.node
        if node.id in depends or isinstance(node, (Parameter, Constant)):
            return copy(node).output(output.index)
        key = (node.id, output.index)
        if key not in saved:
            t = output.type
            saved[key] = Parameter(name=f"{SAVED_PREFIX}{len(saved_values)}", dtype=t.dtype.value,
                                   shape=tuple(t.shape), role=Role.SAVED)
            saved_values.append(output)
            parameters.append(saved[key])
        return saved[key].output()

    def copy(node: Node) -> Node:
        if node.id in copies:
            return copies[node.id]
        if isinstance(node, Parameter):
            made = Parameter(name=node.name, **node.attrs)
            parameters.append(made)
        elif isinstance(node, Constant):
            made = Constant(node.attrs["value"], dtype=node.attrs["dtype"], name=node.name)
        else:
            made = type(node)(*[backward_value(i) for i in node.inputs], name=node.name, **node.attrs)
            made.role = node.role
        copies[node.id] = made
        return made

    # Seeds first among the parameters, then in order of first use.
    for name in seeds:
        copy(function.parameter(name))
    results = {name: backward_value(function.results[name]) for name in backward_results}
    saved_names = [p.name for p in parameters if p.role is Role.SAVED]
    backward = Function(parameters, results, name=f"{function.name}_backward")
    forward_out = {name: function.results[name] for name in forward_results}
    forward_out.update({ResultName(f"{SAVED_PREFIX}{k}", Role.SAVED): v for k, v in enumerate(saved_values)})
    forward_params = [p for p in function.parameters if p.id not in seed_ids]
    forward = Function(forward_params, forward_out, name=f"{function.name}_forward")
    return Split(forward, backward, saved_names)
