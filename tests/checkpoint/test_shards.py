"""The files of a model-parallel checkpoint (checkpoint/shards.py) in one process: the dense state
reassembled from shard files as paddle.static.save writes them, and the refusals (typed, naming the
checkpoint and the variable). Training, saving and resuming on ranks: tests/distributed/test_model_parallel_checkpoint.py."""
import importlib.util
import json
import os
import pickle

import numpy as np
import pytest

from paddle_ngraph.checkpoint import CheckpointError, ShardLayout, assemble_dense, latest_checkpoint
from paddle_ngraph.checkpoint import _shard_to_load, write_manifest
from paddle_ngraph.checkpoint.shards import dense_state


def _write_shards(path, shards: list[dict], axes: dict, opt=None):
    os.makedirs(path)
    write_manifest(path, ShardLayout(rank=0, nranks=len(shards), mp_degree=len(shards), axes=axes))
    for m, values in enumerate(shards):
        for kind, content in (("pdparams", values), ("pdopt", (opt or [{}] * len(shards))[m])):
            with open(os.path.join(path, f"model.tp{m:02d}.{kind}"), "wb") as f:
                pickle.dump(content, f, protocol=4)


def test_the_shards_are_concatenated_along_their_axes(tmp_path):
    rng = np.random.default_rng(0)
    rows, cols, bias = rng.random((4, 3)), rng.random((3, 4)), rng.random(2)
    shards = [{"rows": r, "cols": c, "bias": bias} for r, c in zip(np.split(rows, 2), np.split(cols, 2, axis=1))]
    opt = [{"cols_moment1_0": c * 2, "lr": np.float32([0.1])} for c in np.split(cols, 2, axis=1)]
    src = tmp_path / "mp" / "step-000007"
    _write_shards(str(src), shards, {"rows": 0, "cols": 1, "cols_moment1_0": 1}, opt)
    params, state = dense_state(str(src))
    np.testing.assert_array_equal(params["rows"], rows)
    np.testing.assert_array_equal(params["cols"], cols)
    np.testing.assert_array_equal(params["bias"], bias)  # whole on every rank: shard 0's
    np.testing.assert_array_equal(state["cols_moment1_0"], cols * 2)
    out = assemble_dense(str(src), str(tmp_path / "dense"))
    assert out == latest_checkpoint(str(tmp_path / "dense")) == str(tmp_path / "dense" / "step-000007")
    with open(os.path.join(out, "model.pdparams"), "rb") as f:
        np.testing.assert_array_equal(pickle.load(f)["cols"], cols)


def test_a_shard_of_unknown_axis_is_refused_by_name(tmp_path):
    src = str(tmp_path / "step-000001")
    _write_shards(src, [{"w": np.zeros(2)}, {"w": np.zeros(2)}], {"w": None})
    with pytest.raises(CheckpointError, match=r"step-000001.*along which axis w is sharded"):
        assemble_dense(src, str(tmp_path / "dense"))


def test_a_dense_checkpoint_has_no_shards_to_assemble(tmp_path):
    os.makedirs(tmp_path / "step-000001")
    with pytest.raises(CheckpointError, match="no shards.json"):
        assemble_dense(str(tmp_path / "step-000001"), str(tmp_path / "dense"))


def test_each_rank_loads_its_shard_and_a_mismatched_degree_is_refused(tmp_path):
    src = str(tmp_path / "step-000002")
    _write_shards(src, [{"w": np.zeros(2)}] * 2, {"w": 0})
    assert [_shard_to_load(src, ShardLayout(rank=r, nranks=4, mp_degree=2)) for r in range(4)] == \
        ["model.tp00", "model.tp01", "model.tp00", "model.tp01"]
    with pytest.raises(CheckpointError, match="holds 2 shard.*mp_degree 4.*assemble_checkpoint"):
        _shard_to_load(src, ShardLayout(rank=0, nranks=4, mp_degree=4))
    dense = str(tmp_path / "step-000003")
    os.makedirs(dense)
    assert _shard_to_load(dense, None) == "model"
    with pytest.raises(CheckpointError, match="dense program.*mp_degree 2"):
        _shard_to_load(dense, ShardLayout(rank=1, nranks=2, mp_degree=2))


def test_the_manifest_records_the_degrees_and_axes(tmp_path):
    write_manifest(str(tmp_path), ShardLayout(rank=0, nranks=4, mp_degree=2, axes={"w": 1, "emb": 0}))
    with open(tmp_path / "shards.json") as f:
        assert json.load(f) == {"mp_degree": 2, "dp_degree": 2, "files": ["model.tp00", "model.tp01"],
                                "shard_axes": {"emb": 0, "w": 1}}


def _tool():
    """tools/assemble_checkpoint.py as a module (the command runs it as a script; tests/distributed/
    test_model_parallel_checkpoint.py runs it so on a real checkpoint)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "assemble_checkpoint.py")
    spec = importlib.util.spec_from_file_location("assemble_checkpoint", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tool_says_what_it_does_and_refuses_a_dense_checkpoint(tmp_path, capsys):
    tool = _tool()
    with pytest.raises(SystemExit) as done:
        tool.main(["--help"])
    assert done.value.code == 0 and "concatenated along its axis" in capsys.readouterr().out
    os.makedirs(tmp_path / "step-000004")
    assert tool.main([str(tmp_path / "step-000004"), str(tmp_path / "out")]) == 1
    assert "step-000004: no shards.json" in capsys.readouterr().err
