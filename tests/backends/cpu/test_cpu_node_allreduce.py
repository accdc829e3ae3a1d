"""The CPU backend's AllReduce, ReduceScatter and AllGather over shared memory among the ranks of one
node (node_allreduce.cc), under the real mpirun and paddle.distributed.launch, with both transports:
results against NumPy, the collective choice of path, a killed rank."""
import ast
import os
import re

import pytest

from ranks import run_ranks  # noqa: E402
from paddle_ngraph.distributed.ccl import available as ccl_available  # noqa: E402

# Every test here starts ranks (tests/ranks.py).
pytestmark = pytest.mark.distributed

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_allreduce_worker.py")


def described(stdout: str) -> set:
    return set(re.findall(r"\] communicator: (.*)", stdout))


def over_shared_memory(stdout: str) -> list[dict]:
    """Each rank's count of the collectives it ran over shared memory, by kind (paddle.distributed.launch's
    logs may hold a rank's lines twice: its own log and the launcher's echo)."""
    by_rank = {int(r): ast.literal_eval(m) for r, m in re.findall(r"\[rank (\d+)\] over shared memory: (\{.*\})", stdout)}
    return list(by_rank.values())


def every_kind_went_over_shared_memory(stdout: str, nranks: int) -> bool:
    counts = over_shared_memory(stdout)
    return len(counts) == nranks and all(min(c.values()) > 0 for c in counts)


def none_went_over_shared_memory(stdout: str, nranks: int) -> bool:
    counts = over_shared_memory(stdout)
    return len(counts) == nranks and all(max(c.values()) == 0 for c in counts)


@pytest.mark.parametrize("nranks", [2, 3])
def test_shared_memory_allreduce_matches_numpy(nranks):
    proc = run_ranks(WORKER, nranks, timeout=300)
    assert proc.stdout.count("native allreduce matches NumPy") == nranks
    assert described(proc.stdout) == {f"shared memory among the {nranks} ranks of the node"}
    assert every_kind_went_over_shared_memory(proc.stdout, nranks), proc.stdout[-3000:]


needs_ccl = pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")


@needs_ccl
def test_ccl_transport_under_mpirun_takes_it_too():
    proc = run_ranks(WORKER, 3, timeout=300, env={"PDNG_TEST_TRANSPORT": "ccl"})
    assert proc.stdout.count("native allreduce matches NumPy") == 3
    assert described(proc.stdout) == {"shared memory among the 3 ranks of the node"}
    assert every_kind_went_over_shared_memory(proc.stdout, 3), proc.stdout[-3000:]


@needs_ccl
def test_ccl_transport_under_paddle_launch_takes_it_too():
    logs = run_ranks(WORKER, 2, timeout=300, launcher="launch").output
    assert set(re.findall(r"\[rank (\d)\] native allreduce matches NumPy", logs)) == {"0", "1"}
    assert described(logs) == {"shared memory among the 2 ranks of the node"}
    assert every_kind_went_over_shared_memory(logs, 2), logs[-4000:]


@needs_ccl
def test_ccl_transport_switched_off_on_one_rank_uses_its_own_allreduce():
    proc = run_ranks(WORKER, 2, timeout=300, env={"PDNG_TEST_TRANSPORT": "ccl", "PDNG_TEST_SHM_OFF_RANK": "0"})
    assert described(proc.stdout) == {"the transport's allreduce (no shared memory: switched off on rank 0)"}
    assert none_went_over_shared_memory(proc.stdout, 2), proc.stdout[-3000:]


def test_one_rank_switching_it_off_sends_every_rank_to_mpi():
    proc = run_ranks(WORKER, 2, timeout=300, env={"PDNG_TEST_SHM_OFF_RANK": "1"})
    assert proc.stdout.count("native allreduce matches NumPy") == 2
    assert described(proc.stdout) == {"MPI_Allreduce on MPI_COMM_WORLD (no shared memory: switched off on rank 1)"}
    assert none_went_over_shared_memory(proc.stdout, 2), proc.stdout[-3000:]


# 3 ranks only: each waiting rank checks every peer's process in the same loop whatever their
# number (node_allreduce.cc, wait_until); of 3, rank 0 and rank 2 wait, one before and one after the
# killed rank, and the first to notice aborts the other's wait: all that 2 ranks exercise, and more.
@pytest.mark.parametrize("nranks", [3])
def test_a_rank_killed_before_an_allreduce_is_named_by_the_others(nranks):
    proc = run_ranks(WORKER, nranks, "--kill", timeout=60, check=False)
    assert proc.returncode != 0
    for rank in [0] + list(range(2, nranks)):
        match = re.search(rf"\[rank {rank}\] after ([0-9.]+) s: ExecutionError: .*", proc.stdout)
        assert match, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert float(match.group(1)) < 10
        assert re.search(r"rank 1 \(pid \d+\) ended while rank \d waited for it to arrive at an AllReduce of 1000 "
                         r"float32 elements", match.group(0)), match.group(0)
