"""Type inference of the conv, pool, norm, dropout, embedding and cross-entropy ops (ir/ops/conv.py, pool.py, norm.py,
tensor.py, indexing.py, loss.py): output types, and errors that name the node."""
import pytest

from paddle_ngraph.errors import ValidationError
from paddle_ngraph.ir import ops


def param(shape, dtype="float32"):
    return ops.Parameter(dtype=dtype, shape=shape).output()


X = (2, 4, 6, 7)
CONV = dict(strides=(2, 1), pads_begin=(1, 0), pads_end=(1, 2), dilations=(1, 2), groups=2)
POOL = dict(window=(3, 3), strides=(2, 2), pads_begin=(1, 1), pads_end=(1, 1), ceil_mode=True)
BN = dict(epsilon=1e-5, channel_axis=1)
LN = dict(begin_norm_axis=1)


def vec(n, dtype="float32"):
    return param((n,), dtype)


# (builder, expected output types)
GOOD = {
    # H: (6 + 2 - 3) // 2 + 1 = 3; W: (7 + 2 - 5) // 1 + 1 = 5 (dilated kernel spans 5)
    "conv": (lambda: ops.Convolution(param((-1, 4, 6, 7)), param((6, 2, 3, 3)), **CONV),
             [("float32", (-1, 6, 3, 5))]),
    "conv_bp_data": (lambda: ops.ConvolutionBackpropData(param(X), param((6, 2, 3, 3)), param((2, 6, 3, 5)), **CONV),
                     [("float32", X)]),
    "conv_bp_filter": (lambda: ops.ConvolutionBackpropFilter(param(X), param((6, 2, 3, 3)), param((2, 6, 3, 5)), **CONV),
                       [("float32", (6, 2, 3, 3))]),
    # ceil_mode: H (6 + 2 - 3 + 1) // 2 + 1 = 4, W (7 + 2 - 3 + 1) // 2 + 1 = 4
    "max_pool": (lambda: ops.MaxPool(param(X), **POOL), [("float32", (2, 4, 4, 4))]),
    "avg_pool_adaptive": (lambda: ops.AvgPool(param((2, 4, -1, -1)), window=(2, 3), adaptive=True, exclusive=False),
                          [("float32", (2, 4, 2, 3))]),
    "max_pool_bp": (lambda: ops.MaxPoolBackprop(param(X), param((2, 4, 4, 4)), **POOL), [("float32", X)]),
    "avg_pool_bp": (lambda: ops.AvgPoolBackprop(param(X), param((2, 4, 4, 4)), **POOL), [("float32", X)]),
    "bn_training": (lambda: ops.BatchNormTraining(param(X), vec(4), vec(4), vec(4), vec(4), momentum=0.9, **BN),
                    [("float32", X)] + [("float32", (4,))] * 4),
    "bn_nhwc": (lambda: ops.BatchNormInference(param(X), vec(7), vec(7), vec(7), vec(7), epsilon=1e-5, channel_axis=3),
                [("float32", X)]),
    "bn_training_bp": (lambda: ops.BatchNormTrainingBackprop(param(X), vec(4), vec(4), vec(4), param(X), **BN),
                       [("float32", X), ("float32", (4,)), ("float32", (4,))]),
    "bn_inference_bp": (lambda: ops.BatchNormInferenceBackprop(param(X), vec(4), vec(4), vec(4), param(X), **BN),
                        [("float32", X), ("float32", (4,)), ("float32", (4,))]),
    # sync_batch_norm's: float64 [3, C] sums between the ranks' halves of the batch norm.
    "bn_sums": (lambda: ops.BatchNormSums(param((-1, 4, 6, 7)), **BN), [("float64", (3, 4))]),
    "bn_training_from_sums": (lambda: ops.BatchNormTrainingFromSums(param(X), vec(4), vec(4), vec(4), vec(4),
                                                                    param((3, 4), "float64"), momentum=0.9, **BN),
                              [("float32", X)] + [("float32", (4,))] * 4),
    "bn_bp_sums": (lambda: ops.BatchNormBackpropSums(param(X), vec(4), vec(4), param(X), **BN),
                   [("float64", (3, 4)), ("float32", (4,)), ("float32", (4,))]),
    "bn_training_bp_from_sums": (lambda: ops.BatchNormTrainingBackpropFromSums(
        param(X), vec(4), vec(4), vec(4), param(X), param((3, 4), "float64"), **BN), [("float32", X)]),
    "layer_norm": (lambda: ops.LayerNorm(param((-1, 4, 5)), vec(20), vec(20), **LN),
                   [("float32", (-1, 4, 5)), ("float32", (-1,)), ("float32", (-1,))]),
    "layer_norm_bp": (lambda: ops.LayerNormBackprop(param((3, 4, 5)), vec(20), vec(3), vec(3), param((3, 4, 5)), **LN),
                      [("float32", (3, 4, 5)), ("float32", (20,)), ("float32", (20,))]),
    "lrn": (lambda: ops.LRN(param(X), size=3), [("float32", X), ("float32", X)]),
    "lrn_bp": (lambda: ops.LRNBackprop(param(X), param(X), param(X), param(X), size=5), [("float32", X)]),
    "dropout_mask": (lambda: ops.DropoutMask(param((-1, 3)), prob=0.3), [("uint8", (-1, 3))]),
    "embedding": (lambda: ops.EmbeddingLookup(param((10, 4)), param((2, -1), "int64"), padding_idx=0),
                  [("float32", (2, -1, 4))]),
    "embedding_bp": (lambda: ops.EmbeddingLookupBackprop(param((10, 4)), param((2, 3), "int32"), param((2, 3, 4))),
                     [("float32", (10, 4))]),
    "cross_entropy_hard": (lambda: ops.CrossEntropy(param((-1, 5)), param((-1, 1), "int64")),
                           [("float32", (-1, 1)), ("float32", (-1, 1))]),
    "cross_entropy_soft": (lambda: ops.CrossEntropy(param((3, 5)), param((3, 5)), soft_label=True), [("float32", (3, 1))]),
    "cross_entropy_bp": (lambda: ops.CrossEntropyBackprop(param((3, 5)), param((3, 1), "int64"), param((3, 1))),
                         [("float32", (3, 5))]),
}


