"""Decoder for PIR programs (Paddle 3's default, and saved ``.json`` programs).

PIR values have no names; we name them after what defines them: ``pd_op.data``
by its ``name``, ``builtin.parameter`` by its ``parameter_name``, other results
``%<op index>.<output slot>``. Outputs of in-place ops (``adam_``'s
``param_out``, ``increment_``'s ``out``) take the name of the input they update (``param``,
``x``), as Paddle's in-place map of the op says.
"""
from __future__ import annotations

import json
import os

from ..errors import ProgramFileError
from ..ir.types import DType
from .program_view import (BACKWARD, CAPTURED, DENSE, FORWARD, OPTIMIZE, OpView, ProgramView, VarInfo, normalize,
                           paddle_load_error, read_program_bytes)

_BOOKKEEPING_ATTRS = {"op_callstack", "stop_gradient", "struct_name", "place", "persistable",
                      "op_role", "chunk_id", "op_namescope"}


def _dtype(value) -> DType | None:
    try:
        return DType.parse(str(value.dtype).replace("paddle.", ""))
    except (ValueError, TypeError, AttributeError, RuntimeError):
        return None


def _is_inplace(op_name: str) -> bool:
    return op_name.endswith("_") and not op_name.endswith("__")


def _is_optimizer(op) -> bool:
    """In-place ops that update a parameter from its gradient (sgd_, adam_, ...), not batch_norm_."""
    inputs = _slot_names(op)[0]
    return _is_inplace(op.name()) and "param" in inputs and "grad" in inputs


def _roles(ops) -> list[str]:
    """Forward ops precede the backward region, which starts at the loss-gradient seed.

    PIR ops carry no op_role. Paddle's append_backward appends the seed
    ``full_like(loss, full(1.0))`` after every forward op, then the backward ops: ``*_grad``
    ops, but also plain ops (the gradient of ``scale`` is a ``scale``). So the backward region
    starts at the seed; without a recognizable seed (gradients asked for other targets), at
    the first ``*_grad`` op or the ``full``/``full_like`` ops feeding only backward ops just
    before it.
    """
    n = len(ops)
    first_grad = next((i for i, op in enumerate(ops) if op.name().endswith("_grad")), None)
    start = None
    if first_grad is not None:
        start = _seed_position(ops, first_grad)
    if start is None and first_grad is not None:
        # Walk back over the seed: full_like/full ops whose results feed only backward ops.
        start = first_grad
        i = first_grad - 1
        while i >= 0 and ops[i].name() in ("pd_op.full_like", "pd_op.full"):
            users = [u for r in ops[i].results() if r.initialized() for u in r.all_used_ops()]
            if users and all(u.name().endswith("_grad") or u.name() in ("pd_op.full_like",) for u in users):
                start = i
                i -= 1
            else:
                break
    roles = []
    for i, op in enumerate(ops):
        if _is_optimizer(op):
            roles.append(OPTIMIZE)
        elif start is not None and i >= start:
            roles.append(BACKWARD)
        else:
            roles.append(FORWARD)
    assert len(roles) == n
    return roles


def _seed_position(ops, first_grad: int) -> int | None:
    """Index of the seed ``full_like(loss, 1.0)`` (or of the ``full(1.0)`` made for it just
    before): the last ``full_like`` before the first ``*_grad`` op, filled with 1."""
    for i in range(first_grad - 1, -1, -1):
        if ops[i].name() != "pd_op.full_like":
            continue
        operands = ops[i].operands_source()
        fill = operands[1].get_defining_op() if len(operands) > 1 and operands[1].initialized() else None
        if fill is None or fill.name() != "pd_op.full" or float(fill.attrs().get("value", 0)) != 1.0:
            return None
        j = i - 1
        if j >= 0 and ops[j].id() == fill.id():
            users = [u for r in fill.results() if r.initialized() for u in r.all_used_ops()]
            if all(u.id() == ops[i].id() for u in users):
                return j
        return i
    return None


