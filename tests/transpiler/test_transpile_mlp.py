"""transpile + unchanged exe.run trains dist_mnist_mlp exactly like plain Paddle, in both IRs."""
import numpy as np
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph.transpiler.engine_op import is_engine_op
from paddle_ngraph.zoo import build_program, digits_as_mnist, shard

from harness import IRS, assert_trained_close, ir_guard

STEPS = 20
LR = {"sgd": 0.03, "momentum": 0.03, "adam": 0.001, "lars": 0.1, "lamb": 0.001}
x_all, y_all = digits_as_mnist()


def parameter_names(main):
    if paddle.framework.in_pir_mode():
        return sorted(op.attrs()["parameter_name"] for op in main.global_block().ops if op.name() == "builtin.parameter")
    return sorted(p.name for p in main.all_parameters())


def train(optimizer, transpiled, steps=STEPS, batch=32, backend=None):
    main, startup, _, loss = build_program("mnist_mlp", optimizer, lr=LR[optimizer])
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        if transpiled:
            assert paddle_ngraph.transpile(main, backend=backend) is main
        losses = []
        for step in range(steps):
            xb, yb = shard(x_all, y_all, batch, 0, 1, step)
            losses.append(float(exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])[0]))
        params = {n: np.array(scope.find_var(n).get_tensor()) for n in parameter_names(main)}
    return main, np.array(losses), params


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam", "lars", "lamb"])
def test_losses_and_parameters_equal_paddle(ir, optimizer, backend):
    with ir_guard(ir):
        _, ref_losses, ref_params = train(optimizer, transpiled=False)
        main, losses, params = train(optimizer, transpiled=True, backend=backend)
    assert ref_losses[-1] < ref_losses[0]
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    assert params.keys() == ref_params.keys() and len(params) == 4
    for name in params:
        assert_parameters_close(params[name], ref_params[name], optimizer, name)


def assert_parameters_close(got, ref, optimizer, name):
    assert_trained_close(got, ref, optimizer, name, lr=LR[optimizer])


@pytest.mark.parametrize("ir", IRS)
def test_program_shows_what_runs_where(ir):
    with ir_guard(ir):
        main, _, _ = train("adam", transpiled=True, steps=1)
        if ir == "pir":
            op_types = [op.name() for op in main.global_block().ops]
        else:
            op_types = [op.type for op in main.global_block().ops]
        text = str(main)
    assert "ngraph_engine" in text
    # What stays in Paddle: declarations, the engine, and the final mean of the loss (the anchor).
    left = [t for t in op_types if t not in ("pd_op.data", "builtin.parameter", "builtin.combine")]
    assert is_engine_op(left[0]), left
    assert sorted(set(left[1:])) in (["reduce_mean"], ["pd_op.full_int_array", "pd_op.mean"]), left


@pytest.mark.parametrize("ir", IRS)
def test_static_save_and_load_see_trained_parameters(ir, tmp_path):
    with ir_guard(ir):
        main, startup, _, loss = build_program("mnist_mlp", "sgd")
        scope = paddle.static.Scope()
        exe = paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(scope):
            exe.run(startup)
            paddle_ngraph.transpile(main)
            xb, yb = shard(x_all, y_all, 16, 0, 1, 0)
            exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])
            names = parameter_names(main)
            trained = {n: np.array(scope.find_var(n).get_tensor()) for n in names}
            paddle.static.save(main, str(tmp_path / "ckpt"))
            for n in names:
                scope.find_var(n).get_tensor().set(np.zeros_like(trained[n]), paddle.CPUPlace())
            paddle.static.load(main, str(tmp_path / "ckpt"))
            for n in names:
                np.testing.assert_array_equal(np.array(scope.find_var(n).get_tensor()), trained[n])


@pytest.mark.parametrize("ir", IRS)
def test_checkpoints_move_between_plain_and_transpiled_programs(ir, tmp_path):
    """A checkpoint a plain program saved loads into the transpiled one, and back: the engine op's
    placeholder outputs add nothing to what paddle.static.save writes or load expects."""
    def fresh():
        with paddle.utils.unique_name.guard():
            return build_program("mnist_mlp", "sgd")

    with ir_guard(ir):
        exe = paddle.static.Executor(paddle.CPUPlace())
        main, startup, _, loss = fresh()
        with paddle.static.scope_guard(paddle.static.Scope()):
            exe.run(startup)
            paddle.static.save(main, str(tmp_path / "plain"))
            paddle_ngraph.transpile(main)
            xb, yb = shard(x_all, y_all, 16, 0, 1, 0)
            exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])
            names = parameter_names(main)
            trained = {n: np.array(paddle.static.global_scope().find_var(n).get_tensor()) for n in names}
            paddle.static.save(main, str(tmp_path / "transpiled"))
            paddle.static.load(main, str(tmp_path / "plain"))
        plain, plain_startup, _, _ = fresh()
        with paddle.static.scope_guard(paddle.static.Scope()):
            exe.run(plain_startup)
            paddle.static.load(plain, str(tmp_path / "transpiled"))
            for n in names:
                np.testing.assert_array_equal(np.array(paddle.static.global_scope().find_var(n).get_tensor()),
                                              trained[n])