@pytest.mark.parametrize("case", sorted(GOOD))
def test_output_types(case):
    build, expected = GOOD[case]
    node = build()
    assert [(t.dtype.value, t.shape) for t in node.output_types] == expected


# (op class, inputs, attrs, fragment of the message)
BAD = {
    "conv_channels": (ops.Convolution, lambda: [param(X), param((6, 3, 3, 3))], {}, "channels"),
    "conv_window": (ops.Convolution, lambda: [param((1, 4, 2, 2)), param((6, 4, 3, 3))], {}, "does not fit"),
    "conv_groups": (ops.Convolution, lambda: [param(X), param((5, 2, 3, 3))], {"groups": 2}, "groups"),
    "conv_dtype": (ops.Convolution, lambda: [param(X), param((6, 4, 3, 3), "float64")], {}, "dtypes differ"),
    "conv_bp_delta": (ops.ConvolutionBackpropData, lambda: [param(X), param((6, 4, 3, 3)), param((2, 6, 3, 3))], {},
                      "delta"),
    "pool_rank": (ops.MaxPool, lambda: [param((4, 6, 7))], {"window": (2, 2)}, "4-D"),
    "pool_attr": (ops.AvgPool, lambda: [param(X)], {"window": (2,)}, "needs 2 values"),
    "pool_bp_delta": (ops.MaxPoolBackprop, lambda: [param(X), param((2, 4, 3, 3))], POOL, "delta"),
    "bn_channels": (ops.BatchNormTraining, lambda: [param(X), vec(3), vec(3), vec(3), vec(3)], {}, "channels"),
    "bn_axis": (ops.BatchNormInference, lambda: [param(X), vec(4), vec(4), vec(4), vec(4)], {"channel_axis": 4},
                "channel_axis"),
    "bn_sums_dtype": (ops.BatchNormTrainingFromSums, lambda: [param(X), vec(4), vec(4), vec(4), vec(4), param((3, 4))],
                      {}, "must be float64"),
    "bn_sums_channels": (ops.BatchNormTrainingBackpropFromSums,
                         lambda: [param(X), vec(4), vec(4), vec(4), param(X), param((3, 5), "float64")], {}, "float64\\[3, 4\\]"),
    "layer_norm_scale": (ops.LayerNorm, lambda: [param((3, 4, 5)), vec(5), vec(5)], LN, "normalized elements"),
    "layer_norm_axis": (ops.LayerNorm, lambda: [param((3, 4)), vec(4), vec(4)], {"begin_norm_axis": 2}, "begin_norm_axis"),
    "lrn_even": (ops.LRN, lambda: [param(X)], {"size": 4}, "odd"),
    "dropout_prob": (ops.DropoutMask, lambda: [param((3,))], {"prob": 1.5}, "prob"),
    "embedding_ids": (ops.EmbeddingLookup, lambda: [param((10, 4)), param((2, 3))], {}, "ids must be int64"),
    "embedding_bp_delta": (ops.EmbeddingLookupBackprop, lambda: [param((10, 4)), param((2, 3), "int64"), param((6, 4))], {},
                           "delta"),
    "cross_entropy_label": (ops.CrossEntropy, lambda: [param((3, 5)), param((3, 2), "int64")], {}, "size 1"),
    "cross_entropy_soft": (ops.CrossEntropy, lambda: [param((3, 5)), param((3, 5), "int64")], {"soft_label": True},
                           "soft label"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_inputs_name_the_node(case):
    cls, inputs, attrs, fragment = BAD[case]
    with pytest.raises(ValidationError, match=f"node 'bad_{case}' \\({cls.op_type}\\).*{fragment}"):
        cls(*inputs(), name=f"bad_{case}", **attrs)
