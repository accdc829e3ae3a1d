"""examples/fleet_mnist_mlp.py (a plain fleet script plus `import paddle_ngraph` and
`strategy.ngraph = True`) on 2 ranks, under mpirun and paddle.distributed.launch:

- the mean of the ranks' losses equals, step by step, the loss of the same model trained
  without fleet in one process on the concatenated batch (rtol 1e-5);
- ``paddle.static.save`` writes identical parameters on both ranks, equal to the reference's.

And a bad configuration fails on every rank by itself, quickly, with the message. Under
paddle.distributed.launch a second program transpiled after fleet's, in the same process, runs
on fleet's transport (one ccl connection per process), both as Paddle alone.
"""
import importlib.util
import json
import os
import pickle
import re
import time

import numpy as np
import paddle
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

from ranks import run_ranks  # noqa: E402

from paddle_ngraph.distributed.ccl import available as ccl_available  # noqa: E402

EXAMPLE = os.path.join(ROOT, "examples", "fleet_mnist_mlp.py")
BAD_CONFIG_WORKER = os.path.join(HERE, "bad_config_worker.py")
STEPS, BATCH, LR, SEED, NRANKS = 12, 16, 0.03, 1, 2
ARGS = ["--steps", STEPS, "--batch-size", BATCH, "--lr", LR, "--seed", SEED, "--log-every", 1]


def load_example():
    spec = importlib.util.spec_from_file_location("fleet_mnist_mlp", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_REFERENCE = {}


def reference(legacy: bool):
    """The example's model with a plain optimizer, no fleet, one process, global batch."""
    if legacy in _REFERENCE:
        return _REFERENCE[legacy]
    example = load_example()
    paddle.enable_static()
    guard = paddle.pir_utils.OldIrGuard() if legacy else paddle.pir_utils.IrGuard()
    with guard:
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            paddle.seed(SEED)
            loss = example.build_model()
            paddle.optimizer.SGD(learning_rate=LR).minimize(loss)
        scope = paddle.static.Scope()
        exe = paddle.static.Executor(paddle.CPUPlace())
        x, y = example.load_data()
        losses = []
        with paddle.static.scope_guard(scope):
            exe.run(startup)
            for step in range(STEPS):
                xb, yb = example.shard(x, y, BATCH * NRANKS, 0, 1, step)
                losses.append(float(exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])[0]))
            names = ["linear_0.w_0", "linear_0.b_0", "linear_1.w_0", "linear_1.b_0"]
            params = {n: np.array(scope.find_var(n).get_tensor()) for n in names}
    _REFERENCE[legacy] = (np.array(losses), params)
    return _REFERENCE[legacy]


def rank_losses(output: str) -> np.ndarray:
    found = {}
    for rank, step, value in re.findall(r"\[rank (\d+)\] step (\d+) loss (\S+)", output):
        found[(int(rank), int(step))] = float(value)
    missing = [(r, s) for r in range(NRANKS) for s in range(STEPS) if (r, s) not in found]
    assert not missing, f"no loss printed for (rank, step) {missing[:5]}...\n{output[-3000:]}"
    return np.array([[found[(r, s)] for s in range(STEPS)] for r in range(NRANKS)])


def check(output: str, save_dir, legacy: bool):
    ref_losses, ref_params = reference(legacy)
    losses = rank_losses(output)
    assert not np.allclose(losses[0], losses[1]), "both ranks trained on the same shard"
    # each rank's loss is the mean over its shard; their mean is the loss of the global batch
    np.testing.assert_allclose(losses.mean(axis=0), ref_losses, rtol=1e-5)
    saved = []
    for rank in range(NRANKS):
        with open(os.path.join(save_dir, f"rank{rank}", "model.pdparams"), "rb") as f:
            saved.append(pickle.load(f))
    assert sorted(saved[0]) == sorted(saved[1]) == sorted(ref_params)
    for name in ref_params:
        np.testing.assert_array_equal(saved[1][name], saved[0][name], err_msg=f"{name} differs between ranks")
        np.testing.assert_allclose(saved[0][name], ref_params[name], rtol=1e-5, atol=1e-7, err_msg=name)


