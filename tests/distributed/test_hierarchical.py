"""Hierarchical allreduce (reduce in the node, allreduce among leaders, broadcast in the node) trains
like the flat allreduce and like one process on the concatenated batch.

4 ranks under real mpirun on one machine; PADDLE_NGRAPH_NODE_ID (set by dp_worker.py from
--ranks-per-node) makes them 2 "nodes" of 2. Both backends: the CPU backend's native MPI path and
the interpreter's Python MPI transport.
"""
import numpy as np
import pytest

from harness import assert_trained_close
from dp_runs import LR, Run, Runs, check, declare_reference, declare_runs, run_reference

# Every test here starts ranks (tests/ranks.py).
pytestmark = pytest.mark.distributed

OPTIMIZERS = "sgd,adam"
STEPS = 10


BACKENDS = ["CPU", "INTERPRETER"]
TRAINING = ("--ir", "pir", "--bucket-mb", 0.25, "--steps", STEPS, "--optimizers", OPTIMIZERS)
# 4 ranks as 2 "nodes" of 2 (auto: hierarchical), and on one node (auto: flat); one job each.
RUNS = {
    **{f"hier-{backend}": Run(4, (*TRAINING, "--backend", backend, "--ranks-per-node", 2)) for backend in BACKENDS},
    **{f"flat-{backend}": Run(4, (*TRAINING, "--backend", backend)) for backend in BACKENDS},
}
declare_reference(4, "pir", steps=STEPS, optimizers=OPTIMIZERS)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return run_reference(tmp_path_factory.mktemp("hier"), 4, "pir", steps=STEPS, optimizers=OPTIMIZERS)


declare_runs(RUNS)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return Runs(tmp_path_factory.mktemp("hierarchical"), RUNS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hierarchical_equals_flat_and_one_process(reference, trained, backend):
    hier = trained[f"hier-{backend}"]  # auto on 2 nodes x 2
    flat = trained[f"flat-{backend}"]  # auto on one node
    for optimizer in OPTIMIZERS.split(","):
        runs = {name: [np.load(out / f"{optimizer}_rank{r}.npz") for r in range(4)] for name, out in
                (("hierarchical", hier), ("flat", flat))}
        assert all(bool(r["hierarchical"]) for r in runs["hierarchical"]), "auto did not choose hierarchical on 2 nodes"
        assert not any(bool(r["hierarchical"]) for r in runs["flat"]), "auto chose hierarchical on one node"
        if backend == "CPU":  # the C++ communicator itself did it, not a Python fallback
            assert [str(r["native"]) for r in runs["hierarchical"]] == [
                "hierarchical: rank 0 of 2 in its node, leader of 2 nodes", "hierarchical: rank 1 of 2 in its node, not a leader",
                "hierarchical: rank 0 of 2 in its node, leader of 2 nodes", "hierarchical: rank 1 of 2 in its node, not a leader"]
            # Flat on one node: the shared-memory AllReduce (node_allreduce.cc).
            assert all(str(r["native"]) == "shared memory among the 4 ranks of the node" for r in runs["flat"])
        # Identical on every rank (bitwise), and equal to one process on the concatenated batch.
        check(reference, hier, 4, optimizer)
        check(reference, flat, 4, optimizer)
        # Equal to the flat allreduce up to fp32 rounding (the sums are added in another order), with
        # the rule of every trained-parameter comparison (harness.assert_trained_close).
        names = [k for k in runs["flat"][0].files if k not in ("losses", "hierarchical", "native", "shm_collectives")]
        for name in names:
            assert_trained_close(runs["hierarchical"][0][name], runs["flat"][0][name], optimizer,
                                 f"{backend} {optimizer}: {name}", lr=LR[optimizer])
