"""Decoder for legacy ProgramDesc programs (``FLAGS_enable_pir_api=0``, ``.pdmodel`` files)."""
from __future__ import annotations

import dataclasses
import os

from ..errors import ProgramFileError
from ..ir.types import DType
from .program_view import (BACKWARD, CAPTURED, DENSE, FORWARD, OPTIMIZE, OpView, ProgramView, VarInfo, normalize,
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


def _kind(var) -> str:
    """What the variable holds: DENSE for a (LoD) dense tensor, else Paddle's name of its type in
    lower case (``step_scopes``, ``tensor_array`` (both names of it), ``selected_rows``, ``reader``, ``raw``,
    ``feed_minibatch``, ``fetch_list``, ``strings``, ``vocab``, ...)."""
    from paddle.base import core

    kind = var.desc.type()
    if kind in (core.VarDesc.VarType.DENSE_TENSOR, core.VarDesc.VarType.LOD_TENSOR):
        return DENSE
    if kind in (core.VarDesc.VarType.DENSE_TENSOR_ARRAY, core.VarDesc.VarType.LOD_TENSOR_ARRAY):
        return "tensor_array"  # as PIR names it
    return str(getattr(kind, "name", kind)).split(".")[-1].lower()


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
    """Any kind of variable; only a dense tensor has a shape and dtype here. Paddle refuses
    ``shape``/``dtype`` of the kinds without a tensor description (step scopes, readers, raw)
    with a RuntimeError, and the engine does not hold the others (tensor arrays, selected rows)."""
    import paddle

    kind = _kind(var)
    shape, dtype, lod_level = (), None, 0
    if kind == DENSE:
        try:
            lod_level = int(var.lod_level)
        except (ValueError, TypeError, AttributeError, RuntimeError):
            lod_level = 0
        try:
            shape = tuple(int(d) for d in var.shape)
        except (ValueError, TypeError, AttributeError):
            shape = ()
        dtype = _dtype(var)
    is_param = isinstance(var, paddle.base.framework.Parameter)
    return VarInfo(
        name=var.name, dtype=dtype, shape=shape,
        persistable=bool(var.persistable), is_parameter=is_param,
        trainable=bool(getattr(var, "trainable", True)) if is_param else False,
        is_data=bool(getattr(var, "is_data", False)),
        is_distributed=bool(getattr(var, "is_distributed", False)),
        kind=kind, lod_level=lod_level,
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
                view.control_flow = True
                view.inputs[CAPTURED], view.outputs[CAPTURED] = _captured_names(program, sub_blocks)
                view.nested_updates = _nested_updates(program, sub_blocks)
            ops.append(view)
    _rows_of_selected_rows_are_dynamic(ops, variables)
    _lod_reaching_sequence_readers(ops, variables)
    return ProgramView(ir="legacy", ops=ops, vars=variables, source=source, native=program)


# Legacy forward ops that read their inputs as sequences: the LoD (offsets) must reach them. Paddle's
# other sequence-reading ops take lengths instead (sequence_mask, sequence_unpad), or lengths when given
# (warpctc, edit_distance, chunk_eval: counted here, which at worst leaves an op more to Paddle).
_SEQUENCE_READERS = frozenset({"lstm", "gru", "row_conv", "linear_chain_crf", "crf_decoding", "chunk_eval",
                               "edit_distance", "warpctc"})
_NOT_SEQUENCE_READERS = frozenset({"sequence_mask", "sequence_unpad"})


def _reads_sequences(op) -> bool:
    return op.role == FORWARD and op.block == 0 and (
        op.type in _SEQUENCE_READERS or (op.type.startswith("sequence_") and op.type not in _NOT_SEQUENCE_READERS))


def _lod_reaching_sequence_readers(ops, variables: dict):
    """Marks as LoD tensors (level 1) the values that carry a feed's offsets to a sequence op where
    the program does not declare them: Paddle's own test models declare ``paddle.static.data("words",
    [-1], "int64")`` (lod_level 0) and feed it a LoD tensor, whose offsets Paddle's kernels pass on
    from the embedding to the sequence op. The engine's outputs carry none, so the ops making these
    values must stay with Paddle (``transpiler/segments.py`` ``structural_reason``), as for declared
    levels. Walked back from each sequence op's inputs through their forward producers, to the feeds."""
    producer = {}
    for op in ops:
        if op.role == FORWARD and op.block == 0:
            for name in op.output_names():
                producer.setdefault(name, op)
    stack = [name for op in ops if _reads_sequences(op) for name in op.input_names()]
    seen = set()
    while stack:
        name = stack.pop()
        info = variables.get(name)
        if name in seen or info is None or info.kind != DENSE or info.persistable or info.lod_level > 0:
            continue
        seen.add(name)
        variables[name] = dataclasses.replace(info, lod_level=1)
        source = producer.get(name)
        if source is not None and not _reads_sequences(source):
            stack.extend(source.input_names())


def _rows_of_selected_rows_are_dynamic(ops, variables: dict):
    """``get_tensor_from_selected_rows`` (a gradient clip reading a sparse embedding's gradient) is
    declared with the table's shape, but holds one row per id of the batch: its first dim is dynamic."""
    for op in ops:
        if op.type != "get_tensor_from_selected_rows":
            continue
        for name in op.output_names():
            info = variables.get(name)
            if info is not None and info.shape:
                variables[name] = dataclasses.replace(info, shape=(-1, *info.shape[1:]))


def _sub_blocks(program, op) -> list:
    indices = []
    for attr in ("sub_block", "sub_blocks"):
        if op.has_attr(attr):
            value = op.attr(attr)
            for block in value if isinstance(value, (list, tuple)) else [value]:
                # A Block, a BlockDesc (what Operator.attr gives) or an index.
                indices.append(block.idx if hasattr(block, "idx") else block.id if hasattr(block, "id") else int(block))
    return [program.block(i) for i in indices]


def _captured_names(program, blocks) -> tuple[list[str], list[str]]:
    """Variables of enclosing blocks that the ops of ``blocks`` (and of their own sub-blocks,
    recursively) read before writing them, and those they write: ``(reads, writes)``. A variable
    a sub-block declares itself is its own, neither. What they write counts as read too: a
    sub-block may not run (a false condition, a loop of no iteration), and what it leaves
    unwritten keeps the value from before (a ``ConditionalBlock`` assigning a default's variable)."""
    own: set[str] = set()
    defined, reads, writes = set(), [], []

    def walk(block):
        own.update(block.vars)
        for op in block.ops:
            reads.extend(n for slot in op.input_names for n in op.input(slot) if n not in defined)
            for slot in op.output_names:
                for name in op.output(slot):
                    defined.add(name)
                    writes.append(name)
            for sub in _sub_blocks(program, op):
                walk(sub)

    for block in blocks:
        walk(block)
    outer = lambda names: [n for n in dict.fromkeys(names) if n not in own]  # noqa: E731
    return outer(reads + writes), outer(writes)


def _nested_updates(program, blocks) -> list[tuple[str, str]]:
    """(parameter, gradient) of the optimizer updates (op_role Optimize, with Param and Grad) in
    ``blocks`` and their sub-blocks whose gradient is a variable of the enclosing blocks."""
    own: set[str] = set()
    updates = []

    def walk(block):
        own.update(block.vars)
        for op in block.ops:
            if _role(op) == OPTIMIZE and "Param" in op.input_names and "Grad" in op.input_names:
                params, grads = op.input("Param"), op.input("Grad")
                if params and grads:
                    updates.append((params[0], grads[0]))
            for sub in _sub_blocks(program, op):
                walk(sub)

    for block in blocks:
        walk(block)
    return [(p, g) for p, g in updates if g not in own]


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
