"""Compressed AllReduce (bf16, fp16) under real mpirun: the same bits on every rank, equal to the
scheme computed in one process from all ranks' inputs, for both backends (and so the native MPI
path equals the NumPy reference bitwise); training with it stays close to float32 training."""
import os

import numpy as np
import pytest

from dp_runs import Run, Runs, declare_reference, declare_runs, run_reference
from ranks import run_ranks

# Every test here starts ranks (tests/ranks.py).
pytestmark = pytest.mark.distributed

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("nranks", [2, 3])
def test_compressed_allreduce_is_the_scheme_bit_for_bit_on_every_rank(nranks):
    proc = run_ranks(os.path.join(HERE, "compress_worker.py"), nranks, timeout=120)
    assert proc.stdout.count("bitwise equal to the model on every rank") == nranks


# Tolerance of the loss with 16-bit gradients against the one-process float32 reference, relative,
# per step over 20 steps of mnist_mlp (bf16 keeps 8 significant bits, fp16 11).
LOSS_RTOL = {"bf16": 2e-2, "fp16": 5e-3}


COMPRESSED = [("bf16", "CPU", 3), ("fp16", "CPU", 2), ("bf16", "INTERPRETER", 2), ("fp16", "INTERPRETER", 3)]
# The training runs; those with the same ranks train in one job.
RUNS = {f"{compress}-{backend}-{nranks}": Run(nranks, ("--optimizers", "momentum", "--compress", compress,
                                                       "--backend", backend))
        for compress, backend, nranks in COMPRESSED}
for _n in (2, 3):
    declare_reference(_n, "pir", optimizers="momentum")


declare_runs(RUNS)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return Runs(tmp_path_factory.mktemp("compress"), RUNS)


@pytest.mark.parametrize("compress,backend,nranks", COMPRESSED)
def test_training_with_compression_is_identical_across_ranks_and_close_to_float32(tmp_path, runs, compress, backend,
                                                                                  nranks):
    ref = run_reference(tmp_path, nranks, "pir", optimizers="momentum")
    out = runs[f"{compress}-{backend}-{nranks}"]
    ranks = [np.load(out / f"momentum_rank{r}.npz") for r in range(nranks)]
    expected = np.load(ref / "momentum_rank0.npz")
    names = [k for k in expected.files if k != "losses"]
    for r in ranks[1:]:
        for name in names:
            assert r[name].tobytes() == ranks[0][name].tobytes(), f"{name} differs between ranks"
    mean_loss = np.mean([r["losses"] for r in ranks], axis=0)
    np.testing.assert_allclose(mean_loss, expected["losses"], rtol=LOSS_RTOL[compress])
