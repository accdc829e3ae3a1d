"""Converters, one small function per Paddle op, grouped by op family.

A converter takes a ``NodeContext``, builds IR nodes from its inputs, and sets its outputs. Each
registers itself with ``@converter(<legacy op>, <PIR op>, ...)`` (``registry.py``); importing
this package imports every family and so fills ``OP_TABLE``. The family modules carry the same
names as the IR op families (``ir/ops/``) and the kernels of both backends, so that an op's
converter, IR op and kernels are found under one name. ``arith`` and ``helpers`` are shared
pieces, not families.

Adding an op of family F: its converter in ``converters/F.py`` under ``@converter(<legacy op>,
<PIR op>)``; if it needs a new IR op, the op in ``ir/ops/F.py`` (its attributes' defaults live
there only), its reference kernel in ``backends/interpreter/kernels/F.py`` (``@kernel``) and its
native kernel in ``native/cpu/kernels/F.cc`` (``PDNG_REGISTER_KERNEL``, attributes read as
required); then ``python tools/gen_op_table.py`` regenerates docs/OPS.md.
"""
from __future__ import annotations

from .registry import OP_TABLE, SKIPPED_OPS, converter  # noqa: F401

# The import order is the order of OP_TABLE, hence of docs/OPS.md.
from . import elementwise, activation, matmul, conv, pool, norm, loss, reduction  # noqa: F401,E402
from . import shape, indexing, resample, tensor, optimizer, collective  # noqa: F401,E402

__all__ = ["OP_TABLE", "SKIPPED_OPS", "converter"]
