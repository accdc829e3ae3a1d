"""The converter registry: every converter names, beside its code, the Paddle op types it converts.

As the Paddle nGraph bridge ended each op file with ``REGISTER_NG_OP(gelu, BuildGeluNode)``, a
converter here is declared with ``@converter("gelu", "pd_op.gelu")``: its legacy op type(s) and
its PIR op type(s), once each; aliases are more names on the same converter. Importing the
family modules (``converters/__init__.py`` does) fills ``OP_TABLE``.
"""
from __future__ import annotations

from typing import Callable

from ...errors import RegistrationError

#: Paddle op type (legacy or PIR) -> converter, in registration order (the order of docs/OPS.md).
OP_TABLE: dict[str, Callable] = {}

#: Ops that carry no computation (feeds, fetches, parameter declarations, list packing): the
#: decoders handle them, no converter does.
SKIPPED_OPS = {"feed", "fetch", "fetch_v2", "pd_op.data", "pd_op.feed", "pd_op.fetch", "builtin.parameter",
               "builtin.combine", "builtin.shadow_output", "builtin.set_parameter"}


def converter(*op_types: str):
    """Registers the decorated function as the converter of ``op_types``."""
    if not op_types:
        raise TypeError("converter() needs at least one Paddle op type")

    def register(function):
        for op_type in op_types:  # all checked before any is registered
            if op_type in OP_TABLE or op_type in SKIPPED_OPS or op_types.count(op_type) > 1:
                other = OP_TABLE.get(op_type, function)
                owner = "SKIPPED_OPS" if op_type in SKIPPED_OPS else f"{other.__module__}.{other.__name__}"
                raise RegistrationError(f"Paddle op type '{op_type}' registered twice: by {owner} and by "
                                        f"{function.__module__}.{function.__name__}")
        for op_type in op_types:
            OP_TABLE[op_type] = function
        return function
    return register
