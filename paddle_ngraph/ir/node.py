"""Nodes of the graph IR.

Like nGraph's ``Node``, every op validates its inputs and infers the types of
its outputs in its constructor (``infer``), so a graph that is not well typed
cannot be built. Errors start with the node: "While validating node ...".
"""
from __future__ import annotations

import itertools

from ..errors import ValidationError
from .roles import Role
from .types import DType, TensorType

_OP_TYPES: dict[str, type["Node"]] = {}
_ids = itertools.count()


def register_op(cls):
    """Class decorator: make an op type known by its name (for the reader and the table)."""
    if cls.op_type in _OP_TYPES:
        raise ValidationError(f"op type '{cls.op_type}' registered twice: by {_OP_TYPES[cls.op_type].__qualname__} "
                              f"and {cls.__qualname__}")
    _OP_TYPES[cls.op_type] = cls
    return cls


def op_class(op_type: str) -> type["Node"]:
    try:
        return _OP_TYPES[op_type]
    except KeyError:
        raise ValidationError(f"unknown IR op type '{op_type}'") from None


def op_types() -> dict[str, type["Node"]]:
    return dict(_OP_TYPES)


def as_tensor_types(types) -> list[TensorType]:
    """What ``infer`` returns (TensorTypes or (dtype, shape) pairs) as TensorTypes."""
    return [t if isinstance(t, TensorType) else TensorType(*t) for t in types]


class Output:
    """One output of a node: the value edges of the graph point at these."""

    __slots__ = ("node", "index")

    def __init__(self, node: "Node", index: int):
        self.node = node
        self.index = index

    @property
    def type(self) -> TensorType:
        return self.node.output_types[self.index]

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def shape(self) -> tuple:
        return self.type.shape

    def __repr__(self):
        return f"{self.node.name}:{self.index}<{self.type}>"


class Node:
    """Base class of IR ops. Subclasses set ``op_type``, ``attributes`` and ``infer``."""

    op_type = "Node"
    #: Attribute names and defaults; only these are accepted.
    attributes: dict = {}
    #: Number of inputs, or None for variadic ops.
    num_inputs: int | None = None

    def __init__(self, *inputs: Output, name: str | None = None, **attrs):
        self.id = next(_ids)
        self.name = name or f"{self.op_type}_{self.id}"
        self._role: Role | None = None
        self.inputs = list(inputs)
        unknown = set(attrs) - set(self.attributes)
        if unknown:
            self._fail(f"unknown attribute(s) {sorted(unknown)}; valid: {sorted(self.attributes)}")
        self.attrs = {k: attrs.get(k, default) for k, default in self.attributes.items()}
        for i, value in enumerate(self.inputs):
            if not isinstance(value, Output):
                self._fail(f"input {i} is {type(value).__name__}, not a node output")
        if self.num_inputs is not None and len(self.inputs) != self.num_inputs:
            self._fail(f"expects {self.num_inputs} inputs, got {len(self.inputs)}")
        try:
            types = self.infer()
        except ValidationError:
            raise
        except (ValueError, TypeError, IndexError, KeyError) as e:
            self._fail(str(e))
        self.output_types = as_tensor_types(types)

    # --- to be provided by each op -------------------------------------------------
    def infer(self) -> list[TensorType]:
        raise NotImplementedError

    # --- what the node is to the passes ------------------------------------------------
    @property
    def role(self) -> Role | None:
        """A Parameter's ``role`` attribute; for other nodes, what the pass that made the node
        said (``Role.RECOMPUTE_COPY``), else None. Copies of a node keep it (clone_function)."""
        if "role" in self.attributes:
            return Role(self.attrs["role"])
        return self._role

    @role.setter
    def role(self, value: Role | str | None):
        value = None if value is None else Role(value)
        if "role" in self.attributes:
            self.attrs["role"] = value
        else:
            self._role = value

    # --- helpers ---------------------------------------------------------------------
    def _fail(self, message: str):
        raise ValidationError(f"While validating node '{self.name}' ({self.op_type}): {message}")

    def check(self, condition: bool, message: str):
        if not condition:
            self._fail(message)

    def input_type(self, i: int) -> TensorType:
        return self.inputs[i].type

    def output(self, i: int = 0) -> Output:
        if not 0 <= i < len(self.output_types):
            raise IndexError(f"node {self.name} has {len(self.output_types)} outputs, not {i + 1}")
        return Output(self, i)

    @property
    def outputs(self) -> list[Output]:
        return [Output(self, i) for i in range(len(self.output_types))]

    def __repr__(self):
        return f"<{self.op_type} {self.name}>"
