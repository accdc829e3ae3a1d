"""Kernels of the shape ops (ir/ops/shape.py): Reshape, BroadcastTo, Transpose, Concat, Stack."""
from __future__ import annotations

import numpy as np

from .registry import kernel


@kernel("Reshape")
def _reshape(node, args, transport):
    return [np.reshape(args[0], node.attrs["shape"])]


@kernel("BroadcastTo")
def _broadcast_to(node, args, transport):
    return [np.ascontiguousarray(np.broadcast_to(args[0], args[1].shape))]


@kernel("Transpose")
def _transpose(node, args, transport):
    return [np.ascontiguousarray(np.transpose(args[0], node.attrs["perm"]))]


@kernel("Concat")
def _concat(node, args, transport):
    return [np.concatenate(args, axis=node.attrs["axis"])]


@kernel("Stack")
def _stack(node, args, transport):
    return [np.stack(args, axis=int(node.attrs["axis"]) % (args[0].ndim + 1))]
