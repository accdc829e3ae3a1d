"""Decoding programs in memory and from files; errors name the file or the op."""
import os

import numpy as np
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph.errors import ProgramFileError, UnsupportedOpsError
from paddle_ngraph.zoo import build_program

from harness import ir_guard, static_op


def save_legacy(tmp_path):
    with ir_guard("legacy"):
        main, *_ = build_program("mnist_mlp", "sgd")
        path = tmp_path / "mlp.pdmodel"
        path.write_bytes(main.desc.serialize_to_string())
    return str(path)


def test_saved_legacy_program_converts(tmp_path):
    path = save_legacy(tmp_path)
    f = paddle_ngraph.convert(path)
    assert any(n.op_type == "SGDUpdate" for n in f.ordered_nodes())
    assert paddle_ngraph.unsupported_ops(path) == []


def test_saved_pir_program_converts(tmp_path):
    main, *_ = build_program("mnist_mlp", "adam")
    path = str(tmp_path / "mlp.json")
    paddle.base.core.serialize_pir_program(main, path, 1, True, False, True)
    f = paddle_ngraph.convert(path)
    assert any(n.op_type == "AdamUpdate" for n in f.ordered_nodes())


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_legacy_file_is_one_line_naming_the_file(tmp_path, damage):
    path = save_legacy(tmp_path)
    data = open(path, "rb").read()
    bad = {"truncate": data[: len(data) // 3], "garbage": os.urandom(200), "empty": b""}[damage]
    open(path, "wb").write(bad)
    with pytest.raises(ProgramFileError) as info:
        paddle_ngraph.convert(path)
    message = str(info.value)
    assert path in message and "\n" not in message


@pytest.mark.parametrize("content", [b"{\"program\": ", b"not json at all", b"{\"a\": 1}"])
def test_corrupt_pir_file_is_one_line_naming_the_file(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ProgramFileError) as info:
        paddle_ngraph.convert(str(path))
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_missing_file():
    with pytest.raises(ProgramFileError, match="no such file"):
        paddle_ngraph.convert("/nonexistent/model.pdmodel")


@pytest.mark.parametrize("ir", ["legacy", "pir"])
def test_unsupported_ops_reported_all_at_once(ir):
    with ir_guard(ir):
        main = paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main):
            x = paddle.static.data("x", [4, 3], "float32")
            a = static_op(lambda: paddle.logcumsumexp(x, axis=0), "logcumsumexp", {"X": x}, {"axis": 0})
            b = static_op(lambda: paddle.logcumsumexp(a, axis=0), "logcumsumexp", {"X": a}, {"axis": 0})
            static_op(lambda: paddle.lgamma(b), "lgamma", {"X": b})
        report = paddle_ngraph.unsupported_ops(main)
        types = {r["op_type"].replace("pd_op.", ""): r for r in report}
        assert set(types) == {"logcumsumexp", "lgamma"}
        assert types["logcumsumexp"]["count"] == 2 and types["logcumsumexp"]["block"] == 0
        with pytest.raises(UnsupportedOpsError) as info:
            paddle_ngraph.convert(main)
        assert "logcumsumexp x2" in str(info.value) and "lgamma x1" in str(info.value)


def test_pir_inplace_results_are_named_after_what_they_update():
    """Paddle's in-place map of each op decides which operand an in-place result is: increment_'s
    out is its x, assign_out_'s out its output (not x), sgd_'s param_out its param."""
    from paddle_ngraph.frontend import decode
    from paddle_ngraph.frontend.pir_decoder import updated_in_place

    with ir_guard("pir"):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [2, 3], "float32")
            linear = paddle.nn.Linear(3, 1)
            loss = paddle.mean(linear(x))
            paddle.optimizer.SGD(0.1).minimize(loss)
            from paddle.pir.core import create_parameter

            counter = create_parameter(dtype="int32", shape=[1], name="counter", trainable=False,
                                       initializer=paddle.nn.initializer.Constant(0.0))
            paddle.increment(counter)
            paddle.assign(linear.bias * 0.5, output=linear.bias)
        view = decode(main)
    named = {op.type: op.outputs for op in view.ops if op.type.endswith("_")}
    assert named["pd_op.increment_"]["out"] == ["counter"]
    assert named["pd_op.assign_out_"]["out"] == ["linear_0.b_0"]
    assert sorted(n for op in view.ops if op.type == "pd_op.sgd_" for n in op.outputs["paramout"]) == \
        ["linear_0.b_0", "linear_0.w_0"]
    updated = {op.type: [view.value_names[v.id] for v in updated_in_place(op.native)] for op in view.ops
               if op.type in ("pd_op.increment_", "pd_op.assign_out_")}
    assert updated == {"pd_op.increment_": ["counter"], "pd_op.assign_out_": ["linear_0.b_0"]}
