"""Converters of more nn layers (conv2d_transpose, group_norm, instance_norm, interpolate, pad3d/pad,
tril/triu), forward and gradients against Paddle's executor in both IRs."""
import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

from harness import IRS, check_against_paddle, ir_guard, static_op
from helpers import TOL, normal_sampler, op_types

rng = np.random.default_rng(0)
normal = normal_sampler(rng)
# conv2d_transpose values reach ~20 here: a float32 sum in another order (oneDNN) differs by ~1e-6 absolute.
CONV_TOL = {"float32": dict(rtol=1e-5, atol=1e-5), "float64": TOL["float64"]}
# Normalization grads divide by a standard deviation and sum over groups: float32 rounding grows a little.
NORM_TOL = {"float32": dict(rtol=1e-4, atol=1e-5), "float64": dict(rtol=1e-9, atol=1e-11)}


# --- conv2d_transpose / depthwise_conv2d_transpose ---------------------------------------------------------
CONV_T = [
    dict(),
    dict(stride=2, padding=1),
    dict(stride=2, padding=1, output_padding=1),
    dict(stride=2, padding=[1, 0, 0, 2], dilation=2),
    dict(stride=2, output_size=[9, 10]),
    dict(stride=2, padding="SAME"),
    dict(stride=3, padding="VALID", dilation=2),
    dict(stride=2, groups=2, padding=1),
]


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("attrs", CONV_T, ids=[str(a) for a in CONV_T])
def test_conv2d_transpose(ir, dtype, attrs):
    groups = attrs.get("groups", 1)
    x, w = normal((2, 4, 4, 4), dtype), normal((4, 6 // groups, 3, 3), dtype)
    check_against_paddle(lambda x, w: F.conv2d_transpose(x, w, **attrs), {"x": x, "w": w}, ir=ir, **CONV_TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
def test_conv2d_transpose_nhwc(ir):
    x, w = normal((2, 4, 5, 3)), normal((3, 2, 2, 3))
    check_against_paddle(lambda x, w: F.conv2d_transpose(x, w, stride=2, padding=1, output_padding=1, data_format="NHWC"),
                         {"x": x, "w": w}, ir=ir)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_depthwise_conv2d_transpose(ir, dtype):
    x, w = normal((2, 3, 4, 4), dtype), normal((3, 1, 3, 3), dtype)

    def build(x, w):
        return F.conv2d_transpose(x, w, stride=2, padding=1, groups=3)

    assert any("depthwise_conv2d_transpose" in t for t in op_types(build, {"x": x, "w": w}, ir))
    check_against_paddle(build, {"x": x, "w": w}, ir=ir, **CONV_TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
def test_conv2d_transpose_layer(ir):
    """nn.Conv2DTranspose with its filter a parameter (read from the scope), no bias."""
    x = normal((2, 3, 4, 4))
    check_against_paddle(lambda x: paddle.nn.Conv2DTranspose(3, 4, 3, stride=2, padding=1, bias_attr=False)(x),
                         {"x": x}, ir=ir)


# --- group_norm / instance_norm -------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("groups,shape", [(2, (2, 4, 3, 5)), (1, (3, 6, 4)), (3, (2, 6, 2, 2, 3))])
def test_group_norm(ir, dtype, groups, shape):
    x, w, b = normal(shape, dtype) * 2 + 1, normal(shape[1:2], dtype), normal(shape[1:2], dtype)
    check_against_paddle(lambda x, w, b: F.group_norm(x, groups, 1e-5, w, b), {"x": x, "w": w, "b": b},
                         ir=ir, **NORM_TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
def test_group_norm_nhwc_without_affine(ir):
    x = normal((2, 3, 3, 4))
    check_against_paddle(lambda x: F.group_norm(x, 2, epsilon=1e-3, data_format="NHWC"), {"x": x}, ir=ir, **NORM_TOL["float32"])


@pytest.mark.parametrize("ir", IRS)
def test_group_norm_layer(ir):
    """nn.GroupNorm: scale and bias parameters; also fetches the saved Mean and Variance."""
    x = normal((2, 4, 3, 3))

    def build(x):
        layer = paddle.nn.GroupNorm(2, 4)
        return layer(x)

    check_against_paddle(build, {"x": x}, ir=ir, **NORM_TOL["float32"])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (3, 2, 6), (2, 2, 2, 3, 3)])
def test_instance_norm(ir, dtype, shape):
    x, w, b = normal(shape, dtype) * 3 - 1, normal(shape[1:2], dtype), normal(shape[1:2], dtype)
    check_against_paddle(lambda x, w, b: F.instance_norm(x, weight=w, bias=b, eps=1e-5), {"x": x, "w": w, "b": b},
                         ir=ir, **NORM_TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
def test_instance_norm_layer(ir):
    x = normal((2, 4, 3, 3))
    check_against_paddle(lambda x: paddle.nn.InstanceNorm2D(4)(x), {"x": x}, ir=ir, **NORM_TOL["float32"])


# --- interpolate ----------------------------------------------------------------------------------------
INTERP = [
    dict(mode="nearest", scale_factor=2),
    dict(mode="nearest", size=[7, 5]),
    dict(mode="nearest", size=[3, 9], align_corners=False),
    dict(mode="nearest", scale_factor=[1.5, 0.75]),
    dict(mode="bilinear", scale_factor=2),
    dict(mode="bilinear", scale_factor=2, align_corners=True),
    dict(mode="bilinear", size=[7, 3], align_mode=1),
    dict(mode="bilinear", size=[9, 11], align_corners=True),
    dict(mode="bilinear", scale_factor=[0.6, 1.7], align_mode=0),
    dict(mode="bilinear", size=[4, 6]),  # height unchanged
]


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("attrs", INTERP, ids=[str(a) for a in INTERP])
def test_interpolate(ir, dtype, attrs):
    x = normal((2, 3, 4, 6), dtype)
    check_against_paddle(lambda x: F.interpolate(x, **attrs), {"x": x}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_interpolate_nhwc_and_upsample(ir, mode):
    x = normal((2, 5, 4, 3))
    check_against_paddle(lambda x: paddle.nn.Upsample(size=[8, 7], mode=mode, data_format="NHWC")(x), {"x": x}, ir=ir)


@pytest.mark.parametrize("ir", IRS)
def test_interpolate_same_size(ir):
    x = normal((1, 2, 4, 4))
    check_against_paddle(lambda x: F.interpolate(x, size=[4, 4], mode="bilinear"), {"x": x}, ir=ir)


# --- pad3d / pad ----------------------------------------------------------------------------------------
PADS = [
    ("constant", [1, 2, 0, 1, 2, 0], {}),
    ("constant", [0, 0, 1, 1, 0, 0], dict(value=2.5)),
    ("reflect", [1, 2, 2, 1, 1, 0], {}),
    ("replicate", [3, 0, 1, 2, 0, 4], {}),
    ("circular", [1, 2, 2, 0, 0, 1], {}),
]


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode,pads,extra", PADS, ids=[p[0] + str(p[1]) for p in PADS])
def test_pad3d(ir, dtype, mode, pads, extra):
    x = normal((2, 3, 3, 4, 5), dtype)
    check_against_paddle(lambda x: F.pad(x, pads, mode=mode, **extra), {"x": x}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("mode", ["constant", "reflect"])
def test_pad3d_ndhwc(ir, mode):
    x = normal((2, 3, 4, 5, 3))
    check_against_paddle(lambda x: F.pad(x, [1, 0, 2, 1, 0, 2], mode=mode, value=-1.0, data_format="NDHWC"), {"x": x}, ir=ir)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pad(ir, dtype):
    """A padding per dim of the input (4-D here) is Paddle's pad op, not pad3d."""
    x = normal((2, 3, 4, 5), dtype)

    def build(x):
        return F.pad(x, [0, 1, 2, 0, 1, 1, 0, 3], value=1.5)

    assert {"pad", "pd_op.pad"} & op_types(build, {"x": x}, ir)
    check_against_paddle(build, {"x": x}, ir=ir, **TOL[dtype])


# --- tril / triu ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("lower,diagonal", [(True, 0), (True, -1), (False, 1), (False, -2)])
def test_tril_triu(ir, lower, diagonal):
    x = normal((2, 4, 5))

    def build(x):
        call = (lambda: paddle.tril(x, diagonal)) if lower else (lambda: paddle.triu(x, diagonal))
        return static_op(call, "tril_triu", {"X": x}, {"diagonal": diagonal, "lower": lower})

    check_against_paddle(build, {"x": x}, ir=ir)


# --- pow ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("factor", [2.0, 0.75, -1.5])
def test_pow(ir, dtype, factor):
    x = (np.abs(normal((3, 4), dtype)) + 0.5).astype(dtype)
    check_against_paddle(lambda x: paddle.pow(x, factor), {"x": x}, ir=ir, **TOL[dtype])


# --- layers that need only ops of this module and earlier ones (PIR: Paddle 3 refuses legacy Variables) ---
def test_transformer_pir():
    """nn.Transformer with a causal mask (generate_square_subsequent_mask emits triu), dropout 0 so that
    the run is deterministic; gradients of source and target."""
    src, tgt = normal((2, 5, 8)), normal((2, 4, 8))

    def build(src, tgt):
        paddle.seed(1)
        model = paddle.nn.Transformer(8, 2, 1, 1, 16, dropout=0.0)
        return model(src, tgt, tgt_mask=model.generate_square_subsequent_mask(4))

    check_against_paddle(build, {"src": src, "tgt": tgt}, ir="pir", rtol=1e-4, atol=1e-5)


def test_multi_head_attention_mask_pir():
    x, mask = normal((2, 5, 8)), normal((2, 2, 5, 5))

    def build(x, mask):
        return paddle.nn.MultiHeadAttention(8, 2)(x, x, x, attn_mask=mask)

    check_against_paddle(build, {"x": x, "mask": mask}, ir="pir", rtol=1e-4, atol=1e-5)


# --- training programs with a dynamic batch -------------------------------------------------------------------
DYNAMIC = {
    "conv2d_transpose": lambda x: paddle.nn.Conv2DTranspose(4, 3, 3, stride=2, padding=1, output_padding=1)(x),
    "group_norm": lambda x: paddle.nn.GroupNorm(2, 4)(x),
    "instance_norm": lambda x: paddle.nn.InstanceNorm2D(4)(x),
    "bilinear": lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"),
    "nearest_size_tensor": lambda x: F.interpolate(x, size=[paddle.full([1], 7, "int32"), 5], mode="nearest"),
    "pad3d_reflect": lambda x: F.pad(paddle.reshape(x, [-1, 4, 1, 5, 5]), [1, 1, 2, 0, 0, 0], mode="reflect"),
}


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("layer", sorted(DYNAMIC))
def test_training_program_with_dynamic_batch(ir, layer):
    """Data declared with batch -1, an SGD step appended: the converted loss matches Paddle's
    (run_function uses the backend conftest parametrizes)."""
    from harness import run_function

    import paddle_ngraph

    x_value = normal((3, 4, 5, 5))
    with ir_guard(ir):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [-1, 4, 5, 5], "float32")
            x.stop_gradient = False
            y = DYNAMIC[layer](x)
            loss = paddle.mean(y * y)
            paddle.optimizer.SGD(0.1).minimize(loss)
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        function = paddle_ngraph.convert(main, fetch_list=[loss])
        ours = run_function(function, {"x": x_value})
        reference = exe.run(main, feed={"x": x_value}, fetch_list=[loss])[0]
    got = next(v for k, v in ours.items() if k.startswith("fetch:"))
    np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-6)


# --- refusals -------------------------------------------------------------------------------------------
def test_bad_attributes_are_refused():
    from paddle_ngraph.errors import ConversionError

    import paddle_ngraph

    with ir_guard("pir"):
        main = paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, paddle.static.Program()):
            x = paddle.static.data("x", [2, 3, 2, 4, 4], "float32")
            F.interpolate(x, scale_factor=2, mode="nearest", data_format="NCDHW")  # 3-D nearest_interp
        with pytest.raises(ConversionError, match="only 4-D inputs"):
            paddle_ngraph.convert(main)
