"""Decoder for legacy ProgramDesc programs (``FLAGS_enable_pir_api=0``, ``.pdmodel`` files)."""
from __future__ import annotations

import os

from ..errors import ProgramFileError
from ..ir.types import DType
from .program_view import (BACKWARD, CAPTURED, FORWARD, OPTIMIZE, OpView, ProgramView, VarInfo, normalize,
                           paddle_load_error, read_program_bytes)

# op_role bits (paddle/fluid/framework/op_proto_maker.h)
_ROLE_BACKWARD, _ROLE_OPTIMIZE, _ROLE_LRSCHED = 0x0001, 0x0002, 0x0010
# Attributes Paddle adds to every op that say nothing about its semantics.
_BOOKKEEPING_ATTRS = {"op_callstack", "op_namescope", "op_device", "with_quant_attr", "op_role_var", "op_role"}


def _role(op) -> str:
    role = int(op.attr("op_role")) if op.has_attr("op_role") else 0
    if role & _ROLE_OPTIMIZE or role & _ROLE_LRSCHED:
        return OPTIMIZE
    if role & _ROLE_BACKWARD:
        return BACKWARD
    return FORWARD


def _dtype(var) -> DType | None:
    from paddle.base import core
    from paddle.base.data_feeder import convert_dtype

    if var.dtype == core.VarDesc.VarType.BF16:  # convert_dtype says 'uint16', the NumPy storage of its bits
        return DType.bfloat16
    try:
        return DType.parse(convert_dtype(var.dtype))
    except (ValueError, TypeError, KeyError):
        return None


def _var_info(var) -> VarInfo:
    import paddle

    try:
        shape = tuple(int(d) for d in var.shape)
    except (ValueError, TypeError, AttributeError):
        shape = ()
    is_param = isinstance(var, paddle.base.framework.Parameter)
    return VarInfo(
        name=var.name, dtype=_dtype(var), shape=shape,
        persistable=bool(var.persistable), is_parameter=is_param,
        trainable=bool(getattr(var, "trainable", True)) if is_param else False,
        is_data=bool(getattr(var, "is_data", False)),
        is_distributed=bool(getattr(var, "is_distributed", False)),
    )


def decode_program(program, source: str = "<legacy program>") -> ProgramView:
    ops, variables = [], {}
    for block in program.blocks:
        for name, var in block.vars.items():
            if name not in variables:
                variables[name] = _var_info(var)
        for index, op in enumerate(block.ops):
            view = OpView(type=op.type, block=block.idx, index=index, role=_role(op), native=op)
            for slot in op.input_names:
                view.inputs[normalize(slot)] = list(op.input(slot))
                view.slot_names[normalize(slot)] = slot
            for slot in op.output_names:
                view.outputs[normalize(slot)] = list(op.output(slot))
                view.slot_names[normalize(slot)] = slot
            for attr in op.attr_names:
                if attr not in _BOOKKEEPING_ATTRS:
                    view.attrs[normalize(attr)] = op.attr(attr)
            sub_blocks = _sub_blocks(program, op)
            if sub_blocks:
                view.inputs[CAPTURED] = _captured_names(program, sub_blocks)
            ops.append(view)
    return ProgramView(ir="legacy", ops=ops, vars=variables, source=source, native=program)


def _sub_blocks(program, op) -> list:
    indices = []
    for attr in ("sub_block", "sub_blocks"):
        if op.has_attr(attr):
            value = op.attr(attr)
            for block in value if isinstance(value, (list, tuple)) else [value]:
                indices.append(block.idx if hasattr(block, "idx") else int(block))
    return [program.block(i) for i in indices]


def _captured_names(program, blocks) -> list[str]:
    """Variables of enclosing blocks that the ops of ``blocks`` (and their own sub-blocks) read."""
    defined, reads = set(), []

    def walk(block):
        for op in block.ops:
            reads.extend(n for slot in op.input_names for n in op.input(slot) if n not in defined)
            defined.update(n for slot in op.output_names for n in op.output(slot))
            for sub in _sub_blocks(program, op):
                walk(sub)

    for block in blocks:
        walk(block)
    return list(dict.fromkeys(reads))


def load_program_file(path: str):
    """Reads a serialized ProgramDesc; any failure is one line naming the file."""
    import paddle

    data = read_program_bytes(path)
    # Parse with protobuf first: it fails cleanly on garbage, where Paddle's
    # parser can abort the process.
    from paddle.base.proto import framework_pb2

    desc = framework_pb2.ProgramDesc()
    try:
        desc.ParseFromString(data)
    except Exception as e:  # protobuf raises DecodeError and, on some input, other errors
        raise ProgramFileError(f"{path}: not a valid ProgramDesc (truncated or corrupt): {type(e).__name__}") from None
    if not desc.blocks:
        raise ProgramFileError(f"{path}: ProgramDesc has no blocks (truncated or not a program)")
    # Paddle builds the Operators of a parsed program only in static mode; restore the caller's mode.
    was_dynamic = paddle.in_dynamic_mode()
    paddle.enable_static()
    try:
        program = paddle.base.framework.Program.parse_from_string(data)
    except Exception as e:
        raise paddle_load_error(path, "ProgramDesc", e) from None
    finally:
        if was_dynamic:
            paddle.disable_static()
    return program


def decode_file(path: str) -> ProgramView:
    return decode_program(load_program_file(path), source=os.path.abspath(path))
