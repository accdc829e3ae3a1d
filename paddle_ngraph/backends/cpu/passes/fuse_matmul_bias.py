"""Fuses MatMul -> Add(bias) (-> Relu) into one MatMulBias node (oneDNN matmul with post-ops).

The pattern of every ``Linear`` layer. The MatMul must have no other user (its raw
product is not kept), the bias must be a vector over the last dimension, and the
Relu is absorbed only when it is the Add's sole user, so no value the rest of the
graph reads disappears: ReluBackprop reads the Relu's output, which the fused node
produces.
"""
from __future__ import annotations

from ....ir import Function
from ....ir.ops.matmul import MatMulBias
from ....passes.base import FunctionPass
from ....passes.rewrite import replace_outputs


class FuseMatMulBias(FunctionPass):
    name = "fuse_matmul_bias"

    def __init__(self):
        self.fused = 0

    def run(self, function: Function) -> bool:
        users = function.users()
        result_nodes = {o.node.id for o in function.results.values()}
        replacements = {}
        for add in function.ordered_nodes():
            if add.op_type != "Add":
                continue
            match = self._match(add, users, result_nodes)
            if match is None:
                continue
            matmul, bias = match
            target, activation = add, "none"
            add_users = users.get(add.id, [])
            if (len(add_users) == 1 and add_users[0].op_type == "Relu" and add.id not in result_nodes):
                target, activation = add_users[0], "relu"
            a, b = (replacements.get((i.node.id, i.index), i) for i in matmul.inputs)
            bias = replacements.get((bias.node.id, bias.index), bias)
            fused = MatMulBias(a, b, bias, name=f"{matmul.name}_bias_{activation}",
                               transpose_a=matmul.attrs["transpose_a"], transpose_b=matmul.attrs["transpose_b"],
                               activation=activation, compute_precision=matmul.attrs["compute_precision"])
            replacements[(target.id, 0)] = fused.output(0)
        replace_outputs(function, replacements)
        self.fused += len(replacements)
        return bool(replacements)

    @staticmethod
    def _match(add, users, result_nodes):
        out = add.output_types[0]
        for k in (0, 1):
            matmul, bias = add.inputs[k].node, add.inputs[1 - k]
            if (matmul.op_type == "MatMul" and len(users.get(matmul.id, [])) == 1 and matmul.id not in result_nodes
                    and all(i.type.rank == 2 for i in matmul.inputs) and bias.type.rank == 1
                    and bias.type.dtype == out.dtype and matmul.output_types[0] == out
                    and bias.type.shape[0] == out.shape[-1] >= 0):
                return matmul, bias
        return None
