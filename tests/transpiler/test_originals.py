"""Evaluation clones, inference export and fetches of a transpiled program (transpiler/originals.py):
what Paddle derives from a transpiled program is plain Paddle, and predicts what the trained
program would."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

import paddle_ngraph
from paddle_ngraph.errors import ConversionError
from paddle_ngraph.transpiler.engine_op import is_engine_op

from harness import IRS, ir_guard

STEPS, BATCH = 4, 16


def build():
    """A two-layer MLP with dropout (whose evaluation behaviour differs from training) and SGD.
    Returns the programs, the feed and prediction handles, and a forward-only clone made before
    minimize (in PIR, whose Program.clone has no for_test, it keeps dropout in training mode)."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        paddle.seed(7)
        x = paddle.static.data("x", [None, 6], "float32")
        y = paddle.static.data("y", [None, 1], "int64")
        hidden = F.dropout(F.relu(paddle.nn.Linear(6, 16)(x)), 0.25)
        logits = paddle.nn.Linear(16, 3)(hidden)
        loss = paddle.mean(F.cross_entropy(logits, y))
        if paddle.framework.in_pir_mode():
            mapping = paddle.pir.IrMapping()
            evaluation = main.clone(mapping)
            eval_logits = mapping.look_up(logits)
        else:
            evaluation, eval_logits = main.clone(for_test=True), logits.name
        paddle.optimizer.SGD(0.2).minimize(loss)
    return main, startup, x, y, logits, loss, evaluation, eval_logits


def data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((BATCH, 6)).astype("float32"), rng.integers(0, 3, (BATCH, 1)).astype("int64")


def numpy_forward(program, xb):
    """The MLP's evaluation (dropout off) computed from the scope's current parameters."""
    ops = program.global_block().ops
    if hasattr(ops[0], "name") and callable(ops[0].name):
        names = [op.attrs()["parameter_name"] for op in ops if op.name() == "builtin.parameter"]
    else:
        names = [p.name for p in program.all_parameters()]
    scope = paddle.static.global_scope()
    by_shape = {np.array(scope.find_var(n).get_tensor()).shape: np.array(scope.find_var(n).get_tensor())
                for n in names}
    hidden = np.maximum(xb @ by_shape[(6, 16)] + by_shape[(16,)], 0)
    return hidden @ by_shape[(16, 3)] + by_shape[(3,)]


def train(ir, backend):
    with ir_guard(ir):
        main, startup, x, y, logits, loss, evaluation, eval_logits = build()
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        paddle_ngraph.transpile(main, backend=backend)
        xb, yb = data()
        before = numpy_forward(main, xb)
        for step in range(STEPS):
            exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])
        after = numpy_forward(main, xb)
        assert not np.allclose(before, after), "the program did not train"
        return main, exe, x, y, logits, loss, evaluation, eval_logits, after


def _eval(exe, program, fetch, xb, yb):
    return np.array(exe.run(program, feed={"x": xb, "y": yb}, fetch_list=[fetch])[0])


