"""Graph surgery shared by the passes: redirect every use of some outputs to others."""
from __future__ import annotations

from ..errors import ValidationError
from ..ir import Function, Output


def replace_outputs(function: Function, replacements: dict[tuple[int, int], Output]):
    """Every input and result reading output ``(node_id, index)`` reads ``replacements[...]`` instead.

    Chains resolve (a replacement may itself be replaced), so passes can record
    replacements in any order.
    """
    if not replacements:
        return

    def resolve(value: Output) -> Output:
        seen = 0
        while (value.node.id, value.index) in replacements:
            value = replacements[(value.node.id, value.index)]
            seen += 1
            if seen > len(replacements):
                # A pass replaced a value by itself through a chain: following it would loop.
                raise ValidationError(f"function '{function.name}': the output replacements form a cycle through "
                                      f"node '{value.node.name}' ({value.node.op_type}) output {value.index}")
        return value

    for name, value in list(function.results.items()):
        function.results[name] = resolve(value)
    for node in function.ordered_nodes():
        node.inputs = [resolve(i) for i in node.inputs]
