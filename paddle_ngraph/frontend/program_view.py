"""One view of a Paddle program, whichever IR it came from.

Both decoders produce ``ProgramView``: ops with slot-keyed input and output
variable names and attributes, and variable metadata. Slot and attribute names
are normalized (lower case, no underscores, ``@GRAD`` -> ``grad``) so that one
converter reads legacy ``X@GRAD``/``Moment1Out`` and PIR ``x_grad``/``moment1_out``
alike. In-place outputs of PIR ops (``param_out`` of ``adam_``) are named after
the variable they update, exactly as legacy programs name them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ProgramFileError
from ..ir.types import DType

FORWARD, BACKWARD, OPTIMIZE = "forward", "backward", "optimize"
# The slot of a control-flow op (PIR ``pd_op.if``/``while``, legacy ``conditional_block``/``while``)
# listing, among its inputs, the outer values its sub-blocks read (PIR regions use outer values
# without operands, legacy sub-block ops read outer variables by name) and, among its outputs,
# the outer variables they write (legacy sub-block ops write outer variables by name). Nested
# sub-blocks count: the engine must hand the op what they read and read again what they wrote.
CAPTURED = "captured"
# What a variable holds. The engine holds dense tensors only; an op reading or writing any other
# kind (a tensor array, selected rows, the step scopes of a sub-block, a reader, strings, ...)
# stays with Paddle (transpiler/segments.py). Legacy names follow Paddle's ``VarDesc.VarType``.
DENSE = "dense"


def normalize(name: str) -> str:
    return name.lower().replace("@grad", "grad").replace("_", "")


@dataclass
class VarInfo:
    name: str
    dtype: DType | None
    shape: tuple
    persistable: bool = False
    is_parameter: bool = False
    trainable: bool = True
    is_data: bool = False
    is_distributed: bool = False
    kind: str = DENSE  # DENSE, or what else the variable holds (``tensor_array``, ``step_scopes``, ...)
    # The kind Paddle declares when the engine holds a dense form of it instead: ``selected_rows`` for
    # a sparse embedding's gradient on several ranks (transpiler/sparse_gradients.py); else None.
    declared_kind: str | None = None
    # Legacy IR: the LoD (sequence offsets) levels Paddle declares for a dense tensor. The engine's
    # outputs are plain tensors: a value with LoD must be made by Paddle, or the sequence ops
    # reading it would find no offsets (transpiler/segments.py).
    lod_level: int = 0


@dataclass
class OpView:
    type: str
    block: int
    index: int
    role: str
    inputs: dict = field(default_factory=dict)   # normalized slot -> list of var names (None: absent)
    outputs: dict = field(default_factory=dict)  # normalized slot -> list of var names (None: absent)
    attrs: dict = field(default_factory=dict)    # normalized name -> value
    slot_names: dict = field(default_factory=dict)  # normalized -> original spelling
    native: object = None                        # the decoder's own op object
    control_flow: bool = False                   # holds sub-blocks (regions) that Paddle runs
    # Optimizer updates inside its sub-blocks (nested ones too): (parameter, gradient) names of
    # the enclosing block, where the gradient is a variable of it (a data-parallel run averages it
    # before the op).
    nested_updates: list = field(default_factory=list)

    def input_names(self) -> list[str]:
        return [n for names in self.inputs.values() for n in names if n]

    def output_names(self) -> list[str]:
        return [n for names in self.outputs.values() for n in names if n]

    def location(self) -> str:
        return f"op '{self.type}' (block {self.block}, op {self.index}, outputs {', '.join(self.output_names()) or '-'})"


@dataclass
class ProgramView:
    ir: str                                   # "legacy" or "pir"
    ops: list                                 # OpView, in program order, block 0 first
    vars: dict                                # name -> VarInfo
    source: str = "<program>"
    native: object = None                     # the Paddle program, when decoded from one
    value_names: dict = field(default_factory=dict)  # PIR: Value.id -> our name
    values: dict = field(default_factory=dict)       # PIR: our name -> the Value first defining it

    def name_of(self, handle) -> str:
        """Our name for what a user holds: a legacy Variable, a PIR Value, or a name."""
        if isinstance(handle, str):
            return handle
        if self.ir == "pir":
            try:
                return self.value_names[handle.id]
            except (KeyError, AttributeError):
                raise KeyError(f"value {handle!r} is not defined in this program") from None
        return handle.name


def read_program_bytes(path: str) -> bytes:
    """The bytes of a saved program; a failure is one ProgramFileError line naming the file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ProgramFileError(f"{path}: cannot read: {e.strerror}") from None
    if not data:
        raise ProgramFileError(f"{path}: empty file, not a saved program")
    return data


def paddle_load_error(path: str, what: str, error: Exception) -> ProgramFileError:
    """Paddle's own loader failed: keep the first line of its message, name the file."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    return ProgramFileError(f"{path}: Paddle could not load this {what}: {first}")