@pytest.mark.distributed
@pytest.mark.parametrize("ir", ["pir", "legacy"])
def test_example_under_mpirun_equals_one_process_on_the_concatenated_batch(tmp_path, ir):
    extra = ["--legacy"] if ir == "legacy" else []
    proc = run_ranks(EXAMPLE, NRANKS, *ARGS, "--save", tmp_path, *extra)
    check(proc.stdout, tmp_path, legacy=ir == "legacy")


@pytest.mark.distributed
def test_example_with_zero_stage_1_from_the_environment_equals_one_process(tmp_path):
    env = {"PADDLE_NGRAPH_ZERO_STAGE": "1", "PADDLE_NGRAPH_LOG_LEVEL": "INFO"}
    proc = run_ranks(EXAMPLE, NRANKS, *ARGS, "--save", tmp_path, env=env)
    assert len(re.findall(r"zero_stage 1", proc.stdout + proc.stderr)) == NRANKS, proc.stderr[-3000:]
    check(proc.stdout, tmp_path, legacy=False)


@pytest.mark.distributed
@pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")
def test_example_under_paddle_launch_equals_one_process_on_the_concatenated_batch(tmp_path):
    logs = run_ranks(EXAMPLE, NRANKS, *ARGS, "--save", tmp_path, launcher="launch").output
    check(logs, tmp_path, legacy=False)


@pytest.mark.distributed
@pytest.mark.parametrize("configs,env,message", [
    ('{"transport": "tcp"}', {},
     "ConfigError: strategy.ngraph_configs: unknown transport 'tcp'; valid: auto, mpi, ccl, mlsl, null"),
    ('{"bucket_size": 1}', {},
     "UnknownConfigKeyError: strategy.ngraph_configs: unknown key(s) 'bucket_size'; valid keys: accumulate_avg, "
     "accumulate_steps, backend, bucket_mb,"),
    ("{}", {"PADDLE_NGRAPH_BUCKET_MB": "big"},
     "ConfigError: environment variable PADDLE_NGRAPH_BUCKET_MB='big': 'bucket_mb' must be a number"),
], ids=["transport", "key", "env"])
def test_a_bad_config_fails_on_every_rank_under_mpirun(tmp_path, configs, env, message):
    # Do not let mpirun kill the other rank when the first fails: each must fail by itself.
    env = dict(env, PRTE_MCA_state_base_error_non_zero_exit="0")
    start = time.monotonic()
    proc = run_ranks(BAD_CONFIG_WORKER, NRANKS, "--configs", configs, "--record", tmp_path, env=env, timeout=120,
                     check=False)
    assert time.monotonic() - start < 60, "a bad configuration must fail fast"
    for rank in range(NRANKS):
        path = tmp_path / f"rank{rank}.json"
        assert path.exists(), f"rank {rank} left no record\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        result = json.loads(path.read_text())
        assert result["code"] != 0, f"rank {rank} exited 0\n{result['output'][-2000:]}"
        assert message in result["output"], f"rank {rank}:\n{result['output'][-2000:]}"
        one_message = re.findall(r"\w*Config(?:Key)?Error:", result["output"])
        assert len(one_message) == 1, result["output"][-3000:]  # one clear message


# --- one transport per process: fleet's, then a second transpile, under paddle.distributed.launch ---

SECOND_STEPS, SECOND_FEATURES, SECOND_ROWS = 3, 5, 8  # rows per rank of each step's global batch


