"""Function construction, type inference errors, and JSON/text serialization."""
import json

import numpy as np
import pytest

from paddle_ngraph.errors import SerializationError, ValidationError
from paddle_ngraph.ir import Function, from_json, ops, to_json, to_text


def small_function():
    x = ops.Parameter(dtype="float32", shape=(-1, 4), name="x")
    w = ops.Parameter(dtype="float32", shape=(4, 3), name="w", role="parameter")
    y = ops.MatMul(x.output(), w.output(), name="mm")
    r = ops.Relu(y.output(), name="act")
    c = ops.Constant(np.arange(3, dtype=np.float32) / 7, name="bias")
    s = ops.Add(r.output(), c.output(), name="add")
    m = ops.ReduceMean(s.output(), axes=[0], name="mean")
    return Function([x, w], {"out": m.output(), "act": r.output()}, name="small")


def test_types_are_inferred_with_dynamic_batch():
    f = small_function()
    assert f.results["out"].type.shape == (3,)
    assert f.results["act"].type.shape == (-1, 3)
    assert str(f.results["act"].type) == "float32[?x3]"


def test_bad_matmul_names_the_node():
    a = ops.Parameter(dtype="float32", shape=(2, 3), name="a")
    b = ops.Parameter(dtype="float32", shape=(4, 5), name="b")
    with pytest.raises(ValidationError, match="While validating node 'bad_mm' \\(MatMul\\).*contraction"):
        ops.MatMul(a.output(), b.output(), name="bad_mm")


def test_mismatched_dtypes_and_unknown_attribute_are_rejected():
    a = ops.Parameter(dtype="float32", shape=(2,), name="a")
    b = ops.Parameter(dtype="float64", shape=(2,), name="b")
    with pytest.raises(ValidationError, match="'sum_ab'"):
        ops.Add(a.output(), b.output(), name="sum_ab")
    with pytest.raises(ValidationError, match="unknown attribute"):
        ops.Relu(a.output(), name="r", alpha=0.1)


def test_allreduce_rejects_unknown_reduction():
    a = ops.Parameter(dtype="float32", shape=(2,), name="a")
    for reduction in ("sum", "prod", "min", "max", "avg"):
        assert ops.AllReduce(a.output(), reduction=reduction).output_types[0].shape == (2,)
    with pytest.raises(ValidationError, match="reduction 'mean'"):
        ops.AllReduce(a.output(), reduction="mean", name="ar")


def test_json_round_trip_is_exact():
    f = small_function()
    text = to_json(f)
    g = from_json(text)
    assert to_json(g) == text
    assert [n.name for n in g.ordered_nodes()] == [n.name for n in f.ordered_nodes()]
    np.testing.assert_array_equal(g.ordered_nodes()[[n.name for n in g.ordered_nodes()].index("bias")].attrs["value"],
                                  np.arange(3, dtype=np.float32) / 7)


def test_reader_rejects_a_document_whose_types_do_not_check():
    doc = json.loads(to_json(small_function()))
    for node in doc["nodes"]:
        if node["name"] == "w":
            node["attrs"]["shape"] = [5, 3]
            node["outputs"][0]["shape"] = [5, 3]
    with pytest.raises(SerializationError, match="mm"):
        from_json(json.dumps(doc))


@pytest.mark.parametrize("bad", ["", "{", "[]", '{"format": "other"}',
                                 '{"format": "paddle_ngraph.function", "version": 99}',
                                 '{"format": "paddle_ngraph.function", "version": 1, "nodes": [{"name": 1}]}'])
def test_reader_errors_are_typed(bad):
    with pytest.raises(SerializationError):
        from_json(bad)


def test_text_form_lists_every_node():
    text = to_text(small_function())
    assert "mm = MatMul(x, w)" in text and "-> float32[?x3]" in text
    assert "return out = mean:0 float32[3]" in text


def test_allreduce_compress_is_validated_and_shown():
    a = ops.Parameter(dtype="float32", shape=(2,), name="a")
    d = ops.Parameter(dtype="float64", shape=(2,), name="d")
    for compress in ("none", "bf16", "fp16"):
        assert ops.AllReduce(a.output(), reduction="avg", compress=compress).attrs["compress"] == compress
    with pytest.raises(ValidationError, match="'ar'.*compress 'int8' is not one of"):
        ops.AllReduce(a.output(), compress="int8", name="ar")
    with pytest.raises(ValidationError, match="'ar'.*needs float32 inputs; input 0 is float64"):
        ops.AllReduce(d.output(), compress="bf16", name="ar")
    with pytest.raises(ValidationError, match="'ar'.*needs reduction sum or avg, not 'max'"):
        ops.AllReduce(a.output(), reduction="max", compress="fp16", name="ar")
    r = ops.AllReduce(a.output(), reduction="avg", compress="bf16", name="ar")
    f = Function([a], {"out": r.output()}, name="f")
    assert "compress='bf16'" in to_text(f)
    assert from_json(to_json(f)).ordered_nodes()[-1].attrs["compress"] == "bf16"
    plain = Function([a], {"out": ops.AllReduce(a.output(), name="plain").output()}, name="g")
    assert "compress" not in to_text(plain)  # the default is not shown
