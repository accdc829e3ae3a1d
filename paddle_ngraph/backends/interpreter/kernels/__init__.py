"""Reference kernels: ``KERNELS[op_type](node, inputs, transport) -> list of outputs``.

These define what each IR op computes. They favour clarity over speed, but
keep Paddle's order of floating-point operations where it matters for
matching Paddle to 1e-5 (softmax cross-entropy, the optimizers). One module
per op family registers its kernels with ``@kernel``.
"""
from __future__ import annotations

from .registry import KERNELS, kernel  # noqa: F401
from . import basic  # noqa: F401,E402
from . import nn  # noqa: F401,E402
from . import tensor  # noqa: F401,E402
from . import lars  # noqa: F401,E402
