"""Validation after passes catches a graph a pass left ill-typed, and names the pass."""
import pytest

from paddle_ngraph.errors import ValidationError
from paddle_ngraph.ir import Function, ops
from paddle_ngraph.passes import FunctionPass, PassManager, Validate


def function():
    x = ops.Parameter(dtype="float32", shape=(2, 3), name="x")
    w = ops.Parameter(dtype="float32", shape=(3, 4), name="w")
    mm = ops.MatMul(x.output(), w.output(), name="mm")
    return Function([x, w], {"out": ops.Relu(mm.output(), name="act").output()}), x, mm


class BreakMatMul(FunctionPass):
    """Rewires the matmul to multiply x by itself: its recorded output type no longer holds."""

    name = "break_matmul"

    def __init__(self, x, mm):
        self.x, self.mm = x, mm

    def run(self, f):
        self.mm.inputs[1] = self.x.output()
        return True


def test_validate_accepts_a_consistent_function():
    f, _, _ = function()
    assert Validate().run(f) is False


def test_validate_catches_a_stale_node():
    f, x, mm = function()
    BreakMatMul(x, mm).run(f)
    with pytest.raises(ValidationError, match="'mm'"):
        Validate().run(f)


def test_manager_names_the_failing_pass_and_dumps_before_it(tmp_path):
    f, x, mm = function()
    with pytest.raises(ValidationError, match="pass 'break_matmul' failed \\(passes run before it: none\\)"):
        PassManager([BreakMatMul(x, mm)], dump_dir=str(tmp_path)).run(f)
    assert (tmp_path / "00_input.json").exists() and not (tmp_path / "01_break_matmul.json").exists()