def _second_model():
    """(main, startup, loss, parameter names) of a small regression net with SGD, in its own
    program; the same names in every process."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, SECOND_FEATURES], "float32")
        y = paddle.static.data("y", [-1, 1], "float32")
        hidden = paddle.nn.Linear(SECOND_FEATURES, 4)
        out = paddle.nn.Linear(4, 1)
        loss = paddle.nn.functional.mse_loss(out(paddle.tanh(hidden(x))), y)
        names = [p.name for p in (hidden.weight, hidden.bias, out.weight, out.bias)]
    return main, startup, loss, names


def _second_batch(step: int):
    rng = np.random.default_rng(50 + step)
    x = rng.standard_normal((SECOND_ROWS * NRANKS, SECOND_FEATURES)).astype(np.float32)
    return x, (x.sum(axis=1, keepdims=True) * 0.3 - 0.2).astype(np.float32)


def fleet_program_then_a_second_transpile():
    """On a rank of paddle.distributed.launch: a program through fleet's strategy.ngraph (its
    minimize connects the job's ccl transport), then a second program transpiled with the default
    transport in the same process, as elastic's state.transpile does after fleet; steps of both."""
    import paddle.distributed.fleet as fleet

    import paddle_ngraph
    from paddle_ngraph.distributed import make_transport
    from paddle_ngraph.transpiler import engines_of

    paddle.enable_static()
    rank = int(os.environ["PADDLE_TRAINER_ID"])
    exe = paddle.static.Executor(paddle.CPUPlace())
    fleet.init(is_collective=True)
    strategy = fleet.DistributedStrategy()
    strategy.ngraph, strategy.ngraph_configs = True, {"backend": "CPU"}
    with paddle.pir_utils.IrGuard():
        first, first_startup, first_loss, _ = _second_model()
        with paddle.static.program_guard(first, first_startup):
            fleet.distributed_optimizer(paddle.optimizer.SGD(learning_rate=LR), strategy).minimize(first_loss)
        second, second_startup, second_loss, names = _second_model()
        with paddle.static.program_guard(second, second_startup):
            paddle.optimizer.SGD(learning_rate=LR).minimize(second_loss)
        paddle_ngraph.transpile(second, backend="CPU")
        transports = {engines_of(p)[0].transport for p in (first, second)}
        first_scope, second_scope = paddle.static.Scope(), paddle.static.Scope()
        for step in range(SECOND_STEPS):
            x, y = _second_batch(step)
            rows = slice(rank * SECOND_ROWS, (rank + 1) * SECOND_ROWS)
            feed = {"x": x[rows], "y": y[rows]}
            for program, startup, loss, scope in ((first, first_startup, first_loss, first_scope),
                                                  (second, second_startup, second_loss, second_scope)):
                with paddle.static.scope_guard(scope):
                    if step == 0:
                        paddle.seed(SEED)  # the startup's random initializers draw when it runs
                        exe.run(startup)
                    exe.run(program, feed=feed, fetch_list=[loss])
        params = [{n: np.array(scope.find_var(n).get_tensor()) for n in names} for scope in (first_scope, second_scope)]
    return {"transports": len(transports), "same_as_make_transport": make_transport("ccl") in transports,
            "params": params}


def _second_reference():
    """The same model with Paddle alone, one process, the global batch of every step."""
    paddle.enable_static()
    with paddle.pir_utils.IrGuard():
        main, startup, loss, names = _second_model()
        with paddle.static.program_guard(main, startup):
            paddle.optimizer.SGD(learning_rate=LR).minimize(loss)
        scope, exe = paddle.static.Scope(), paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(scope):
            paddle.seed(SEED)
            exe.run(startup)
            for step in range(SECOND_STEPS):
                x, y = _second_batch(step)
                exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss])
            return {n: np.array(scope.find_var(n).get_tensor()) for n in names}


@pytest.mark.distributed
@pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")
def test_under_paddle_launch_a_second_transpile_after_fleet_reuses_its_transport():
    """A second connect of the ccl transport would open a second TCPStore server on rank 0's
    trainer endpoint, which the first holds: Paddle's libuv store aborts the process on that (it
    did, in elastic.run's transpile of a program built through fleet). Both programs run on the
    one transport, and train as Paddle alone on the concatenated batch."""
    run = run_ranks(fleet_program_then_a_second_transpile, NRANKS, launcher="launch", timeout=240)
    reference = _second_reference()
    for rank, result in enumerate(run.results):
        assert result["transports"] == 1 and result["same_as_make_transport"], run.report(f"rank {rank}")
        for index, which in enumerate(("fleet's program", "the second program")):
            params, rank0 = result["params"][index], run.results[0]["params"][index]
            for name, value in reference.items():
                np.testing.assert_array_equal(params[name], rank0[name], err_msg=f"rank {rank}, {which}: {name}")
                np.testing.assert_allclose(params[name], value, rtol=1e-5, atol=1e-7,
                                           err_msg=f"rank {rank}, {which}: {name}")
