"""The MPI transport against NumPy: every dtype and reduction, sizes 1 element to 64 MB."""
import os

import numpy as np
import pytest

from ranks import run_ranks
from paddle_ngraph.distributed import NullTransport, detect_launcher
from paddle_ngraph.distributed.ccl import available as ccl_available
from paddle_ngraph.distributed.mpi import _bf16_to_f32, _f32_to_bf16
from paddle_ngraph.errors import TransportError

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.distributed
def test_collectives_match_numpy():
    """2 ranks as the transport starts (set_hierarchical never called); 3 ranks in
    test_hierarchical_collectives_match_numpy (auto on one host: flat, the same collectives)."""
    proc = run_ranks(os.path.join(HERE, "transport_worker.py"), 2)
    assert proc.stdout.count("all collectives match NumPy") == 2


@pytest.mark.distributed
@pytest.mark.parametrize("nranks,per_node,mode,expect", [
    (4, 2, "auto", 1),   # 2 nodes x 2 ranks: auto chooses hierarchical
    (4, 3, "on", 1),     # uneven nodes (3 + 1 ranks)
    (3, 0, "auto", 0),   # one host: auto stays flat (every collective at 3 ranks)
    (2, 1, "auto", 0),   # one rank per node: nothing to reduce within a node, flat
])
def test_hierarchical_collectives_match_numpy(nranks, per_node, mode, expect):
    env = {"PDNG_TEST_HIERARCHICAL": mode, "PDNG_TEST_EXPECT_HIERARCHICAL": str(expect)}
    if per_node:
        env["PDNG_TEST_RANKS_PER_NODE"] = str(per_node)
    proc = run_ranks(os.path.join(HERE, "transport_worker.py"), nranks, env=env)
    assert proc.stdout.count("all collectives match NumPy") == nranks
    assert proc.stdout.count(f"hierarchical={bool(expect)}") == nranks


needs_ccl = pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")


@pytest.mark.distributed
@needs_ccl
@pytest.mark.parametrize("nranks", [2, 3])
def test_ccl_collectives_match_numpy_under_mpirun(nranks):
    proc = run_ranks(os.path.join(HERE, "transport_worker.py"), nranks, env={"PDNG_TEST_TRANSPORT": "ccl"})
    assert proc.stdout.count("all collectives match NumPy") == nranks


@pytest.mark.distributed
@needs_ccl
def test_ccl_collectives_match_numpy_under_paddle_launch():
    logs = run_ranks(os.path.join(HERE, "transport_worker.py"), 2, launcher="launch").output
    assert all(f"[rank {r}] all collectives match NumPy" in logs for r in range(2))


def test_bfloat16_conversion_rounds_to_nearest_even():
    values = np.array([1.0, -2.5, 3.1415926, 1e-3, 65504.0], dtype=np.float32)
    back = _bf16_to_f32(_f32_to_bf16(values))
    np.testing.assert_allclose(back, values, rtol=2 ** -8)
    # 1 + 2^-8 is halfway between two bfloat16 values: ties go to the even one (1.0).
    assert _bf16_to_f32(_f32_to_bf16(np.array([1 + 2 ** -8], np.float32)))[0] == 1.0


def test_null_transport_is_identity_and_refuses_peers():
    t = NullTransport()
    a = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(t.allreduce(a, "avg"), a)
    with pytest.raises(TransportError, match="unknown reduction 'mean'"):
        t.allreduce(a, "mean")
    with pytest.raises(TransportError, match="no peer"):
        t.send(a, 1)


def test_launcher_detection():
    assert detect_launcher({}).launcher == "none"
    info = detect_launcher({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "2"})
    assert (info.launcher, info.rank, info.size) == ("mpirun", 2, 4)
    info = detect_launcher({"PADDLE_TRAINERS_NUM": "2", "PADDLE_TRAINER_ID": "1", "PADDLE_MASTER": "127.0.0.1:1234"})
    assert (info.launcher, info.rank, info.size, info.master) == ("paddle", 1, 2, "127.0.0.1:1234")


@pytest.mark.parametrize("program, status", [
    ("sys.exit(3)", 3),
    ("sys.exit('a message')", 1),
    ("sys.exit(0)", 0),
    ("sys.exit()", 0),
    ("def f():\n    try:\n        sys.exit(3)\n    except SystemExit:\n        pass\nf()", 0),  # caught: the end is clean
    ("import threading\nt = threading.Thread(target=sys.exit, args=(3,))\nt.start()\nt.join()", 0),  # ends a thread
])
def test_the_status_sys_exit_ends_the_interpreter_with_is_noted(program, status):
    """What the MPI transport's exit handler sees (mpi._Exit): the status of the SystemExit that ends
    the interpreter, none of one caught inside the program. One process, no MPI."""
    import subprocess
    import sys

    script = ("import atexit, sys\n"
              "from paddle_ngraph.distributed import mpi\n"
              "sys.exit = mpi._exit\n"
              "atexit.register(lambda: print('noted', mpi._ABORT_ON_UNCAUGHT['status']))\n" + program + "\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(HERE))})
    assert f"noted {status}" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == status, proc.stderr
