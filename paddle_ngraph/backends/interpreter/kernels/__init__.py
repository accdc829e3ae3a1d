"""Reference kernels: ``KERNELS[op_type](node, inputs, transport) -> list of outputs``.

These define what each IR op computes. They favour clarity over speed, but
keep Paddle's order of floating-point operations where it matters for
matching Paddle to 1e-5 (softmax cross-entropy, the optimizers). One module
per op family, named as the family of ``ir/ops/``, registers its kernels with
``@kernel``; ``precision`` and ``eigen_sum`` are shared pieces.
"""
from __future__ import annotations

from .registry import KERNELS, kernel  # noqa: F401
from . import tensor, shape, indexing, elementwise, activation, matmul, conv, pool, norm, loss  # noqa: F401,E402
from . import reduction, optimizer, collective  # noqa: F401,E402
