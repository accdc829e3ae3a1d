"""How much arithmetic one step of a specialized function does, and so how many compute threads
it is worth.

With more than one thread a step is handed to the executor's compute thread (native/cpu/src/
executor.cc, ``ComputeThread``) and each kernel forks an OpenMP team: two thread wake-ups per
step and a fork/join per kernel. That costs 7-10 us on a quiet machine and far more on a busy one
(measured: a 32-64-10 MLP at batch 4 spent 170 us per step in the executable under load 3, of which
the kernels were 3 us). A second core can save at most half of the kernels' time, so a step of a few
tens of microseconds of kernels runs faster on the caller's thread alone.
"""
from __future__ import annotations

from ...ir import Function

# Below this many floating-point operations per step, one thread: up to a few hundred microseconds of
# kernels, where a second thread saves little and its hand-offs can cost a lot. Measured with
# tools/bench_small.py's models on 2 vCPUs shared with other jobs (load average 4-6): LeNet at batch 8
# (18 MFLOP) took 1.15-1.2 ms per step on one thread or two when the machine was quiet for a moment, and
# 4.0 ms in most rounds on two (each step waiting for a scheduler tick to wake a thread); the
# 784-600-10 MLP at batch 4 (8 MFLOP) was 5-15% faster on two threads in quiet rounds and up to 3x
# slower in busy ones.
SMALL_STEP_FLOPS = 32_000_000

_CONVOLUTIONS = ("Convolution", "ConvolutionBackpropData", "ConvolutionBackpropFilter")


def node_flops(node) -> int:
    """Multiply-adds count two; every other op one per output element (their cost is memory)."""
    op = node.op_type
    if op in ("MatMul", "MatMulBias"):
        a = node.input_type(0)
        k = a.shape[-2] if node.attrs.get("transpose_a") else a.shape[-1]
        return 2 * node.output_types[0].num_elements() * max(k, 1)
    if op in _CONVOLUTIONS:
        filters = node.input_type(1)
        # The forward output (or its gradient, ``delta``) times the filter's taps per output.
        out = node.input_type(2) if op != "Convolution" else node.output_types[0]
        taps = 1
        for d in filters.shape[1:]:
            taps *= max(d, 1)
        return 2 * out.num_elements() * taps
    return sum(t.num_elements() for t in node.output_types)


def step_flops(function: Function) -> int:
    return sum(node_flops(n) for n in function.ordered_nodes() if n.op_type not in ("Parameter", "Constant"))


def threads_for(function: Function, threads: int) -> int:
    """``threads`` (the cores this rank may use), or one for a step too small to share."""
    if threads <= 1 or step_flops(function) >= SMALL_STEP_FLOPS:
        return threads
    return 1
