"""precision: bf16 under real mpirun (mnist_mlp, Momentum, 20 steps, 2 ranks).

On the INTERPRETER (the reference of the mixed-precision function): the ranks end with the same
bits, and training stays close to the same run in float32; combined with compress bf16,
zero_stage 1 and accumulate_steps 2 likewise, against Paddle alone in float32. On the CPU
backend, which has no bf16 kernels (and this machine no avx512_bf16): float32, bitwise the
float32 run's results, with the notice once per rank.
"""
import os

import numpy as np
import pytest

from mpi_util import mpirun
from test_dp_equivalence import run_reference

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "dp_worker.py")
NRANKS = 2
# bf16 against float32, measured on 20 steps of mnist_mlp with Momentum (lr 0.03): the step
# losses differ by at most 0.3% relative, the trained parameters by at most 2.7% of their norm
# (the first layer's bias, which starts at zero; the weights 0.2-0.3%). The tolerances leave a
# factor of about 3 for other BLAS summation orders.
LOSS_RTOL = 1e-2
PARAM_RTOL = 8e-2


def train(tmp_path, label, backend="INTERPRETER", ir="pir", **options):
    out = tmp_path / label
    out.mkdir()
    args = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
    proc = mpirun(NRANKS, WORKER, "--out", out, "--optimizers", "momentum", "--backend", backend, "--ir", ir, *args)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    ranks = [np.load(out / f"momentum_rank{r}.npz") for r in range(NRANKS)]
    names = [k for k in ranks[0].files if k not in ("losses", "hierarchical", "native")]
    assert len(names) == 4
    for r in ranks[1:]:  # the parameters (each rank's loss is that of its own shard)
        for name in names:
            assert r[name].tobytes() == ranks[0][name].tobytes(), f"{label}: {name} differs between ranks"
    return ranks, names, proc


def assert_close(bf16, fp32, names, label):
    mean_bf16 = np.mean([r["losses"] for r in bf16], axis=0)
    mean_fp32 = np.mean([r["losses"] for r in fp32], axis=0) if isinstance(fp32, list) else fp32["losses"]
    np.testing.assert_allclose(mean_bf16, mean_fp32, rtol=LOSS_RTOL, err_msg=label)
    reference = fp32[0] if isinstance(fp32, list) else fp32
    for name in names:
        got, want = bf16[0][name], reference[name]
        assert np.linalg.norm(got - want) <= PARAM_RTOL * np.linalg.norm(want), f"{label}: {name}"
    assert any(bf16[0][n].tobytes() != reference[n].tobytes() for n in names), f"{label}: bf16 changed nothing"


@pytest.mark.parametrize("ir", ["pir", "legacy"])
def test_bf16_training_on_the_interpreter_is_identical_across_ranks_and_close_to_float32(tmp_path, ir):
    bf16, names, _ = train(tmp_path, "bf16", ir=ir, precision="bf16")
    fp32, _, _ = train(tmp_path, "fp32", ir=ir, precision="fp32")
    assert_close(bf16, fp32, names, f"bf16 vs fp32 ({ir})")


@pytest.mark.parametrize("options", [dict(compress="bf16"), dict(zero_stage=1), dict(accumulate_steps=2)],
                         ids=["compress_bf16", "zero_stage_1", "accumulate_steps_2"])
def test_bf16_combines_with_compress_zero_and_accumulation(tmp_path, options):
    steps = options.get("accumulate_steps", 1)
    reference = np.load(run_reference(tmp_path, NRANKS, "pir", optimizers="momentum", batch=16 * steps)
                        / "momentum_rank0.npz")
    bf16, names, _ = train(tmp_path, "bf16", precision="bf16", **options)
    assert_close(bf16, reference, names, f"bf16 with {options} vs Paddle in float32")


def test_cpu_backend_runs_bf16_in_float32_bitwise_with_one_notice_per_rank(tmp_path):
    bf16, names, proc = train(tmp_path, "bf16", backend="CPU", precision="bf16")
    fp32, _, plain = train(tmp_path, "fp32", backend="CPU", precision="fp32")
    for name in names + ["losses"]:
        assert bf16[0][name].tobytes() == fp32[0][name].tobytes(), name
    notices = [line for line in proc.stderr.splitlines() if "precision bf16" in line]
    assert len(notices) == NRANKS, proc.stderr[-3000:]
    assert all(line.endswith(": running in float32") for line in notices)
    assert "precision bf16" not in plain.stderr
