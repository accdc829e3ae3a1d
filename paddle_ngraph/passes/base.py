"""The pass interface: ``run(function) -> bool`` (whether the graph changed)."""
from __future__ import annotations

from ..ir import Function


class FunctionPass:
    name = "pass"

    def run(self, function: Function) -> bool:
        raise NotImplementedError
