"""Paddle's own rank APIs under mpirun (distributed/paddle_env.py), with the real mpirun."""
import json
import os

import pytest

from paddle_ngraph.distributed.paddle_env import EXPORTED_FLAG, export_mpi_ranks, paddle_variables
from ranks import run_ranks

WORKER = os.path.join(os.path.dirname(__file__), "paddle_env_worker.py")
DATASET_SIZE = 24


def ompi_env(rank, size, local_size=None, job="prterun-vm-1@1"):
    local_size = size if local_size is None else local_size
    return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(size),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(rank % local_size), "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_size),
            "PMIX_NAMESPACE": job}


def test_one_node_gets_the_launchers_variables_with_endpoints_agreed_by_every_rank():
    values = [paddle_variables(ompi_env(r, 3)) for r in range(3)]
    assert [v["PADDLE_TRAINER_ID"] for v in values] == ["0", "1", "2"]
    assert {v["PADDLE_TRAINERS_NUM"] for v in values} == {"3"}
    endpoints = {v["PADDLE_TRAINER_ENDPOINTS"] for v in values}
    assert len(endpoints) == 1
    listed = endpoints.pop().split(",")
    assert [v["PADDLE_CURRENT_ENDPOINT"] for v in values] == listed
    assert all(e.startswith("127.0.0.1:") for e in listed) and len(set(listed)) == 3
    other_job = paddle_variables(ompi_env(0, 3, job="prterun-vm-2@1"))["PADDLE_TRAINER_ENDPOINTS"]
    assert other_job != ",".join(listed)


def test_several_nodes_get_ranks_but_no_guessed_endpoints():
    values = paddle_variables(ompi_env(3, 4, local_size=2))
    assert values["PADDLE_TRAINER_ID"] == "3" and values["PADDLE_TRAINERS_NUM"] == "4"
    assert values["PADDLE_RANK_IN_NODE"] == "1"
    assert "PADDLE_TRAINER_ENDPOINTS" not in values and "PADDLE_CURRENT_ENDPOINT" not in values


def test_variables_already_set_win_and_nothing_happens_outside_mpirun():
    env = dict(ompi_env(1, 2), PADDLE_TRAINERS_NUM="2", PADDLE_TRAINER_ID="1")
    assert export_mpi_ranks(env) == {} and EXPORTED_FLAG not in env
    env = {"PADDLE_TRAINERS_NUM": "2", "PADDLE_TRAINER_ID": "0"}  # paddle.distributed.launch
    assert export_mpi_ranks(env) == {}
    assert export_mpi_ranks({}) == {}
    env = dict(ompi_env(1, 2), PADDLE_DISTRI_BACKEND="xccl")
    set_now = export_mpi_ranks(env)
    assert env["PADDLE_DISTRI_BACKEND"] == "xccl" and "PADDLE_DISTRI_BACKEND" not in set_now
    assert env["PADDLE_TRAINER_ID"] == "1" and env[EXPORTED_FLAG] == "1"


def reports(nranks, mode):
    proc = run_ranks(WORKER, nranks, mode, timeout=300)
    found = [json.loads(line[len("REPORT "):]) for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert len(found) == nranks, proc.stdout[-3000:]
    return sorted(found, key=lambda r: r["mpi_rank"])


def check_agreement(found, nranks):
    for r in found:
        for when in ("before_init", "after_init"):
            seen = r[when]
            assert (seen["get_rank"], seen["get_world_size"]) == (r["mpi_rank"], nranks), (when, r)
            assert (seen["env_rank"], seen["env_world_size"]) == (r["mpi_rank"], nranks), (when, r)
        assert (r["fleet"]["worker_index"], r["fleet"]["worker_num"]) == (r["mpi_rank"], nranks)
        assert r["fleet"]["worker_endpoints"] == found[0]["fleet"]["worker_endpoints"]
        assert len(r["fleet"]["worker_endpoints"]) == nranks
    for when in ("before_init", "after_init"):
        shards = [r[when]["samples"] for r in found]
        flat = [i for shard in shards for i in shard]
        assert sorted(flat) == list(range(DATASET_SIZE)), shards  # disjoint, and they cover the dataset
        assert all(len(s) == DATASET_SIZE // nranks for s in shards)


@pytest.mark.distributed
@pytest.mark.parametrize("nranks", [2, 3])
def test_static_mode_rank_apis_and_samplers_follow_mpi(nranks):
    check_agreement(reports(nranks, "static"), nranks)


@pytest.mark.distributed
def test_dygraph_mode_rank_apis_follow_mpi_and_paddles_own_collectives_run():
    found = reports(2, "dygraph")
    check_agreement(found, 2)
    assert [r["allreduce_sum"] for r in found] == [3.0, 3.0]


@pytest.mark.distributed
def test_paddle_asked_before_the_import_is_corrected():
    check_agreement(reports(2, "paddle_first"), 2)


@pytest.mark.distributed
def test_plain_paddle_without_the_project_is_left_alone():
    found = reports(2, "plain")
    assert [(r["before_init"]["get_rank"], r["before_init"]["get_world_size"]) for r in found] == [(0, 1), (0, 1)]
