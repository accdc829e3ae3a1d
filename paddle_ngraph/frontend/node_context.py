"""What a converter sees of one Paddle op, after OpenVINO's ``NodeContext``.

Converters read inputs by Paddle slot name and set outputs by slot name. Names
are matched normalized (see ``program_view.normalize``), and a converter may
list the spellings of both IRs: ``ctx.input("Logits", "input")``.
"""
from __future__ import annotations

import numpy as np

from ..errors import ConversionError, RefusedOpError
from ..ir import Output
from ..ir.bfloat16 import widen
from ..ir.ops import Constant
from ..ir.types import DType
from .constant_folding import folded_value
from .program_view import OpView, normalize

_REQUIRED = object()


class NodeContext:
    def __init__(self, op: OpView, session):
        self.op = op
        self.session = session

    @property
    def op_type(self) -> str:
        return self.op.type

    # --- errors --------------------------------------------------------------------------
    def fail(self, message: str) -> ConversionError:
        """The converter's refusal of this op as it is (raise it): the op falls back to Paddle."""
        return RefusedOpError(f"{self.op.location()}: {message}")

    # --- inputs --------------------------------------------------------------------------
    def _slot(self, table: dict, names) -> list | None:
        for n in names:
            entry = table.get(normalize(n))
            if entry is not None:
                return entry
        return None

    def has_input(self, *names) -> bool:
        entry = self._slot(self.op.inputs, names)
        return bool(entry) and entry[0] is not None

    def input_name(self, *names, index: int = 0) -> str:
        entry = self._slot(self.op.inputs, names)
        if not entry or index >= len(entry) or entry[index] is None:
            raise self.fail(f"missing input {'/'.join(names)}")
        return entry[index]

    def input(self, *names, index: int = 0) -> Output:
        return self.session.value(self.input_name(*names, index=index), self)

    def inputs(self, *names) -> list[Output]:
        entry = self._slot(self.op.inputs, names) or []
        return [self.session.value(n, self) for n in entry if n is not None]

    def const_input(self, *names, index: int = 0) -> np.ndarray:
        """The value of an input that must be a compile-time constant (PIR ``full_int_array``, or
        arithmetic on constants such as a static shape: ``constant_folding``)."""
        value = self.input(*names, index=index)
        if not isinstance(value.node, Constant):
            # Computed from constants only (bounds derived from a static shape): its value now.
            folded = folded_value(value)
            if folded is None:
                raise self.fail(f"input {'/'.join(names)} must be a constant known at conversion time")
            return folded
        if value.dtype is DType.bfloat16:  # its bits, as the numbers they stand for
            return widen(value.node.attrs["value"])
        return value.node.attrs["value"]

    # --- attributes --------------------------------------------------------------------------
    def has_attr(self, *names) -> bool:
        return any(normalize(n) in self.op.attrs for n in names)

    def attr(self, *names, default=_REQUIRED):
        for n in names:
            key = normalize(n)
            if key in self.op.attrs:
                return self.op.attrs[key]
        if default is _REQUIRED:
            raise self.fail(f"missing attribute {'/'.join(names)}")
        return default

    def attr_or_const_input(self, attr_names: tuple, input_names: tuple, default=_REQUIRED):
        """An attribute that PIR passes as an input (adam's beta1, scale's scale, ...)."""
        if self.has_input(*input_names):
            return self.const_input(*input_names).reshape(-1)[0].item()
        return self.attr(*attr_names, default=default)

    # --- outputs -------------------------------------------------------------------------------
    def has_output(self, *names) -> bool:
        entry = self._slot(self.op.outputs, names)
        return bool(entry) and entry[0] is not None

    def output_name(self, *names, index: int = 0) -> str | None:
        entry = self._slot(self.op.outputs, names)
        if not entry or index >= len(entry):
            return None
        return entry[index]

    def output_info(self, *names, index: int = 0):
        name = self.output_name(*names, index=index)
        return self.session.view.vars.get(name) if name else None

    def set_output(self, names, value: Output, index: int = 0):
        """Binds an output slot (a name or tuple of spellings) to a graph value; absent slots are skipped."""
        names = (names,) if isinstance(names, str) else tuple(names)
        name = self.output_name(*names, index=index)
        if name is not None:
            self.session.bind(name, value, self)
