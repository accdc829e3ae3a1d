"""Transports (null, MPI, oneCCL), launcher detection, and the start-up sync of ranks."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..errors import ConfigError, TransportError
from .bootstrap import make_transport
from .launcher import LaunchInfo, detect_launcher
from .registry import load_transports
from .transport import DTYPES, NullTransport, Transport

load_transports()  # so that every transport is registered, and "auto" knows each launcher's

__all__ = ["Transport", "NullTransport", "DTYPES", "detect_launcher", "make_transport", "resolve_transport",
           "initial_sync", "function_fingerprint", "LaunchInfo", "ReplicaGroups"]


def resolve_transport(transport=None, nranks: int | None = None, name: str = "auto",
                      timeout_s: float | None = None) -> Transport:
    """``transport`` if given (an object, or a name), else the one ``name`` means here."""
    if transport is None or isinstance(transport, str):
        transport = make_transport(transport or name, timeout_s)
    if nranks is not None and nranks != transport.size:
        raise ConfigError(f"nranks={nranks}, but the {transport.name} transport has {transport.size} rank(s)")
    return transport


@dataclass(frozen=True)
class ReplicaGroups:
    """Under model parallelism (ir/groups.py), among which ranks each value of an engine is the
    same: every parameter and state among the data-parallel group (the ranks holding the same
    shard), the parameters that are not sharded (not in ``sharded``) also among the model-parallel
    group. Groups as collectives name them: ``()`` every rank."""

    dp_group: tuple
    mp_group: tuple
    sharded: frozenset


def function_fingerprint(function) -> list[str]:
    """One line per node (op, input types, attrs, output types); equal on ranks that will agree.
    A collective's group is written as its size: ranks of different groups run the same program."""
    import numpy as np

    from ..ir.serialize import _format_attr

    def shown(key, value):
        if key == "group":
            return f"<{len(value)} ranks>" if value else "<all ranks>"
        if key == "value" and isinstance(value, np.ndarray) and value.size > 4:
            # Compared by content, shown short: a constant that differs (the seed gradient of a
            # loss scaled differently on one rank) changes what the ranks average as much as an op does.
            digest = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()[:12]
            return f"{_format_attr(value)[:-1]} sha256 {digest}>"
        return _format_attr(value)

    lines = []
    for node in function.ordered_nodes():
        attrs = ",".join(f"{k}={shown(k, v)}" for k, v in sorted(node.attrs.items()))
        ins = ",".join(str(i.type) for i in node.inputs)
        outs = ",".join(str(t) for t in node.output_types)
        lines.append(f"{node.op_type}({ins}){{{attrs}}}->{outs}")
    return lines


def check_consistency(function, transport: Transport, settings: dict | None = None):
    """Fails on every rank, naming the ranks and the first differing op, if transpiled functions differ.

    ``function`` may be a list (gradient accumulation runs two); ``settings`` are compared too
    (values the fingerprint leaves out, like the constants' values)."""
    functions = function if isinstance(function, (list, tuple)) else [function]
    lines = [f"{k}={v}" for k, v in sorted((settings or {}).items())]
    for f in functions:
        lines += ([f"function {f.name}:"] if len(functions) > 1 else []) + function_fingerprint(f)
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    digests = transport.allgather_object(digest)
    if len(set(digests)) == 1:
        return
    everything = transport.allgather_object(lines)
    reference = everything[0]
    differing = [r for r, d in enumerate(digests) if d != digests[0]]
    first = differing[0]
    other = everything[first]
    index = next((i for i, (a, b) in enumerate(zip(reference, other)) if a != b), min(len(reference), len(other)))
    a = reference[index] if index < len(reference) else "<end of function>"
    b = other[index] if index < len(other) else "<end of function>"
    raise TransportError(
        f"rank {transport.rank}: the transpiled programs differ between ranks: rank(s) {differing} differ from "
        f"rank 0; first difference at op {index}: rank 0 has {a}, rank {first} has {b}")


def initial_sync(engine, arrays):
    """Before the first step: check that all ranks run the same function, then copy rank 0's
    parameters and optimizer state to every rank, so they start identical whatever their seeds.
    Under model parallelism (``engine.replicas``) only among the ranks that hold the same values:
    a shard is never overwritten by another rank's."""
    replicas: ReplicaGroups | None = getattr(engine, "replicas", None)
    if replicas is not None:
        _replicas_sync(engine, arrays, replicas)
    else:
        check_consistency(engine.functions, engine.transport, engine.settings)
        for param, array in zip(engine.function.parameters, arrays):
            if param.attrs["role"] in ("parameter", "state"):
                engine.transport.broadcast(array, root=0)
    if engine.scope_sync:
        broadcast_scope_variables(engine.scope_sync, engine.transport, force=True)


def _replicas_sync(engine, arrays, replicas: ReplicaGroups):
    """``initial_sync`` under model parallelism: the ranks of a data-parallel group run the same
    program (those of a model-parallel group do not: their shards' offsets differ) and start from
    its first rank's values; the parameters that are not sharded start from the model-parallel
    group's first rank's, as Paddle's TensorParallelOptimizer broadcasts them over its ring."""
    transport = engine.transport
    transport.make_groups([replicas.dp_group, replicas.mp_group])
    dp = transport.group(replicas.dp_group) if len(replicas.dp_group) != 1 else None
    mp = transport.group(replicas.mp_group) if len(replicas.mp_group) != 1 else None
    if dp is not None:
        check_consistency(engine.functions, dp, engine.settings)
    for param, array in zip(engine.function.parameters, arrays):
        role = param.attrs["role"]
        if dp is not None and role in ("parameter", "state"):
            dp.broadcast(array, root=0)
        if mp is not None and role == "parameter" and param.name not in replicas.sharded:
            mp.broadcast(array, root=0)
    if engine.scope_sync:
        broadcast_scope_variables(engine.scope_sync, transport, force=True)


def broadcast_scope_variables(names, transport, force: bool = False) -> bool:
    """Parameters and state that only the ops left to Paddle read (fallback): no engine holds
    their buffers, so they are read from the current scope (the scope_guard's while exe.run
    runs), broadcast from rank 0 and written back. Without ``force``, does nothing and returns
    False unless every one is initialized on every rank (the startup program has run)."""
    import numpy as np
    import paddle

    scope = paddle.static.global_scope()
    tensors = [scope.find_var(n) for n in names]
    tensors = [v.get_tensor() if v is not None else None for v in tensors]
    ready = all(t is not None and t._is_initialized() for t in tensors)
    if not force:
        flags = transport.allreduce(np.array([1 if ready else 0], dtype=np.int32), "min", name="scope_sync_ready")
        if not flags[0]:
            return False
    for tensor in tensors:
        if tensor is None or not tensor._is_initialized():
            continue
        value = np.array(tensor)
        transport.broadcast(value, root=0)
        tensor.set(value, paddle.CPUPlace())
    return True
