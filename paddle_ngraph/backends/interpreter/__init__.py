"""The INTERPRETER backend: NumPy reference kernels, the executable definition of each op."""
from .bfloat16 import kernel_for
from .executable import InterpreterBackend, InterpreterExecutable
from .kernels import KERNELS

__all__ = ["InterpreterBackend", "InterpreterExecutable", "KERNELS", "evaluate_nodes"]


def evaluate_nodes(nodes) -> dict | None:
    """``{node id: outputs}`` of ``nodes`` (operands first, their graph closed: constants and
    deterministic ops of them) by the reference kernels; None if one has no kernel. What the
    frontend's constant folding computes shape arithmetic with."""
    if any(n.op_type not in KERNELS for n in nodes):
        return None
    results: dict[int, list] = {}
    for node in nodes:
        args = [results[i.node.id][i.index] for i in node.inputs]
        results[node.id] = kernel_for(node, KERNELS)(node, args, None)
    return results