@pytest.mark.parametrize("ir", IRS)
def test_inference_export_is_plain_paddle_and_predicts_as_trained(ir, backend, tmp_path):
    main, exe, x, y, logits, loss, evaluation, eval_logits, expected = train(ir, backend)
    prefix = str(tmp_path / "model")
    with ir_guard(ir):
        paddle.static.save_inference_model(prefix, [x], [logits], exe, program=main)
    xb, _ = data()
    np.save(tmp_path / "x.npy", xb)
    # A fresh process without paddle_ngraph loads and runs it.
    script = textwrap.dedent(f"""
        import sys, json, numpy as np, paddle
        paddle.enable_static()
        {"guard = paddle.pir_utils.OldIrGuard()" if ir == "legacy" else "guard = paddle.pir_utils.IrGuard()"}
        with guard:
            exe = paddle.static.Executor(paddle.CPUPlace())
            program, feeds, fetches = paddle.static.load_inference_model({prefix!r}, exe)
            ops = [op.type for op in program.global_block().ops] if {ir == "legacy"} else \\
                [op.name() for op in program.global_block().ops]
            out = exe.run(program, feed={{feeds[0]: np.load({str(tmp_path / 'x.npy')!r})}}, fetch_list=fetches)[0]
        np.save({str(tmp_path / 'out.npy')!r}, out)
        assert "paddle_ngraph" not in sys.modules
        print(json.dumps(ops))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, GLOG_minloglevel="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    ops = proc.stdout.strip().splitlines()[-1]
    assert "ngraph_engine" not in ops and ("matmul" in ops or "mul" in ops)
    assert not any(word in ops for word in ("_grad", "sgd"))
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, rtol=1e-5, atol=1e-6)


def test_legacy_clone_for_test_after_transpile_evaluates_without_training(backend):
    main, exe, x, y, logits, loss, evaluation, eval_logits, expected = train("legacy", backend)
    with ir_guard("legacy"):
        clone = main.clone(for_test=True)
        types = [op.type for op in clone.global_block().ops]
        assert not any(map(is_engine_op, types)) and "sgd" not in types
        dropout = [op for op in clone.global_block().ops if op.type == "dropout"]
        assert dropout and all(op.attr("is_test") for op in dropout)
        scope = paddle.static.global_scope()
        names = [p.name for p in main.all_parameters()]
        params = {n: np.array(scope.find_var(n).get_tensor()) for n in names}
        xb, yb = data()
        got = _eval(exe, clone, logits.name, xb, yb)
        again = _eval(exe, clone, logits.name, xb, yb)
        for n in names:  # evaluating trains nothing
            np.testing.assert_array_equal(np.array(scope.find_var(n).get_tensor()), params[n])
    np.testing.assert_array_equal(got, again)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)  # float32 against float32 numpy
    # A plain clone is the training program itself (its engine op included).
    with ir_guard("legacy"):
        assert any(is_engine_op(op.type) for op in main.clone().global_block().ops)


@pytest.mark.parametrize("ir", IRS)
def test_fetching_a_value_the_engine_computed_inside_is_a_clear_error(ir):
    main, exe, x, y, logits, loss, evaluation, eval_logits, _ = train(ir, "INTERPRETER")
    xb, yb = data()
    with ir_guard(ir), pytest.raises(ConversionError, match="inside an ngraph_engine segment.*fetch_list"):
        exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss, logits])
    with ir_guard(ir):  # nothing lost: the program still trains
        exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])


def test_fetch_through_a_compiled_program_is_checked_too():
    """Paddle's fleet scripts run ``exe.run(CompiledProgram(main, build_strategy), ...)``: the
    program it wraps is the transpiled one, and a value only an engine computed came back as None."""
    main, exe, x, y, logits, loss, evaluation, eval_logits, _ = train("legacy", "INTERPRETER")
    xb, yb = data()
    with ir_guard("legacy"):
        compiled = paddle.static.CompiledProgram(main, build_strategy=paddle.static.BuildStrategy())
        with pytest.raises(ConversionError, match=f"{logits.name} is computed inside an ngraph_engine segment.*"
                                                  f"fleet's strategy.ngraph.*clone before minimize"):
            exe.run(compiled, feed={"x": xb, "y": yb}, fetch_list=[loss, logits])
        before = numpy_forward(main, xb)
        (got,) = exe.run(compiled, feed={"x": xb, "y": yb}, fetch_list=[loss])
        assert np.isfinite(got).all() and not np.allclose(numpy_forward(main, xb), before)  # it trains


@pytest.mark.parametrize("ir", IRS)
def test_a_value_named_at_transpile_is_fetchable(ir):
    with ir_guard(ir):
        main, startup, x, y, logits, loss, evaluation, eval_logits = build()
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        xb, yb = data()
        expected = _eval(exe, evaluation, eval_logits, xb, yb)
        paddle_ngraph.transpile(main, backend="INTERPRETER", fetch_list=[logits])
        # Dropout is on in the training program: its logits differ from the evaluation's, but are real.
        got_loss, got_logits = exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss, logits])
    assert np.asarray(got_logits).shape == expected.shape and np.isfinite(got_logits).all()
    assert float(got_loss) > 0


def _fetched_per_step(ir, transpiled, backend):
    """Losses, named logits and a metric reading a parameter directly (a forward sink Paddle keeps),
    for three SGD steps from the same start."""
    with ir_guard(ir):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            paddle.seed(3)
            x = paddle.static.data("x", [8, 6], "float32")
            y = paddle.static.data("y", [8, 1], "int64")
            hidden = paddle.nn.Linear(6, 6)
            logits = paddle.nn.Linear(6, 3)(F.relu(hidden(x)))
            loss = paddle.mean(F.cross_entropy(logits, y))
            weight_mean = paddle.mean(hidden.weight)  # a metric of the parameter itself
            paddle.optimizer.SGD(0.5).minimize(loss)
        exe = paddle.static.Executor(paddle.CPUPlace())
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            exe.run(startup)
            if transpiled:
                paddle_ngraph.transpile(main, backend=backend, fetch_list=[logits])
            rng = np.random.default_rng(0)
            xb, yb = rng.standard_normal((8, 6)).astype("float32"), rng.integers(0, 3, (8, 1)).astype("int64")
            return [[np.asarray(v) for v in exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss, logits, weight_mean])]
                    for _ in range(3)]


@pytest.mark.parametrize("backend", ["INTERPRETER", "CPU"])
@pytest.mark.parametrize("ir", IRS)
def test_fetched_values_reading_a_parameter_are_those_before_the_update(ir, backend):
    """The producer of a value named at transpile (``logits = matmul + bias``) and a forward sink
    reading a parameter stay Paddle ops after the engine's segment, which updates the parameters in
    place: they read the segment's copy of what the forward read, not the updated variable."""
    ref = _fetched_per_step(ir, False, backend)
    got = _fetched_per_step(ir, True, backend)
    for step, (r, g) in enumerate(zip(ref, got)):
        for what, a, b in zip(("loss", "logits", "mean of the weight"), r, g):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=f"step {step}: {what}")
    assert not np.allclose(ref[0][2], ref[1][2])  # the weight changes between steps: the check can fail



