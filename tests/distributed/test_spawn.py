"""Dygraph training started by ``paddle.distributed.spawn``: paddle_ngraph.DataParallel and fleet
with strategy.ngraph, beside Paddle's own process group and its eager collectives.

spawn sets Paddle's rank variables but no PADDLE_MASTER, so Paddle's global TCPStore (made by
init_parallel_env and by dygraph fleet.init) and the ccl transport's rendezvous both live at the
first trainer endpoint; a second store server there aborts rank 0 (Paddle's libuv store), whichever
of the two comes second. Each rank must train as plain Paddle in one process on the whole batches.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

from paddle_ngraph.distributed.ccl import available as ccl_available
from paddle_ngraph.quiet import quiet_env

pytestmark = [pytest.mark.distributed,
              pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")]

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "spawn_worker.py")
NRANKS = 2


@pytest.mark.parametrize("api,order", [("dp", "paddle_first"), ("dp", "ngraph_first"), ("fleet", "paddle_first")])
def test_spawned_ranks_train_as_one_process_beside_paddles_process_group(tmp_path, api, order):
    env = {k: v for k, v in quiet_env().items() if not k.startswith(("OMPI_", "PMI_", "PADDLE_"))}
    proc = subprocess.run([sys.executable, WORKER, str(tmp_path), "--api", api, "--order", order],
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    reference = np.load(tmp_path / "reference.npz")
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(NRANKS)]
    names = [k for k in reference.files if k.startswith("param:")]
    assert names
    losses = np.mean([r["losses"] for r in ranks], axis=0)  # each rank's loss is the mean over its half
    np.testing.assert_allclose(losses, reference["losses"], rtol=1e-6)
    for name in names:
        np.testing.assert_allclose(ranks[0][name], reference[name], rtol=1e-5, atol=1e-6, err_msg=name)
        for r, other in enumerate(ranks[1:], 1):
            assert np.array_equal(other[name], ranks[0][name]), f"{name}: rank {r} differs from rank 0"
    for r, other in enumerate(ranks):  # Paddle's own eager all_reduce still works beside the engine
        assert other["all_reduce"].tolist() == [sum(range(1, NRANKS + 1))], f"rank {r}"
