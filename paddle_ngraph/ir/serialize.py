"""Versioned JSON serialization of functions, and a readable text form.

The reader rebuilds every node through its constructor, so a document that
describes an ill-typed graph is rejected with the validation error of the node;
recorded output types must equal the re-inferred ones.
"""
from __future__ import annotations

import base64
import json

import numpy as np

from ..errors import SerializationError, ValidationError
from .function import Function
from .node import Node, op_class
from .ops import Constant, Parameter
from .roles import ResultName, Role, result_role, result_variable

FORMAT = "paddle_ngraph.function"
VERSION = 1


def _encode_attr(value):
    if isinstance(value, np.ndarray):
        return {"__ndarray__": base64.b64encode(np.ascontiguousarray(value).tobytes()).decode("ascii"),
                "dtype": value.dtype.name, "shape": list(value.shape)}
    if isinstance(value, (list, tuple)):
        return [_encode_attr(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return value


def _decode_attr(value):
    if isinstance(value, dict) and "__ndarray__" in value:
        raw = base64.b64decode(value["__ndarray__"])
        return np.frombuffer(raw, dtype=np.dtype(value["dtype"])).reshape(value["shape"]).copy()
    if isinstance(value, list):
        return [_decode_attr(v) for v in value]
    return value


def to_dict(function: Function) -> dict:
    nodes = []
    for node in function.ordered_nodes():
        nodes.append({
            "name": node.name,
            "op": node.op_type,
            "inputs": [[i.node.name, i.index] for i in node.inputs],
            "attrs": {k: _encode_attr(v) for k, v in sorted(node.attrs.items())},
            "outputs": [{"dtype": t.dtype.value, "shape": list(t.shape)} for t in node.output_types],
        })
        if node.role is not None and "role" not in node.attrs:  # a Parameter's is among its attributes
            nodes[-1]["role"] = node.role.value
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": function.name,
        "parameters": [p.name for p in function.parameters],
        "results": [_encode_result(k, o) for k, o in function.results.items()],
        "nodes": nodes,
    }


def _encode_result(name: str, output) -> dict:
    entry = {"name": str(name), "node": output.node.name, "index": output.index}
    if result_role(name) is not Role.OUTPUT:
        entry.update(role=result_role(name).value, variable=result_variable(name))
    return entry


def _result_name(entry: dict) -> str:
    if "role" not in entry:
        return entry["name"]
    return ResultName(entry["name"], Role(entry["role"]), entry.get("variable"))


def to_json(function: Function, indent: int | None = 1) -> str:
    return json.dumps(to_dict(function), indent=indent, sort_keys=False)


def from_dict(doc: dict) -> Function:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SerializationError(f"not a {FORMAT} document (format field is {doc.get('format') if isinstance(doc, dict) else None!r})")
    if doc.get("version") != VERSION:
        raise SerializationError(f"unsupported {FORMAT} version {doc.get('version')!r}; this reader knows version {VERSION}")
    try:
        built: dict[str, Node] = {}
        for entry in doc["nodes"]:
            name, op = entry["name"], entry["op"]
            if name in built:
                raise SerializationError(f"node '{name}' appears twice")
            attrs = {k: _decode_attr(v) for k, v in entry["attrs"].items()}
            inputs = []
            for src, index in entry["inputs"]:
                if src not in built:
                    raise SerializationError(f"node '{name}' uses '{src}', which is not defined before it")
                inputs.append(built[src].output(int(index)))
            cls = op_class(op)
            if cls is Constant:
                node = Constant(attrs["value"], dtype=attrs.get("dtype"), name=name)
            else:
                node = cls(*inputs, name=name, **attrs)
            recorded = [(o["dtype"], [int(d) for d in o["shape"]]) for o in entry["outputs"]]
            inferred = [(t.dtype.value, list(t.shape)) for t in node.output_types]
            if recorded != inferred:
                raise SerializationError(f"node '{name}' ({op}): recorded output types {recorded} differ from inferred {inferred}")
            if "role" in entry:
                node.role = Role(entry["role"])
            built[name] = node
        params = []
        for pname in doc["parameters"]:
            node = built.get(pname)
            if not isinstance(node, Parameter):
                raise SerializationError(f"parameter '{pname}' is not a Parameter node")
            params.append(node)
        results = {}
        for r in doc["results"]:
            if r["node"] not in built:
                raise SerializationError(f"result '{r['name']}' refers to unknown node '{r['node']}'")
            results[_result_name(r)] = built[r["node"]].output(int(r["index"]))
        return Function(params, results, name=doc.get("name", "function"))
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as e:  # int(inf)
        raise SerializationError(f"malformed {FORMAT} document: {type(e).__name__}: {e}") from None
    except ValidationError as e:
        raise SerializationError(f"invalid graph in document: {e}") from None


def from_json(text: str) -> Function:
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError) as e:
        raise SerializationError(f"not valid JSON: {e}") from None
    return from_dict(doc)


def save(function: Function, path: str):
    with open(path, "w") as f:
        f.write(to_json(function))


def load(path: str) -> Function:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SerializationError(f"{path}: cannot read: {e.strerror}") from None
    try:
        return from_json(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise SerializationError(f"{path}: not UTF-8 text") from None
    except SerializationError as e:
        raise SerializationError(f"{path}: {e}") from None


def _format_attr(value) -> str:
    if isinstance(value, np.ndarray):
        if value.size <= 4:
            return np.array2string(value.reshape(-1), separator=",")
        return f"<{value.dtype.name}[{'x'.join(map(str, value.shape))}]>"
    return repr(value)


def to_text(function: Function) -> str:
    """One line per node: ``name = Op(inputs) {attrs} -> types``."""
    lines = [f"function {function.name}("
             + ", ".join(f"{p.name}: {p.output_types[0]}" for p in function.parameters) + ")"]
    for node in function.ordered_nodes():
        if isinstance(node, Parameter):
            continue
        args = ", ".join(f"{i.node.name}:{i.index}" if len(i.node.output_types) > 1 else i.node.name
                         for i in node.inputs)
        attrs = ", ".join(f"{k}={_format_attr(v)}" for k, v in node.attrs.items()
                          if not (k == "bucket" and not v) and not (k == "compress" and v == "none")
                          and not (k == "compute_precision" and v == "default"))
        types = ", ".join(str(t) for t in node.output_types)
        lines.append(f"  {node.name} = {node.op_type}({args})" + (f" {{{attrs}}}" if attrs else "") + f" -> {types}")
    for name, out in function.results.items():
        lines.append(f"  return {name} = {out.node.name}:{out.index} {out.type}")
    return "\n".join(lines)
