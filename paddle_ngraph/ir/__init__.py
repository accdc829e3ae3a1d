"""The graph IR: typed ops that infer their own shapes, functions, serialization."""
from . import ops  # noqa: F401  (registers every op type)
from .function import Function, clone_function
from .node import Node, Output, op_class, op_types, register_op
from .roles import ResultName, Role
from .serialize import from_json, load, save, to_json, to_text
from .types import DType, TensorType

__all__ = ["Function", "clone_function", "Node", "Output", "DType", "TensorType", "ops", "op_class", "op_types",
           "register_op", "ResultName", "Role", "to_json", "from_json", "to_text", "save", "load"]
