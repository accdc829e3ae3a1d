"""Kernels of the collectives (ir/ops/collective.py), served by the transport, or by its group
for a node with a ``group`` (``Transport.group``)."""
from __future__ import annotations

import numpy as np

from ....errors import ExecutionError
from .registry import kernel


def _require_transport(node, transport):
    if transport is None:
        if node.attrs.get("group") and len(node.attrs["group"]) == 1:
            return None  # a group of one rank: every collective is the identity
        raise ExecutionError(f"node '{node.name}' ({node.op_type}) needs a transport, and none was given")
    return _over_group(node, transport)


def _over_group(node, transport):
    """The transport of the node's group (the transport itself for every rank)."""
    if transport is None or not node.attrs.get("group"):
        return transport
    return transport.group(node.attrs["group"])


@kernel("AllReduce")
def _allreduce(node, args, transport):
    transport = _over_group(node, transport)
    if transport is None or transport.size == 1:
        return [np.array(a, copy=True) for a in args]
    name = node.attrs["bucket"] or node.name
    if node.attrs.get("compress", "none") != "none":
        return transport.allreduce_compressed(args, node.attrs["reduction"], node.attrs["compress"], name=name)
    return transport.allreduce_many(args, node.attrs["reduction"], name=name)


@kernel("Broadcast")
def _broadcast(node, args, transport):
    transport = _over_group(node, transport)
    if transport is None or transport.size == 1:
        return [np.array(a, copy=True) for a in args]
    return [transport.broadcast(np.array(a, copy=True), node.attrs["root"]) for a in args]


@kernel("AllGather")
def _allgather(node, args, transport):
    t = _require_transport(node, transport)
    axis = node.attrs["axis"]
    if t is None or t.size == 1:
        return [np.array(a, copy=True) for a in args]
    if axis == 0:
        return [t.allgather(a) for a in args]
    # The transports gather along axis 0: gather the tensors with ``axis`` first, then put it back.
    return [np.ascontiguousarray(np.moveaxis(t.allgather(np.moveaxis(a, axis, 0)), 0, axis)) for a in args]


@kernel("ReduceScatter")
def _reduce_scatter(node, args, transport):
    t = _require_transport(node, transport)
    if t is None or t.size == 1:
        return [np.array(a, copy=True) for a in args]
    return [t.reduce_scatter(a, node.attrs["reduction"]) for a in args]


@kernel("Send")
def _send(node, args, transport):
    _require_transport(node, transport).send(args[0], node.attrs["peer"], node.attrs["tag"])
    return [args[0]]


@kernel("Recv")
def _recv(node, args, transport):
    t = node.output_types[0]
    buf = np.empty(t.shape, dtype=t.dtype.numpy)
    _require_transport(node, transport).recv(buf, node.attrs["peer"], node.attrs["tag"])
    return [buf]
