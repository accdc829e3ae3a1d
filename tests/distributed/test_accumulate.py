"""accumulate_steps on 2 ranks under real mpirun: k micro-batches of B per rank and step train like
one process on the concatenated batch of 2*k*B, with the plain AllReduce and with ZeRO-1 (whose
reduce-scatter runs on the averaged accumulated gradients)."""
import numpy as np
import pytest

from mpi_util import mpirun
from test_dp_equivalence import WORKER, check, run_reference

K, B, STEPS = 2, 16, 6
OPTIMIZERS = ["sgd", "adam"]


@pytest.mark.parametrize("backend,zero_stage", [("CPU", 0), ("INTERPRETER", 0), ("CPU", 1)])
def test_two_ranks_accumulating_equal_one_process_on_the_concatenated_batch(tmp_path, backend, zero_stage):
    ref = run_reference(tmp_path, 2, "pir", steps=STEPS, optimizers=",".join(OPTIMIZERS), batch=K * B)
    out = tmp_path / "run"
    out.mkdir()
    proc = mpirun(2, WORKER, "--out", out, "--steps", STEPS, "--batch", B, "--accumulate-steps", K,
                  "--optimizers", ",".join(OPTIMIZERS), "--bucket-mb", 0.5, "--zero-stage", zero_stage,
                  "--backend", backend)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    for optimizer in OPTIMIZERS:
        check(ref, out, 2, optimizer)
        assert len(np.load(out / f"{optimizer}_rank0.npz")["losses"]) == STEPS
