"""Re-checks a function after a pass: every node's recorded types equal what it infers now."""
from __future__ import annotations

from ..errors import ValidationError
from ..ir import Function
from ..ir.ops.core import Constant, Parameter
from .base import FunctionPass


class Validate(FunctionPass):
    name = "validate"

    def run(self, function: Function) -> bool:
        params = {p.id for p in function.parameters}
        for node in function.ordered_nodes():
            if isinstance(node, Parameter):
                if node.id not in params:
                    raise ValidationError(f"node '{node.name}' is a Parameter not listed in function '{function.name}'")
                continue
            if isinstance(node, Constant):
                continue
            inferred = node.infer()
            if [tuple(t) if not hasattr(t, "dtype") else (t.dtype, t.shape) for t in inferred] != \
                    [(t.dtype, t.shape) for t in node.output_types]:
                raise ValidationError(f"While validating node '{node.name}' ({node.op_type}): output types "
                                      f"{[str(t) for t in node.output_types]} no longer match its inputs")
        return False