def _collects_garbage(main, startup, feed, fetch_list) -> bool:
    """Transpiles ``main`` in a scope of its own and runs one step: whether the transpiled program
    keeps Paddle's garbage collection."""
    from paddle_ngraph.transpiler import originals

    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        paddle_ngraph.transpile(main)
        collects = originals.original_of(main).collect_garbage
        exe.run(main, feed=feed, fetch_list=fetch_list)
    paddle_ngraph.release(main)
    return collects


@pytest.mark.parametrize("collect", [False, True], ids=["few-paddle-values", "more-than-the-limit"])
def test_a_program_whose_paddle_ops_make_few_values_runs_without_paddles_garbage_collection(collect, monkeypatch):
    """Paddle's executor frees a value after its last reader when FLAGS_eager_delete_tensor_gb >= 0,
    which it reads when it builds a program's interpreter. A transpiled program whose Paddle ops make
    at most MAX_VALUES_WITHOUT_GARBAGE_COLLECTION values runs with it at -1 (a py_func, which Paddle
    runs inside exe.run, reads it), and the flag is Paddle's again after exe.run. Above the limit,
    nothing changes."""
    from paddle_ngraph.transpiler import originals

    flag = "FLAGS_eager_delete_tensor_gb"
    if collect:
        monkeypatch.setattr(originals, "MAX_VALUES_WITHOUT_GARBAGE_COLLECTION", 0)
    seen = []

    def record(value):
        seen.append(paddle.get_flags(flag)[flag])
        return np.array(value)

    with ir_guard("legacy"):
        main, startup, x, y, logits, loss, _, _ = build()
        with paddle.static.program_guard(main, startup):
            copy = main.global_block().create_var(name="recorded", dtype="float32", shape=[-1, 3])
            paddle.static.py_func(record, logits, copy)
        xb, yb = data()
        assert _collects_garbage(main, startup, {"x": xb, "y": yb}, [loss, "recorded"]) is collect
    assert seen == [0.0 if collect else -1.0]
    assert paddle.get_flags(flag)[flag] == 0.0


def test_a_program_with_control_flow_keeps_paddles_garbage_collection():
    """Sub-blocks make their values per iteration: such a program keeps Paddle's default."""
    with ir_guard("pir"):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [None, 4], "float32")
            h = paddle.nn.Linear(4, 4)(x)
            out = paddle.static.nn.cond(paddle.mean(h) > 0, lambda: h * 2, lambda: h - 1)
            loss = paddle.mean(out)
            paddle.optimizer.SGD(0.1).minimize(loss)
        assert _collects_garbage(main, startup, {"x": np.ones((2, 4), "float32")}, [loss]) is True
