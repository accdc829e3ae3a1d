"""The converter registry (frontend/converters/registry.py): converters register their Paddle op types
beside their code, once each."""
import pytest

from paddle_ngraph.frontend import OP_TABLE, SKIPPED_OPS
from paddle_ngraph.frontend.converters import converter


def test_every_converter_is_registered_by_a_converters_family_module():
    families = {"elementwise", "activation", "matmul", "conv", "pool", "norm", "loss", "reduction", "shape",
                "indexing", "resample", "tensor", "optimizer", "collective"}
    modules = {f.__module__.rsplit(".", 1)[-1] for f in OP_TABLE.values()}
    assert modules == families
    assert not set(OP_TABLE) & SKIPPED_OPS


def test_an_op_type_registered_twice_names_both_converters_and_registers_nothing():
    before = dict(OP_TABLE)

    def relu_again(ctx):
        pass

    clash = r"'pd_op.relu' registered twice: by .*activation\.relu and by .*relu_again"
    with pytest.raises(RuntimeError, match=clash):
        converter("a_new_op_type", "pd_op.relu")(relu_again)
    with pytest.raises(RuntimeError, match=r"'feed' registered twice: by SKIPPED_OPS"):
        converter("feed")(relu_again)
    with pytest.raises(RuntimeError, match=r"'twice' registered twice"):
        converter("twice", "twice")(relu_again)
    assert OP_TABLE == before and list(OP_TABLE) == list(before)