@pytest.mark.parametrize("ir", IRS)
def test_unused_engine_outputs_give_the_garbage_collector_nothing_per_slot(ir):
    """Paddle's executor frees each result after its last reader on a garbage collector thread it
    wakes per free: a segment that gives Paddle one value (the loss) runs the operator's one-slot
    size (its value doubles as the ordering token), not the 16-slot one with 15 empty results a step."""
    with ir_guard(ir):
        main, startup, _, loss = build_program("mnist_mlp", "sgd")
        with paddle.static.scope_guard(paddle.static.Scope()):
            paddle.static.Executor(paddle.CPUPlace()).run(startup)
            paddle_ngraph.transpile(main)
        if ir == "pir":
            ops = [op for op in main.global_block().ops if is_engine_op(op.name())]
            assert [op.name() for op in ops] == ["custom_op.ngraph_engine_one"]
            assert len(ops[0].results()) == 1
        else:
            ops = [op for op in main.global_block().ops if is_engine_op(op.type)]
            assert [op.type for op in ops] == ["ngraph_engine_one"]
            assert ops[0].output_names == ["Out0"]


@pytest.mark.parametrize("ir", IRS)
def test_segments_with_many_values_take_the_large_operator_and_share_one_placeholder(ir):
    """More values than the small size holds: the 16-slot operator; in a legacy program its unused
    slots share one variable (one free a step), in PIR each is a result of its own."""
    with ir_guard(ir):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [-1, 784], "float32")
            y = paddle.static.data("y", [-1, 1], "int64")
            logits = paddle.nn.Linear(784, 10)(x)
            loss = paddle.nn.functional.cross_entropy(logits, y).mean()
            paddle.optimizer.SGD(0.03).minimize(loss)
        with paddle.static.scope_guard(paddle.static.Scope()):
            exe = paddle.static.Executor(paddle.CPUPlace())
            exe.run(startup)
            paddle_ngraph.transpile(main, fetch_list=[logits])
            xb, yb = shard(x_all, y_all, 16, 0, 1, 0)
            out_loss, out_logits = exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss, logits])
        assert np.isfinite(out_loss) and out_logits.shape == (16, 10)
        if ir == "pir":
            assert [op.name() for op in main.global_block().ops if is_engine_op(op.name())] == \
                ["custom_op.ngraph_engine"]
        else:
            op = next(op for op in main.global_block().ops if is_engine_op(op.type))
            assert op.type == "ngraph_engine"
            names = [op.output(f"Out{slot}")[0] for slot in range(16)]
            # Three values (the matmul and the loss's input for the kept add and mean, the bias as the
            # forward read it for the add), the ordering token, one shared placeholder.
            assert len(set(names)) == 5, names
            assert "linear_0.b_0@ngraph_read_0" in names


def test_feed_with_wrong_shape_names_the_variable():
    main, startup, _, loss = build_program("mnist_mlp", "sgd")
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        paddle_ngraph.transpile(main)
        with pytest.raises(Exception, match="input 'x': shape \\[4, 700\\]"):
            exe.run(main, feed={"x": np.zeros((4, 700), np.float32), "y": np.zeros((4, 1), np.int64)},
                    fetch_list=[loss])


def test_unknown_hierarchical_mode_is_a_config_error():
    from paddle_ngraph.errors import ConfigError

    main, _, _, _ = build_program("mnist_mlp", "sgd", lr=0.03)
    with pytest.raises(ConfigError, match="transpile: unknown hierarchical 'maybe'; valid: auto, on, off"):
        paddle_ngraph.transpile(main, hierarchical="maybe")


def test_compress_with_zero_stage_1_is_a_config_error_naming_both():
    from paddle_ngraph.errors import ConfigError

    main, _, _, _ = build_program("mnist_mlp", "adam", lr=0.03)
    with pytest.raises(ConfigError, match="compress: 'bf16' cannot be combined with zero_stage 1"):
        paddle_ngraph.transpile(main, compress="bf16", zero_stage=1)


def _weighted_nll(transpiled, backend):
    """A loss reading a constant that an in-place op fills (NLLLoss's class weights: full, then
    assign_value_ in PIR, whose result bears the name of full's); the loss stays a Paddle op."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        paddle.seed(4)
        x = paddle.static.data("x", [6, 5], "float32")
        y = paddle.static.data("y", [6], "int64")
        weight = paddle.to_tensor(np.array([1, 2, 0.5, 1, 3], np.float32))
        scores = paddle.nn.functional.log_softmax(paddle.nn.Linear(5, 5)(x))
        loss = paddle.nn.NLLLoss(weight=weight, ignore_index=2)(scores, y)
        paddle.optimizer.SGD(0.5).minimize(loss)
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(paddle.static.Scope()):
        exe.run(startup)
        if transpiled:
            paddle_ngraph.transpile(main, backend=backend)
        rng = np.random.default_rng(0)
        xb, yb = rng.standard_normal((6, 5)).astype("float32"), rng.integers(0, 5, 6).astype("int64")
        return [float(exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])[0]) for _ in range(3)]


@pytest.mark.parametrize("ir", IRS)
def test_loss_reading_a_constant_filled_in_place(ir, backend):
    with ir_guard(ir):
        ref = _weighted_nll(False, backend)
        got = _weighted_nll(True, backend)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert len(set(ref)) == 3  # it trains
