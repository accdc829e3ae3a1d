"""accumulate_steps on 2 ranks under real mpirun: k micro-batches of B per rank and step train like
one process on the concatenated batch of 2*k*B, with the plain AllReduce and with ZeRO-1 (whose
reduce-scatter runs on the averaged accumulated gradients)."""
import numpy as np
import pytest

from dp_runs import Run, Runs, check, declare_reference, declare_runs, run_reference

# Every test here starts ranks (tests/ranks.py).
pytestmark = pytest.mark.distributed

K, B, STEPS = 2, 16, 6
OPTIMIZERS = ["sgd", "adam"]
BACKEND_STAGES = [("CPU", 0), ("INTERPRETER", 0), ("CPU", 1)]
ACCUMULATING = ("--steps", STEPS, "--batch", B, "--accumulate-steps", K)
# Every run of this module: one mpirun job.
RUNS = {
    **{f"{backend}-zero{stage}": Run(2, (*ACCUMULATING, "--optimizers", ",".join(OPTIMIZERS), "--bucket-mb", 0.5,
                                         "--zero-stage", stage, "--backend", backend))
       for backend, stage in BACKEND_STAGES},
    "compress-bf16": Run(2, (*ACCUMULATING, "--optimizers", "momentum", "--compress", "bf16", "--backend", "CPU")),
}
declare_reference(2, "pir", steps=STEPS, optimizers=",".join(OPTIMIZERS), batch=K * B)
declare_reference(2, "pir", steps=STEPS, optimizers="momentum", batch=K * B)


declare_runs(RUNS)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return Runs(tmp_path_factory.mktemp("dp_accumulate"), RUNS)


@pytest.mark.parametrize("backend,zero_stage", BACKEND_STAGES)
def test_two_ranks_accumulating_equal_one_process_on_the_concatenated_batch(tmp_path, runs, backend, zero_stage):
    ref = run_reference(tmp_path, 2, "pir", steps=STEPS, optimizers=",".join(OPTIMIZERS), batch=K * B)
    out = runs[f"{backend}-zero{zero_stage}"]
    for optimizer in OPTIMIZERS:
        check(ref, out, 2, optimizer)
        assert len(np.load(out / f"{optimizer}_rank0.npz")["losses"]) == STEPS


def test_accumulating_with_compressed_gradients_is_identical_across_ranks_and_close(tmp_path, runs):
    """The apply variant's AllReduce is what compress rewrites: the accumulated, averaged gradient
    travels as bf16 once per k micro-steps, the same bits on every rank."""
    ref = run_reference(tmp_path, 2, "pir", steps=STEPS, optimizers="momentum", batch=K * B)
    out = runs["compress-bf16"]
    ranks = [np.load(out / f"momentum_rank{r}.npz") for r in range(2)]
    expected = np.load(ref / "momentum_rank0.npz")
    names = [k for k in expected.files if k not in ("losses", "hierarchical", "native", "shm_collectives")]
    for name in names:
        assert ranks[1][name].tobytes() == ranks[0][name].tobytes(), f"{name} differs between ranks"
    mean_loss = np.mean([r["losses"] for r in ranks], axis=0)
    np.testing.assert_allclose(mean_loss, expected["losses"], rtol=2e-2)
    # ... and the gradients did travel as bf16: float32 ones would agree to float32 rounding.
    assert np.abs(mean_loss - expected["losses"]).max() > 1e-5 * np.abs(expected["losses"]).max()
