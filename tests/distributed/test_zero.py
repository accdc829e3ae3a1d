"""ZeRO stage 1 (zero_stage: 1): each rank keeps a slice of the optimizer state, and trains exactly
like plain data parallelism, and like one process on the concatenated batch.

Real mpirun, real processes. With 3 ranks the buckets do not divide evenly: the padding path.
"""
import os

import numpy as np
import pytest

from dp_runs import OPTIMIZERS, Run, Runs, check, declare_reference, declare_runs, run_reference
from paddle_ngraph.distributed.ccl import available as ccl_available
from ranks import run_ranks

# Every test here starts ranks (tests/ranks.py).
pytestmark = pytest.mark.distributed

EQUIVALENCE = [(2, "CPU"), (3, "CPU"), (2, "INTERPRETER")]
BITWISE = (("plain", 0, "on"), ("zero1", 1, "on"), ("zero1_mpi", 1, "off"))
ZERO1 = ("--bucket-mb", 0.5, "--steps", 10, "--zero-stage", 1)
# The runs of dp_worker.py (zero_worker.py's share a global scope: one job each); those with the
# same ranks and launcher train in one job.
RUNS = {
    **{f"equivalence-{n}-{backend}": Run(n, (*ZERO1, "--backend", backend)) for n, backend in EQUIVALENCE},
    **{f"bitwise-{name}": Run(2, ("--bucket-mb", 0.5, "--steps", 6, "--zero-stage", stage, "--shm-allreduce", shm))
       for name, stage, shm in BITWISE},
    "launch": Run(2, ZERO1, launcher="launch"),
}
for _n in (2, 3):
    declare_reference(_n, "pir", steps=10)


declare_runs(RUNS)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return Runs(tmp_path_factory.mktemp("zero"), RUNS)


@pytest.mark.parametrize("nranks,backend", EQUIVALENCE)
def test_zero1_equals_one_process_on_concatenated_batch(tmp_path, runs, nranks, backend):
    ref = run_reference(tmp_path, nranks, "pir", steps=10)
    out = runs[f"equivalence-{nranks}-{backend}"]
    for optimizer in OPTIMIZERS:
        check(ref, out, nranks, optimizer)


def test_zero1_equals_plain_data_parallel_bitwise_on_two_ranks(runs):
    """With 2 ranks a reduce-scatter adds the same two numbers as an allreduce: same bits, whether
    ZeRO-1's reduce-scatter and all-gather go over shared memory (the default) or over MPI's own."""
    for optimizer in OPTIMIZERS:
        plain, sharded, over_mpi = (np.load(runs[f"bitwise-{name}"] / f"{optimizer}_rank0.npz")
                                    for name in ("plain", "zero1", "zero1_mpi"))
        # Which path each run took ("native" is the communicator's description; shm_collectives counts
        # the run's AllReduce, ReduceScatter and AllGather over shared memory).
        assert str(plain["native"]) == "shared memory among the 2 ranks of the node"
        assert plain["shm_collectives"][0] > 0
        assert min(sharded["shm_collectives"][1:]) > 0, sharded["shm_collectives"]
        assert str(over_mpi["native"]).startswith("MPI_Allreduce on MPI_COMM_WORLD (no shared memory: switched off")
        assert max(over_mpi["shm_collectives"]) == 0
        for name in plain.files:
            if name not in ("native", "shm_collectives"):
                np.testing.assert_array_equal(sharded[name], plain[name], err_msg=f"{optimizer}: {name}")
                np.testing.assert_array_equal(over_mpi[name], plain[name], err_msg=f"{optimizer}: {name} (MPI)")


CHECKPOINT_STEP = 4


def train_checkpoint_and_resume_per_stage(out):
    """On every rank, plain data parallelism (ZeRO stage 0), then ZeRO-1, one after the other in
    one job, each in a scope of its own: {stage: train_checkpoint_and_resume's report}."""
    import paddle

    import paddle_ngraph
    from paddle_ngraph.distributed import make_transport

    paddle.enable_static()
    transport = make_transport()
    reports = {}
    for stage in (0, 1):
        os.makedirs(os.path.join(out, f"zero{stage}"), exist_ok=True)  # every rank makes it
        with paddle.static.scope_guard(paddle.static.Scope()):
            main_prog, reports[stage] = train_checkpoint_and_resume(os.path.join(out, f"zero{stage}"), stage,
                                                                    transport)
        paddle_ngraph.release(main_prog)  # its engines would count in the next stage's sharded state
    return reports


