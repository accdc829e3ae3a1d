"""sync_batch_norm: N ranks with per-rank batch B, batch-norm statistics over all ranks, train as one
process on the concatenated batch N x B: parameters and running mean/variance within 1e-5 (tensor
level), identical on every rank. Real mpirun (and paddle.distributed.launch for the ccl transport),
both IRs, through transpile(..., sync_batch_norm=True) and through Paddle's own sync_batch_norm ops.
The one-process conversion is tests/frontend/test_sync_batch_norm_conversion.py."""
import os

import numpy as np
import pytest

from dp_runs import References, Run, Runs, declare_runs
from harness import assert_trained_close
from paddle_ngraph.distributed.ccl import available as ccl_available
from ranks import run_ranks

# Every test here starts ranks (tests/ranks.py).
pytestmark = pytest.mark.distributed

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "sync_bn_worker.py")
LR = {"sgd": 0.1, "momentum": 0.05}  # as sync_bn_worker.py
OPTIMIZERS = ("sgd", "momentum")
EQUIVALENCE = [
    ("conv_bn", "pir", "option", "CPU"), ("conv_bn", "legacy", "option", "CPU"),
    ("mlp_bn", "pir", "option", "CPU"), ("mlp_bn", "legacy", "option", "CPU"),
    ("conv_bn", "pir", "option", "INTERPRETER"),
    # Paddle's own sync_batch_norm ops (SyncBatchNorm.convert_sync_batchnorm), no option needed.
    ("conv_bn", "pir", "ops", "CPU"), ("mlp_bn", "legacy", "ops", "CPU")]
# Every run of this module: the mpirun ones in one job.
RUNS = {
    **{"-".join(case): Run(2, ("--model", case[0], "--ir", case[1], "--mode", case[2], "--backend", case[3]))
       for case in EQUIVALENCE},
    "zero1": Run(2, ("--model", "conv_bn", "--mode", "option", "--zero-stage", 1)),
    "none": Run(2, ("--model", "mlp_bn", "--mode", "none", "--optimizers", "sgd")),
    "ccl": Run(2, ("--model", "conv_bn", "--ir", "pir", "--mode", "option"), launcher="launch"),
}
REFERENCES = References(WORKER)
for _model in ("conv_bn", "mlp_bn"):
    for _ir in ("pir", "legacy"):
        REFERENCES.declare("--world", 2, "--ir", _ir, "--model", _model)


declare_runs(RUNS, worker=WORKER)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return Runs(tmp_path_factory.mktemp("sync_batch_norm"), RUNS, worker=WORKER)


def reference(tmp, world, ir, model):
    """Plain Paddle, one process, the whole global batch (``tmp``: unused, the session's cache holds it)."""
    return REFERENCES("--world", world, "--ir", ir, "--model", model)


def load(ref_dir, run_dir, nranks, optimizer):
    ref = np.load(ref_dir / f"{optimizer}_rank0.npz")
    ranks = [np.load(run_dir / f"{optimizer}_rank{r}.npz") for r in range(nranks)]
    names = [k for k in ref.files if k != "losses"]
    assert sorted(names) == sorted(k for k in ranks[0].files if k != "losses")
    assert sum(".w_1" in n or ".w_2" in n for n in names) >= 2  # running mean and variance are compared
    return ref, ranks, names


def check(ref_dir, run_dir, nranks):
    for optimizer in OPTIMIZERS:
        ref, ranks, names = load(ref_dir, run_dir, nranks, optimizer)
        for r in ranks[1:]:
            for name in names:
                np.testing.assert_array_equal(r[name], ranks[0][name], err_msg=f"{optimizer}: {name} differs between ranks")
        # Each rank's loss is the mean over its part; with equal parts their mean is the global batch's.
        np.testing.assert_allclose(np.mean([r["losses"] for r in ranks], axis=0), ref["losses"], rtol=1e-5)
        for name in names:
            assert_trained_close(ranks[0][name], ref[name], optimizer, f"{optimizer}: {name}", lr=LR[optimizer],
                                 elementwise=False)


@pytest.mark.parametrize("model,ir,mode,backend", EQUIVALENCE)
def test_two_ranks_equal_one_process_on_concatenated_batch(tmp_path, runs, model, ir, mode, backend):
    ref = reference(tmp_path, 2, ir, model)
    out = runs[f"{model}-{ir}-{mode}-{backend}"]
    check(ref, out, 2)


def test_with_zero_1(tmp_path, runs):
    """ZeRO-1 shards the gradients (scale and bias included); the statistics stay AllReduces."""
    ref = reference(tmp_path, 2, "pir", "conv_bn")
    out = runs["zero1"]
    check(ref, out, 2)


