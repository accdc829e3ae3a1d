"""The CPU backend's step plan (``StepPlan``, cython/cpu_runtime.pyx): after a step of the full path,
an engine runs the next steps with inputs of the same dtypes and shapes as one native object. It must
train exactly as the full path does, fall back to it whenever the inputs differ (a new batch size, a
bad feed), and hand values between segments as the full path does."""
import numpy as np
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph.transpiler import engines_of

import fallback_models as fm
from harness import IRS, assert_trained_close, ir_guard

# Batch sizes of consecutive steps: a plan per size, and back to an earlier size.
BATCHES = [8, 8, 8, 5, 5, 8, 8, 3, 8]


def batches(seed: int = 0):
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((b, fm.FEATURES)).astype("float32") for b in BATCHES]
    ys = [rng.integers(0, fm.CLASSES, (b, 1)).astype("int64") for b in BATCHES]
    return xs, ys


def train(xs, ys, transpile: bool, optimizer: str = "sgd"):
    """Losses and parameters after each step (logcumsumexp and its gradient, which the engine lacks,
    between the two Linear layers: three engine segments, the last handed the first's
    activations), and the engines of the program."""
    paddle.seed(1)
    main, startup, loss = fm.build("logcumsumexp", optimizer)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    losses, params = [], []
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        if transpile:
            paddle_ngraph.transpile(main, backend="CPU")
        for xb, yb in zip(xs, ys):
            losses.append(float(exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])[0]))
            params.append({n: np.array(scope.find_var(n).get_tensor()) for n in fm.parameter_names(main)})
    return losses, params, engines_of(main) if transpile else [], (main, scope, exe, loss)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("optimizer", ["sgd", "momentum"])
def test_plan_trains_as_paddle_across_batch_sizes(ir, optimizer):
    xs, ys = batches()
    with ir_guard(ir):
        ref_losses, ref_params, _, _ = train(xs, ys, transpile=False, optimizer=optimizer)
        losses, params, engines, _ = train(xs, ys, transpile=True, optimizer=optimizer)
    assert len(engines) == 3 and any(e.handed_in for e in engines)
    # Every engine ran every step, and each has a plan for the last step's inputs.
    assert [e.steps for e in engines] == [len(BATCHES)] * 3
    assert [e.updates for e in engines] == [len(BATCHES)] * 3
    assert all(e._plan is not None for e in engines)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-4, atol=1e-6)
    for step, (got, ref) in enumerate(zip(params, ref_params)):
        assert sorted(got) == sorted(ref)
        for name in got:
            assert_trained_close(got[name], ref[name], optimizer, f"{name} after step {step}", lr=0.1)


@pytest.mark.parametrize("ir", IRS)
def test_plan_runs_only_for_the_inputs_it_was_made_for(ir):
    """A plan does nothing for other inputs (``run`` returns None): the full path runs the step."""
    xs, ys = batches()
    with ir_guard(ir):
        _, _, engines, (main, scope, exe, loss) = train(xs[:2], ys[:2], transpile=True)
        first = engines[0]
        plan = first._plan
        arrays = [np.zeros((8, fm.FEATURES), np.float32)]
        codes = [10]  # Paddle's float32
        assert plan.run(arrays, codes) is None  # too few inputs
        steps = first.steps
        with paddle.static.scope_guard(scope):
            exe.run(main, feed={"x": xs[3], "y": ys[3]}, fetch_list=[loss])  # batch 5: a new plan
        assert first.steps == steps + 1 and first._plan is not plan


@pytest.mark.parametrize("ir", IRS)
def test_bad_input_after_planned_steps_names_the_variable(ir):
    """Paddle's executor checks feeds against their declaration; the engine checks what reaches it
    (here called as the operator calls it), with a plan as without one."""
    from paddle_ngraph.errors import ExecutionError

    xs, ys = batches()
    with ir_guard(ir):
        _, _, engines, (main, scope, exe, loss) = train(xs[:3], ys[:3], transpile=True)
        first = engines[0]
        assert first._plan is not None
        codes = {np.dtype("float32"): 10, np.dtype("int64"): 9}  # Paddle's dtype codes
        arrays = [np.zeros((8, fm.FEATURES + 1), np.float32) if name == "x"
                  else np.array(scope.find_var(name).get_tensor()) for name in first.input_names]
        arrays += [np.zeros((0,), np.float32)] * first.order_inputs
        with pytest.raises(ExecutionError, match=r"input 'x': shape \[8, 7\]"):
            first.run(arrays, [codes[a.dtype] for a in arrays])
        arrays[first.input_names.index("x")] = xs[0].astype(np.float64)
        with pytest.raises(ExecutionError, match="input 'x': dtype float64"):
            first.run(arrays, [11 if a.dtype == np.float64 else codes[a.dtype] for a in arrays])
