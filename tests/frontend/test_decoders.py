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