def test_without_it_each_rank_keeps_its_own_statistics(tmp_path, runs):
    """The control: plain batch norm on 2 ranks normalizes with each rank's statistics, so the
    running statistics differ between ranks and from one process on the whole batch."""
    ref = reference(tmp_path, 2, "pir", "mlp_bn")
    out = runs["none"]
    ref = np.load(ref / "sgd_rank0.npz")
    ranks = [np.load(out / f"sgd_rank{r}.npz") for r in range(2)]
    mean = "batch_norm1d_0.w_1"
    assert not np.array_equal(ranks[0][mean], ranks[1][mean])
    assert np.linalg.norm(ranks[0][mean] - ref[mean]) > 1e-3 * np.linalg.norm(ref[mean])


@pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")
def test_ccl_under_paddle_launch_equals_one_process(tmp_path, runs):
    ref = reference(tmp_path, 2, "pir", "conv_bn")
    out = runs["ccl"]
    check(ref, out, 2)


def compiled_program_sync_batch_norm(out):
    """Conv + batch norm (legacy, SGD), as Paddle's dist_fleet_sync_batch_norm test model asks for
    sync: ``CompiledProgram(main, build_strategy)`` with ``build_strategy.sync_batch_norm``. On each
    rank: the program transpiled without sync_batch_norm, run that way (what it raised), then
    transpiled with it, one step (the running mean); on rank 0 also plain Paddle, one process, on both
    ranks' inputs concatenated."""
    import paddle

    import paddle_ngraph
    from paddle_ngraph.distributed import make_transport
    from paddle_ngraph.errors import ConfigError
    from harness import ir_guard

    paddle.enable_static()
    transport = make_transport()
    inputs = [np.random.RandomState(100 + r).uniform(-1, 2, (4, 3, 4, 4)).astype("float32") for r in range(2)]

    def build():
        main, startup = paddle.static.Program(), paddle.static.Program()
        main.random_seed = startup.random_seed = 10
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            x = paddle.static.data("input", [-1, 3, 4, 4], "float32")
            h = paddle.nn.Conv2D(3, 8, 1, bias_attr=False)(x)
            bn = paddle.nn.BatchNorm(8, moving_mean_name="bn_moving_mean", moving_variance_name="bn_moving_variance")
            loss = paddle.mean(paddle.nn.functional.relu(bn(h)))
            paddle.optimizer.SGD(0.1).minimize(loss)
        return main, startup, loss

    def compiled(main):
        build_strategy = paddle.static.BuildStrategy()
        build_strategy.sync_batch_norm = True
        return paddle.static.CompiledProgram(main, build_strategy=build_strategy)

    report = {}
    with ir_guard("legacy"):
        for sync in (False, True):
            main, startup, loss = build()
            with paddle.static.scope_guard(paddle.static.Scope()):
                exe = paddle.static.Executor(paddle.CPUPlace())
                exe.run(startup)
                paddle_ngraph.transpile(main, transport=transport, sync_batch_norm=sync)
                try:
                    exe.run(compiled(main), feed={"input": inputs[transport.rank]}, fetch_list=[loss])
                    report[sync] = np.array(paddle.static.global_scope().find_var("bn_moving_mean").get_tensor())
                except ConfigError as e:
                    report[sync] = str(e)
            paddle_ngraph.release(main)
        if transport.rank == 0:
            main, startup, loss = build()
            with paddle.static.scope_guard(paddle.static.Scope()):
                exe = paddle.static.Executor(paddle.CPUPlace())
                exe.run(startup)
                exe.run(main, feed={"input": np.concatenate(inputs)}, fetch_list=[loss])
                report["paddle"] = np.array(paddle.static.global_scope().find_var("bn_moving_mean").get_tensor())
    return report


def test_compiled_program_asking_sync_batch_norm_is_honoured_or_refused(tmp_path):
    """build_strategy.sync_batch_norm reaches Paddle only as a graph pass of CompiledProgram, which
    the engine never sees; it was ignored, and each rank normalized with its own batch statistics.
    Without sync_batch_norm at transpile it is refused (ConfigError); with it the running mean is
    the one process's on the concatenated batch."""
    reports = run_ranks(compiled_program_sync_batch_norm, 2, tmp_path).results
    for report in reports:
        assert isinstance(report[False], str) and "sync_batch_norm" in report[False], report[False]
        np.testing.assert_allclose(report[True], reports[0]["paddle"], rtol=1e-6, atol=1e-7)