def decode_program(program, source: str = "<pir program>") -> ProgramView:
    names: dict[str, str] = {}
    values: dict[str, object] = {}
    variables: dict[str, VarInfo] = {}
    ops_out = []
    block_ops = list(program.global_block().ops)
    roles = _roles(block_ops)

    def value_name(value) -> str | None:
        if value is None or not value.initialized():
            return None
        return names.get(value.id)

    for index, op in enumerate(block_ops):
        op_name = op.name()
        view = OpView(type=op_name, block=0, index=index, role=roles[index], native=op)
        in_slots, out_slots = _slot_names(op)
        operands = op.operands_source()
        if len(in_slots) != len(operands):
            in_slots = [f"input{i}" for i in range(len(operands))]
        for slot, value in zip(in_slots, operands):
            key = normalize(slot)
            view.slot_names[key] = slot
            view.inputs[key] = _names_of(value, value_name, names)
        results = op.results()
        inplace = _inplace_map(op) if _is_inplace(op_name) else None
        if len(out_slots) != len(results):
            out_slots = [f"out{i}" if i else "out" for i in range(len(results))]
        for result, (slot, value) in enumerate(zip(out_slots, results)):
            key = normalize(slot)
            view.slot_names[key] = slot
            if not value.initialized():
                view.outputs[key] = [None]
                continue
            name = _result_name(op, op_name, index, slot, key, view, result, inplace, value_name)
            names[value.id] = name
            values.setdefault(name, value)
            view.outputs[key] = [name]
            if name not in variables:
                variables[name] = _var_info(op, op_name, name, value, result)
        for attr, value in op.attrs().items():
            if attr not in _BOOKKEEPING_ATTRS:
                view.attrs[normalize(attr)] = value
        if op.num_regions():
            view.control_flow = True
            reads, writes = _captured_values(op)
            view.inputs[CAPTURED] = [n for n in dict.fromkeys(map(value_name, reads)) if n]
            view.outputs[CAPTURED] = [n for n in dict.fromkeys(map(value_name, writes)) if n]
            view.nested_updates = [(value_name(p), value_name(g)) for p, g in _nested_updates(op)
                                   if value_name(p) and value_name(g)]
        ops_out.append(view)
    return ProgramView(ir="pir", ops=ops_out, vars=variables, source=source, native=program, value_names=names, values=values)


def _captured_values(op) -> tuple[list, list]:
    """Values defined outside ``op`` that the ops of its regions (and their nested regions) read
    (PIR regions capture outer values implicitly, without listing them as operands of ``op``),
    and those of them that in-place ops there update: ``(reads, writes)``."""
    inner, reads, writes = set(), [], []

    def walk(block):
        args, kwargs = block.args, block.kwargs
        args, kwargs = args() if callable(args) else args, kwargs() if callable(kwargs) else kwargs
        for arg in list(args) + list(kwargs.values()):
            inner.add(arg.id)
        for inner_op in block.ops:
            for result in inner_op.results():
                inner.add(result.id)
            operands = [v for v in inner_op.operands_source() if v is not None and v.initialized()]
            reads.extend(operands)
            writes.extend(updated_in_place(inner_op))
            for sub in inner_op.blocks():
                walk(sub)

    for block in op.blocks():
        walk(block)
    return [v for v in reads if v.id not in inner], [v for v in writes if v.id not in inner]


def _nested_updates(op) -> list:
    """(parameter, gradient) values of the optimizer updates in ``op``'s regions, nested ones too
    (the caller keeps those whose gradient is an outer value)."""
    updates = []

    def walk(block):
        for inner_op in block.ops:
            if _is_optimizer(inner_op):
                inputs, operands = _slot_names(inner_op)[0], inner_op.operands_source()
                slots = dict(zip(inputs, operands))
                updates.append((slots["param"], slots["grad"]))
            for sub in inner_op.blocks():
                walk(sub)

    for block in op.blocks():
        walk(block)
    return updates


def _inplace_map(op) -> dict | None:
    """Paddle's own in-place map of an op, result index -> operand index (its yaml's ``inplace``:
    ``sgd_``'s ``param -> param_out``, ``increment_``'s ``x -> out``, ``assign_out_``'s ``output ->
    out``); None where Paddle has none to give (ops without yaml information)."""
    try:
        from paddle.base.libpaddle import pir

        return {int(k): int(v) for k, v in pir.get_op_inplace_info(op).items()}
    except Exception:  # noqa: BLE001 - builtin ops, or a Paddle without the binding
        return None


def updated_in_place(op) -> list:
    """The operands an in-place op (``assign_out_``, ``sgd_``, ``increment_``) updates: those
    Paddle's in-place map names; without one, those whose slot has an ``<slot>_out`` result, and
    ``assign_out_``'s ``output`` (Paddle's ``inplace (output -> out)``)."""
    if not _is_inplace(op.name()):
        return []
    inplace = _inplace_map(op)
    if inplace:
        operands = op.operands_source()
        return [operands[i] for i in sorted(set(inplace.values()))
                if i < len(operands) and operands[i] is not None and operands[i].initialized()]
    in_slots, out_slots = _slot_names(op)
    operands = op.operands_source()
    if len(in_slots) != len(operands):
        return []
    outs = {normalize(slot) for slot in out_slots}
    written = {slot for slot in in_slots if normalize(slot) + "out" in outs}
    if "output" in in_slots and "out" in outs:
        written.add("output")
    return [v for slot, v in zip(in_slots, operands) if slot in written and v is not None and v.initialized()]


