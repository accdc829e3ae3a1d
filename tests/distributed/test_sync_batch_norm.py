"""sync_batch_norm: N ranks with per-rank batch B, batch-norm statistics over all ranks, train as one
process on the concatenated batch N x B: parameters and running mean/variance within 1e-5 (tensor
level), identical on every rank. Real mpirun (and paddle.distributed.launch for the ccl transport),
both IRs, through transpile(..., sync_batch_norm=True) and through Paddle's own sync_batch_norm ops.
The one-process conversion is tests/frontend/test_sync_batch_norm_conversion.py."""
import os
import subprocess
import sys

import numpy as np
import pytest

from harness import assert_trained_close
from ranks import run_ranks
from paddle_ngraph.distributed.ccl import available as ccl_available

# Every test here starts ranks (tests/ranks.py).
pytestmark = pytest.mark.distributed

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "sync_bn_worker.py")
LR = {"sgd": 0.1, "momentum": 0.05}  # as sync_bn_worker.py
OPTIMIZERS = ("sgd", "momentum")


def reference(tmp, world, ir, model):
    out = tmp / "ref"
    out.mkdir()
    proc = subprocess.run([sys.executable, WORKER, "--reference", "--world", str(world), "--ir", ir, "--model", model,
                           "--out", str(out)], capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, GLOG_minloglevel="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


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


@pytest.mark.parametrize("model,ir,mode,backend", [
    ("conv_bn", "pir", "option", "CPU"), ("conv_bn", "legacy", "option", "CPU"),
    ("mlp_bn", "pir", "option", "CPU"), ("mlp_bn", "legacy", "option", "CPU"),
    ("conv_bn", "pir", "option", "INTERPRETER"),
    # Paddle's own sync_batch_norm ops (SyncBatchNorm.convert_sync_batchnorm), no option needed.
    ("conv_bn", "pir", "ops", "CPU"), ("mlp_bn", "legacy", "ops", "CPU")])
def test_two_ranks_equal_one_process_on_concatenated_batch(tmp_path, model, ir, mode, backend):
    ref = reference(tmp_path, 2, ir, model)
    out = tmp_path / "run"
    out.mkdir()
    run_ranks(WORKER, 2, "--model", model, "--ir", ir, "--mode", mode, "--backend", backend, "--out", out)
    check(ref, out, 2)


def test_with_zero_1(tmp_path):
    """ZeRO-1 shards the gradients (scale and bias included); the statistics stay AllReduces."""
    ref = reference(tmp_path, 2, "pir", "conv_bn")
    out = tmp_path / "run"
    out.mkdir()
    run_ranks(WORKER, 2, "--model", "conv_bn", "--mode", "option", "--zero-stage", 1, "--out", out)
    check(ref, out, 2)


def test_without_it_each_rank_keeps_its_own_statistics(tmp_path):
    """The control: plain batch norm on 2 ranks normalizes with each rank's statistics, so the
    running statistics differ between ranks and from one process on the whole batch."""
    ref = reference(tmp_path, 2, "pir", "mlp_bn")
    out = tmp_path / "run"
    out.mkdir()
    run_ranks(WORKER, 2, "--model", "mlp_bn", "--mode", "none", "--optimizers", "sgd", "--out", out)
    ref = np.load(ref / "sgd_rank0.npz")
    ranks = [np.load(out / f"sgd_rank{r}.npz") for r in range(2)]
    mean = "batch_norm1d_0.w_1"
    assert not np.array_equal(ranks[0][mean], ranks[1][mean])
    assert np.linalg.norm(ranks[0][mean] - ref[mean]) > 1e-3 * np.linalg.norm(ref[mean])


@pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")
def test_ccl_under_paddle_launch_equals_one_process(tmp_path):
    ref = reference(tmp_path, 2, "pir", "conv_bn")
    out = tmp_path / "run"
    out.mkdir()
    run_ranks(WORKER, 2, "--model", "conv_bn", "--ir", "pir", "--mode", "option", "--out", out, launcher="launch")
    check(ref, out, 2)