def train_checkpoint_and_resume(out, zero_stage, transport):
    """The MLP with Adam for K steps, a checkpoint, K more steps, the checkpoint loaded back and
    the same K steps again. Returns the program and the report: the optimizer state's bytes (full,
    held in slices, still in the scope), whether the resumed run ended equal bitwise, and, on rank 0,
    the checkpoint's optimizer state as read by paddle.static.load_program_state."""
    import paddle

    import paddle_ngraph
    from paddle_ngraph.transpiler import engines
    from paddle_ngraph.zoo import build_program, digits_as_mnist, shard

    k = CHECKPOINT_STEP
    rank, nranks = transport.rank, transport.size
    x, y = digits_as_mnist()
    main_prog, startup, _, loss = build_program("mnist_mlp", "adam", 0.001, seed=1)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    scope = paddle.static.global_scope()
    params = sorted(op.attrs()["parameter_name"] for op in main_prog.global_block().ops
                    if op.name() == "builtin.parameter")
    moments = [n for n in scope.local_var_names() if "moment" in n]
    full_bytes = sum(np.array(scope.find_var(n).get_tensor()).nbytes for n in moments)
    paddle_ngraph.transpile(main_prog, transport=transport, bucket_mb=0.5, zero_stage=zero_stage)

    def train(first):
        for step in range(first, first + k):
            xb, yb = shard(x, y, 16, rank, nranks, step)
            exe.run(main_prog, feed={"x": xb, "y": yb}, fetch_list=[loss])
        return {n: np.array(scope.find_var(n).get_tensor()) for n in params}

    train(0)
    root = os.path.join(out, "ckpt")
    paddle_ngraph.save_checkpoint(main_prog, root, k)
    after = train(k)
    in_scope = sum(np.array(scope.find_var(n).get_tensor()).nbytes for n in moments
                   if scope.find_var(n).get_tensor()._is_initialized())
    assert paddle_ngraph.load_checkpoint(main_prog, root) == k
    resumed = train(k)
    sharded = [e.sharded for e in engines() if e.sharded is not None]
    report = {
        "full_state_bytes": full_bytes,
        "sharded_state_bytes": sum(s.nbytes() for s in sharded) - sum(  # the slices of moments only
            a.nbytes for s in sharded for n, a in zip(s.names, s.arrays) if n == s.sources[n].master),
        "buckets": sum(len(s.buckets) for s in sharded),
        "moments_in_scope_bytes": in_scope,
        "resumed_equal": all(np.array_equal(after[n], resumed[n]) for n in params),
    }
    if rank == 0:
        state = paddle.static.load_program_state(os.path.join(root, f"step-{k:06d}", "model"))
        report["checkpoint_state"] = {n: v for n, v in state.items() if "moment" in n}
    return main_prog, report


@pytest.mark.parametrize("nranks", [2, 3])
def test_zero1_memory_checkpoint_and_resume(tmp_path, nranks):
    """Optimizer state per rank is 1/N (the full moments are freed in the scope); a checkpoint holds
    the full state, equal to plain data parallelism's; resuming from it continues bitwise."""
    per_rank = run_ranks(train_checkpoint_and_resume_per_stage, nranks, tmp_path).results
    reports = {stage: [per_rank[rank][stage] for rank in range(nranks)] for stage in (0, 1)}
    for rank in range(nranks):
        report = reports[1][rank]
        full = report["full_state_bytes"]
        # Each rank's slices: 1/N of the moments, padded to a multiple of N elements per bucket.
        assert report["sharded_state_bytes"] <= full / nranks + 4 * 2 * nranks * report["buckets"], report
        assert report["moments_in_scope_bytes"] == 0, report  # the full moments were freed
        assert report["resumed_equal"], report
    plain = reports[0][0]
    assert plain["moments_in_scope_bytes"] == plain["full_state_bytes"]  # the baseline holds them whole
    # Rank 0's checkpoint: the full optimizer state, as plain data parallelism saves it.
    saved = [reports[s][0]["checkpoint_state"] for s in (0, 1)]
    assert sorted(saved[0]) == sorted(saved[1]) and len(saved[0]) >= 8
    for name in saved[0]:
        np.testing.assert_allclose(saved[1][name], saved[0][name], rtol=1e-5, atol=1e-7, err_msg=name)


@pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")
def test_zero1_under_paddle_launch_equals_one_process(tmp_path, runs):
    ref = run_reference(tmp_path, 2, "pir", steps=10)
    out = runs["launch"]
    for optimizer in OPTIMIZERS:
        check(ref, out, 2, optimizer)


def save_with_paddle_after_zero1_steps(out, ir):
    """An MLP with Momentum, ZeRO-1 on every rank, two steps; then Paddle's own saving of the
    persistables (legacy: a save program the executor runs, as fleet's save_persistables and its
    sharding utils.save_persistables run it; both IRs: paddle.static.save), before and after
    paddle_ngraph.save_checkpoint. Returns what each attempt raised (None: it saved)."""
    import paddle

    import paddle_ngraph
    from paddle_ngraph.distributed import make_transport
    from paddle_ngraph.errors import ConfigError
    from harness import ir_guard

    paddle.enable_static()
    transport = make_transport()
    with ir_guard(ir):
        main_prog, startup = paddle.static.Program(), paddle.static.Program()
        main_prog.random_seed = startup.random_seed = 3
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main_prog, startup):
            x = paddle.static.data("x", [-1, 6], "float32")
            y = paddle.static.data("y", [-1, 1], "int64")
            h = paddle.static.nn.fc(x, 8, activation="tanh")
            loss = paddle.mean(paddle.nn.functional.cross_entropy(paddle.static.nn.fc(h, 3), y))
            paddle.optimizer.Momentum(learning_rate=0.1, momentum=0.9).minimize(loss)
        with paddle.static.scope_guard(paddle.static.Scope()):
            exe = paddle.static.Executor(paddle.CPUPlace())
            exe.run(startup)
            paddle_ngraph.transpile(main_prog, transport=transport, zero_stage=1)
            rng = np.random.RandomState(transport.rank)
            for _ in range(2):
                exe.run(main_prog, feed={"x": rng.uniform(-1, 1, (4, 6)).astype("float32"),
                                         "y": rng.randint(0, 3, (4, 1)).astype("int64")}, fetch_list=[loss])

            def paddle_save(name):
                if ir == "pir":
                    return "not run (legacy save program)"
                try:
                    paddle.distributed.io.save_persistables(exe, os.path.join(out, f"{name}{transport.rank}"),
                                                            main_prog)
                except ConfigError as e:
                    return str(e)
                return None

            report = {"before": paddle_save("paddle_before")}
            try:  # reads the scope itself: saved the freed variables as empty arrays
                paddle.static.save(main_prog, os.path.join(out, f"static{transport.rank}", "model"))
                report["static_save"] = None
            except ConfigError as e:
                report["static_save"] = str(e)
            paddle_ngraph.save_checkpoint(main_prog, os.path.join(out, "ckpt"), 2)
            report["after_checkpoint"] = paddle_save("paddle_after")
    paddle_ngraph.release(main_prog)
    return report


def save_with_paddle_after_zero1_steps_in_both_irs(out):
    """save_with_paddle_after_zero1_steps in each IR, one after the other in one job (each its own
    program, scope and directory, its engines released): {ir: report}."""
    reports = {}
    for ir in ("legacy", "pir"):
        os.makedirs(os.path.join(out, ir), exist_ok=True)
        reports[ir] = save_with_paddle_after_zero1_steps(os.path.join(out, ir), ir)
    return reports


@pytest.fixture(scope="module")
def saved_with_paddle(tmp_path_factory):
    """Each rank's {ir: report} of save_with_paddle_after_zero1_steps, both IRs in one 2-rank job."""
    return run_ranks(save_with_paddle_after_zero1_steps_in_both_irs, 2, tmp_path_factory.mktemp("paddle_save")).results


@pytest.mark.parametrize("ir", ["legacy", "pir"])
def test_paddle_save_of_state_zero1_freed_refused_naming_it(saved_with_paddle, ir):
    """Between checkpoints only the slices hold the optimizer state; Paddle's own save program
    reading the freed variable failed in Paddle ("Tensor holds no memory", untyped, from the save
    op), and paddle.static.save wrote it as an empty array: both are refused with a ConfigError
    naming the variable and paddle_ngraph.save_checkpoint."""
    for report in (per_ir[ir] for per_ir in saved_with_paddle):
        for when in ("before", "static_save", "after_checkpoint") if ir == "legacy" else ("static_save",):
            assert report[when] is not None and "_velocity_0" in report[when], report
            assert "zero_stage 1" in report[when] and "save_checkpoint" in report[when], report