def _slot_names(op) -> tuple[list, list]:
    # Builtin ops (parameter, combine, shadow_output) have no yaml info and no slot names.
    try:
        return list(op.get_input_names()), list(op.get_output_names())
    except (ValueError, RuntimeError):
        return [], []


def _names_of(value, value_name, names) -> list:
    """A ``builtin.combine`` result stands for the list of its operands."""
    if value is None or not value.initialized():
        return [None]
    op = value.get_defining_op()
    if op is not None and op.name() == "builtin.combine":
        return [value_name(v) for v in op.operands_source()]
    return [value_name(value)]


def _result_name(op, op_name, index, slot, key, view, result: int, inplace: dict | None, value_name) -> str:
    attrs = op.attrs()
    if op_name == "pd_op.data":
        return str(attrs["name"])
    if op_name == "builtin.parameter":
        return str(attrs["parameter_name"])
    if inplace and result in inplace:  # the operand Paddle's in-place map says this result is
        operands = op.operands_source()
        aliased = value_name(operands[inplace[result]]) if inplace[result] < len(operands) else None
        if aliased:
            return aliased
    if _is_inplace(op_name) and key.endswith("out") and key[:-3] in view.inputs:
        aliased = view.inputs[key[:-3]]
        if aliased and aliased[0]:
            return aliased[0]
    return f"%{index}.{slot}"


def _kind(value) -> str:
    """DENSE for a dense tensor; else what the value holds (``tensor_array``, ``selected_rows``,
    ``sparse_coo``, ``sparse_csr``, or the type's own name), which the engine does not hold."""
    try:
        text = str(value.type())
    except (AttributeError, RuntimeError, TypeError):
        text = ""
    if text.startswith("vec["):  # a list of values (split's results, combine's): dense if each is
        items = [t.strip() for t in text[4:-1].split(",") if t.strip()]
        return DENSE if all(t.startswith("tensor<") for t in items) else "vector"
    for test, kind in (("is_dense_tensor_type", DENSE), ("is_dist_dense_tensor_type", DENSE),
                       ("is_dense_tensor_array_type", "tensor_array"),
                       ("is_selected_row_type", "selected_rows"), ("is_sparse_coo_tensor_type", "sparse_coo"),
                       ("is_sparse_csr_tensor_type", "sparse_csr")):
        try:
            if getattr(value, test)():
                return kind
        except (AttributeError, RuntimeError, TypeError):
            continue
    return text.split("<")[0].strip() or "unknown"


def _var_info(op, op_name, name, value, result: int = 0) -> VarInfo:
    attrs = op.attrs()
    kind = _kind(value)
    try:
        shape = tuple(int(d) for d in value.shape) if kind == DENSE else ()
    except (ValueError, TypeError, RuntimeError, AttributeError):
        shape = ()
    is_param = op_name == "builtin.parameter"

    def flag(key, default=False):
        """Attributes such as ``persistable`` hold one entry per result of the op."""
        v = attrs.get(key, default)
        if isinstance(v, list):
            return bool(v[result] if result < len(v) else v[0]) if v else default
        return bool(v)

    return VarInfo(
        name=name, dtype=_dtype(value) if kind == DENSE else None, shape=shape, kind=kind,
        persistable=bool(getattr(value, "persistable", False)) or is_param or flag("persistable"),
        is_parameter=is_param, trainable=flag("trainable", True) if is_param else False,
        is_data=op_name == "pd_op.data" and not flag("persistable"),
        is_distributed=flag("is_distributed"),
    )


def load_program_file(path: str):
    """Reads a PIR program saved as JSON; any failure is one line naming the file."""
    import paddle

    data = read_program_bytes(path)
    # Validate before handing the file to Paddle, whose reader aborts on some bad input.
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProgramFileError(f"{path}: not a PIR program (invalid JSON: {e.__class__.__name__}; truncated?)") from None
    if not isinstance(doc, dict) or "program" not in doc and "base_code" not in doc:
        raise ProgramFileError(f"{path}: JSON document is not a serialized PIR program (no 'program' or 'base_code' key)")
    program = paddle.static.Program()
    try:
        paddle.base.core.deserialize_pir_program(path, program, -1)
    except Exception as e:
        raise paddle_load_error(path, "PIR program", e) from None
    return program


def decode_file(path: str) -> ProgramView:
    return decode_program(load_program_file(path), source=os.path.abspath(path))
