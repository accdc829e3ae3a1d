"""Re-checks a function after a pass: every node's recorded types equal what it infers now."""
from __future__ import annotations

from ..errors import ValidationError
from ..ir import Function
from ..ir.node import as_tensor_types
from ..ir.ops import Constant, Parameter
from .base import FunctionPass


class Validate(FunctionPass):
    name = "validate"

    def run(self, function: Function) -> bool:
        function._check_closed()
        for node in function.ordered_nodes():
            if isinstance(node, (Parameter, Constant)):
                continue
            if as_tensor_types(node.infer()) != node.output_types:
                raise ValidationError(f"While validating node '{node.name}' ({node.op_type}): output types "
                                      f"{[str(t) for t in node.output_types]} no longer match its inputs")
        return False
