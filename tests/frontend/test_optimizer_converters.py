"""Converters of the optimizer ops (frontend/converters/optimizer.py): lars_momentum, one op
and whole training runs, against Paddle's executor in both IRs."""
import numpy as np
import paddle
import pytest

import harness
import paddle_ngraph
from harness import IRS, check_against_paddle, ir_guard, scope_value, static_op
from paddle_ngraph.backends import get_backend

rng = np.random.default_rng(0)


def lars_op(params, grads, velocities, lr, decays, mu=0.9, coeff=0.001, eps=1e-7, rescale=1.0):
    """Paddle's lars_momentum over lists of parameters, in the current IR: PIR packs each list
    with builtin.combine and unpacks the outputs with builtin.split; legacy lists the variables
    in each slot. Returns the new parameters and velocities."""
    n = len(params)
    if paddle.framework.in_pir_mode():
        p_out, v_out, _ = paddle._C_ops.lars_momentum_(params, grads, velocities, [lr] * n, None, mu, coeff,
                                                       decays, eps, False, rescale)
        return list(p_out) + list(v_out)
    from paddle.base.layer_helper import LayerHelper

    helper = LayerHelper("lars_momentum")
    p_out = [helper.create_variable_for_type_inference(p.dtype) for p in params]
    v_out = [helper.create_variable_for_type_inference(p.dtype) for p in params]
    helper.append_op(type="lars_momentum",
                     inputs={"Param": params, "Grad": grads, "Velocity": velocities, "LearningRate": [lr] * n},
                     outputs={"ParamOut": p_out, "VelocityOut": v_out},
                     attrs={"mu": mu, "lars_coeff": coeff, "lars_weight_decay": decays, "epsilon": eps,
                            "rescale_grad": rescale, "multi_precision": False})
    return p_out + v_out


def lars_feeds(shapes, dtype="float32", zero=()):
    feeds = {}
    for i, shape in enumerate(shapes):
        feeds[f"p{i}"] = rng.standard_normal(shape).astype(dtype)
        feeds[f"g{i}"] = (0.01 * rng.standard_normal(shape)).astype(dtype)
        feeds[f"v{i}"] = rng.standard_normal(shape).astype(dtype)
    for name in zero:
        feeds[name][...] = 0
    feeds["lr"] = np.array([0.1], dtype)
    return feeds


def lars_build(count, decays, **attrs):
    def build(lr, **kw):
        pick = lambda prefix: [kw[f"{prefix}{i}"] for i in range(count)]  # noqa: E731
        return lars_op(pick("p"), pick("g"), pick("v"), lr, decays, **attrs)
    return build


# Both backends add the norms in Paddle's (Eigen's) order: the outputs are equal, not close.
EXACT = dict(rtol=0, atol=0, grads=False)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_lars_momentum(ir, dtype):
    feeds = lars_feeds([(300, 40)], dtype)
    check_against_paddle(lars_build(1, [0.0005], rescale=0.5), feeds, ir=ir, **EXACT)


@pytest.mark.parametrize("ir", IRS)
def test_lars_momentum_lists_with_an_excluded_parameter(ir):
    """Three parameters in one op; the second excluded from weight decay (decay 0: plain momentum)."""
    feeds = lars_feeds([(5, 3), (7,), (2, 2, 2)])
    check_against_paddle(lars_build(3, [0.0005, 0.0, 0.001], coeff=0.01), feeds, ir=ir, **EXACT)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("zero", ["p0", "g0"])
def test_lars_momentum_zero_norm(ir, zero):
    """A zero parameter or gradient norm: the local learning rate is lr itself."""
    feeds = lars_feeds([(6, 4)], zero=[zero])
    check_against_paddle(lars_build(1, [0.0005]), feeds, ir=ir, **EXACT)


def test_lars_momentum_rejects_lists_of_different_lengths():
    from paddle_ngraph.errors import ConversionError

    with ir_guard("legacy"):
        main = paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main):
            p = [paddle.static.data(f"p{i}", [3], "float32") for i in range(2)]
            lars_op(p, p, p, paddle.static.data("lr", [1], "float32"), [0.0005, 0.0005])
        # Paddle checks the lengths when the op is built; a program file could still disagree.
        main.global_block().ops[-1]._set_attr("lars_weight_decay", [0.0005])
        with pytest.raises(ConversionError, match=r"lars_momentum.*differ in length \(2, 2, 2, 2, 1\)"):
            paddle_ngraph.convert(main)


# --- training ------------------------------------------------------------------------------------
def mlp_program(optimizer: str):
    """A 2-layer MLP with softmax cross-entropy; biases excluded from LARS's weight decay."""
    x = paddle.static.data("x", [-1, 6], "float32")
    label = paddle.static.data("label", [-1, 1], "int64")
    hidden = paddle.nn.functional.relu(paddle.nn.Linear(6, 16)(x)) if paddle.framework.in_pir_mode() else \
        static_op(None, "relu", {"X": paddle.nn.Linear(6, 16)(x)})
    logits = paddle.nn.Linear(16, 3)(hidden)
    loss = paddle.mean(paddle.nn.functional.cross_entropy(logits, label))
    if optimizer == "lars":
        opt = paddle.incubate.optimizer.LarsMomentumOptimizer(0.1, 0.9, lars_coeff=0.01, lars_weight_decay=0.0005,
                                                              exclude_from_weight_decay=["b_0"])
    else:
        opt = paddle.optimizer.Lamb(0.01, lamb_weight_decay=0.01, exclude_from_weight_decay_fn=lambda p: "b_0" in p.name)
    opt.minimize(loss)
    return loss


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("optimizer", ["lars", "lamb"])
def test_mlp_trains_like_paddle(ir, optimizer):
    """N steps of Paddle's executor against N calls of the converted function (on each backend,
    as every test of this module: tests/conftest.py)."""
    backend = harness.DEFAULT_BACKEND
    steps = 6
    data = [{"x": rng.standard_normal((8, 6)).astype("float32"), "label": rng.integers(0, 3, (8, 1))}
            for _ in range(steps)]
    with ir_guard(ir):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            mlp_program(optimizer)
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        function = paddle_ngraph.convert(main)
        update = {"lars": "LarsMomentumUpdate", "lamb": "LambUpdate"}[optimizer]
        assert sum(n.op_type == update for n in function.ordered_nodes()) == 4
        state = {p.name: scope_value(p.name) for p in function.parameters if p.name not in data[0]}
        for feed in data:
            exe.run(main, feed=feed)
        expected = {name: scope_value(name) for name in state}
    if optimizer == "lars":
        decays = sorted(n.attrs["lars_weight_decay"] for n in function.ordered_nodes() if n.op_type == update)
        assert decays == [0.0, 0.0, pytest.approx(0.0005), pytest.approx(0.0005)]
    executable = get_backend(backend).compile(function)
    for feed in data:
        outs = executable.call([feed[p.name] if p.name in feed else state[p.name] for p in function.parameters])
        state.update({k[len("state:"):]: np.array(v) for k, v in zip(function.results, outs) if k.startswith("state:")})
    for name, value in expected.items():
        # Only the forward and backward GEMMs add in another order than Paddle's (1e-7 relative).
        np.testing.assert_allclose(state[name], value, rtol=1e-5, atol=1e-6, err_msg=f"{name} ({ir}, {backend})")
