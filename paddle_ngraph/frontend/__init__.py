"""The Paddle frontend: decoders for both IRs, the converter registry, the conversion session."""
from __future__ import annotations

import os

from ..errors import ProgramFileError
from . import legacy_decoder, pir_decoder
from .converters import OP_TABLE, SKIPPED_OPS
from .program_view import BACKWARD, FORWARD, OPTIMIZE, OpView, ProgramView, VarInfo
from .session import ConversionSession, find_unsupported

__all__ = ["decode", "OP_TABLE", "SKIPPED_OPS", "ProgramView", "OpView", "VarInfo", "ConversionSession",
           "find_unsupported", "forward_sinks", "loss_name"]


def _is_pir_program(program) -> bool:
    import paddle

    return isinstance(program, paddle.pir.Program)


def decode(program) -> ProgramView:
    """A ``ProgramView`` of a legacy Program, a PIR Program, or a saved program file."""
    if isinstance(program, ProgramView):
        return program
    if isinstance(program, (str, os.PathLike)):
        path = os.fspath(program)
        if not os.path.exists(path):
            raise ProgramFileError(f"{path}: no such file")
        if path.endswith(".json"):
            return pir_decoder.decode_file(path)
        return legacy_decoder.decode_file(path)
    if _is_pir_program(program):
        return pir_decoder.decode_program(program)
    import paddle

    if isinstance(program, paddle.base.framework.Program):
        return legacy_decoder.decode_program(program)
    raise TypeError(f"expected a Paddle Program, a PIR Program or a path, got {type(program).__name__}")


def forward_sinks(view: ProgramView) -> list[OpView]:
    """Forward ops none of whose outputs another forward op reads: the loss, metrics, predictions."""
    forward = [op for op in view.ops if op.role == FORWARD and op.type not in SKIPPED_OPS]
    read_by_forward = {n for op in forward for n in op.input_names()}
    return [op for op in forward if op.output_names() and not any(n in read_by_forward for n in op.output_names())]


def loss_name(view: ProgramView) -> str | None:
    """The loss the backward pass starts from (what ``minimize(loss)`` was given), found from the
    gradient seed: a legacy program's first backward op, ``fill_constant``, writes ``<loss>@GRAD``;
    a PIR program's ``full_like(loss, full(1.0))`` reads the loss. None without such a seed."""
    backward = [op for op in view.ops if op.block == 0 and op.role == BACKWARD][:2]
    for op in backward:
        if op.type == "fill_constant":
            out = op.output_names()
            if len(out) == 1 and out[0].endswith("@GRAD"):
                return out[0][:-len("@GRAD")]
        elif op.type == "pd_op.full_like" and op.inputs.get("x"):
            return op.inputs["x"][0]
    return None
