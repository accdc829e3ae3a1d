"""Helpers shared by the single-process tests of converters (tests/frontend): tolerances, random
inputs, and which Paddle ops a test program holds. The comparison itself is harness.py's."""
from __future__ import annotations

import numpy as np
import paddle

from harness import ir_guard, static_op

# Against Paddle's executor, per dtype: float32 sums in another order differ by rounding.
TOL = {"float32": dict(rtol=1e-5, atol=1e-6), "float64": dict(rtol=1e-10, atol=1e-12)}


def normal_sampler(rng: np.random.Generator):
    """``normal(shape, dtype="float32", scale=1.0)`` drawing from ``rng``: each test module keeps its
    own generator, so that its inputs do not depend on which other tests ran before."""
    def normal(shape, dtype="float32", scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(dtype)
    return normal


def _data(feeds: dict) -> dict:
    return {n: paddle.static.data(n, list(v.shape), str(v.dtype)) for n, v in feeds.items()}


def _types(main, ir: str) -> set:
    if ir == "pir":
        return {op.name() for op in main.global_block().ops}
    return {op.type for op in main.global_block().ops}


def op_types(build, feeds: dict, ir: str) -> set:
    """Paddle op types of the forward program ``build`` makes (to check which op a test exercises)."""
    with ir_guard(ir):
        main = paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, paddle.static.Program()):
            build(**_data(feeds))
        return _types(main, ir)


def op_types_with_gradients(build, feeds: dict, ir: str) -> set:
    """Paddle op types of the program ``build`` makes, with the gradients of its floating-point feeds."""
    with ir_guard(ir):
        main = paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, paddle.static.Program()):
            xs = _data(feeds)
            for n, v in feeds.items():
                xs[n].stop_gradient = not np.issubdtype(v.dtype, np.floating)
            out = build(**xs)
            outs = out if isinstance(out, (list, tuple)) else [out]
            sums = [static_op(lambda o=o: paddle.sum(o), "reduce_sum", {"X": o},
                              {"dim": [], "reduce_all": True, "keep_dim": False}) for o in outs]
            total = sums[0]
            for s in sums[1:]:
                total = total + s
            paddle.static.gradients([total], [v for n, v in xs.items() if not v.stop_gradient])
        return _types(main, ir)


def parameter_names(main) -> list[str]:
    """The parameters of a static program, either IR, sorted by name."""
    if paddle.framework.in_pir_mode():
        return sorted(op.attrs()["parameter_name"] for op in main.global_block().ops if op.name() == "builtin.parameter")
    return sorted(p.name for p in main.all_parameters())
