"""paddle-ngraph-dump on a tensor-parallel program (docs/dump_tool.md, "Model parallel"): each
collective with the group of ranks it runs over, seen from the rank given by --rank, the gradient
buckets over the data-parallel group with their own parameters, and the axis of each sharded parameter.

The program is the one ``paddle.distributed.split`` builds for the first shard (mp rank 0) of
mp_degree 2 (a parallel embedding, a column-, a row- and a gathered column-parallel linear), built here
after ``fleet.init`` of one process (split needs it; tests/fleet/test_strategy.py calls it so too) and
saved as a legacy ProgramDesc: the file loses Paddle's ``is_distributed`` flags, so the sharded parameters are found
from split's layers.
"""
import pytest

from paddle_ngraph.tools import dump

EMBEDDING, COLUMN, ROW, GATHERED = "_parallel_embedding_0.w_0", "linear_0", "linear_1", "linear_2"


def build(path: str):
    import paddle
    import paddle.distributed.fleet as fleet

    paddle.enable_static()
    fleet.init(is_collective=True)
    split = paddle.distributed.split
    with paddle.pir_utils.OldIrGuard():
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            ids = paddle.static.data("ids", [4, 3], "int64")
            y = paddle.static.data("y", [4, 1], "int64")
            h = paddle.reshape(split(ids, (8, 6), "embedding", num_partitions=2), [4, 18])
            h = paddle.nn.functional.relu(split(h, (18, 10), "linear", axis=1, num_partitions=2, gather_out=False))
            h = split(h, (10, 6), "linear", axis=0, num_partitions=2)
            h = split(h, (6, 4), "linear", axis=1, num_partitions=2, gather_out=True)
            loss = paddle.mean(paddle.nn.functional.cross_entropy(h, y))
            paddle.optimizer.SGD(0.1).minimize(loss)
        with open(path, "wb") as f:
            f.write(main.desc.serialize_to_string())


@pytest.fixture(scope="module")
def mp_program(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("mp") / "mp.pdmodel")
    build(path)
    return path


def run_tool(capsys, *argv):
    capsys.readouterr()
    rc = dump.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _rows(report: str, section: str) -> list[str]:
    lines = report.split(section, 1)[1].split("\n\n", 1)[0].splitlines()
    return [line.split() for line in lines[2:] if not line.strip().startswith("sharded")]


def test_text_names_each_collectives_group(mp_program, capsys):
    rc, out, err = run_tool(capsys, mp_program, "--nranks", "4", "--mp-degree", "2", "--rank", "3")
    assert rc == 0, err
    collectives = [line for line in out.splitlines() if "= AllReduce(" in line or "= AllGather(" in line]
    # Rank 3 is mp rank 1 of the second model (ranks 2, 3); its shard's replica is rank 1.
    model = [line for line in collectives if "group=(2, 3)" in line]
    buckets = [line for line in collectives if "bucket='grad_bucket_" in line]
    assert len(model) == 5 and sum("AllGather" in line for line in model) == 1
    assert buckets and all("group=(1, 3)" in line for line in buckets)
    assert len(model) + len(buckets) == len(collectives)


def test_report_lists_groups_buckets_and_shard_axes(mp_program, capsys):
    rc, out, err = run_tool(capsys, mp_program, "--nranks", "4", "--mp-degree", "2", "--rank", "2", "--report")
    assert rc == 0, err
    assert ("Groups: rank 2 of 4, mp_degree 2 (mp rank 0); model-parallel group: 2, 3; "
            "data-parallel group: 0, 2") in out
    rows = _rows(out, "Groups:")
    assert {(r[1], r[2] + r[3]) for r in rows} == {("AllReduce", "2,3"), ("AllGather", "2,3"), ("AllReduce", "0,2")}
    assert sum(r[4:6] == ["model", "parallel"] for r in rows) == 5
    assert sum(r[4:6] == ["gradient", "bucket"] for r in rows) == 4
    # The axes a checkpoint concatenates the shards along: rows of the embedding and of the
    # row-parallel weight, columns of the column-parallel ones and their biases; the row-parallel
    # bias is whole.
    assert (f"sharded parameters (the axis their shards cut; optimizer state follows): {EMBEDDING} 0, "
            f"{COLUMN}.b_0 0, {COLUMN}.w_0 1, {ROW}.w_0 0, {GATHERED}.b_0 0, {GATHERED}.w_0 1") in out
    assert "Data parallel: 4 ranks in groups of 2 (mp_degree 2)" in out
    # Each bucket lists its own parameters: its bytes are theirs (the embedding shard: 4x6 float32).
    block = out.split("Data parallel:", 1)[1]
    embedding_bucket = [b for b in block.split("\n  grad_bucket_")[1:] if f"parameters: {EMBEDDING}\n" in b]
    assert len(embedding_bucket) == 1 and "1 gradient(s), 96 bytes" in embedding_bucket[0]
    assert "N: the data-parallel group's ranks): 676 (676 B)" in out  # 2*(2-1)/2 x 676 bytes of gradients


def test_one_model_on_every_rank_has_no_gradient_allreduce(mp_program, capsys):
    rc, out, err = run_tool(capsys, mp_program, "--nranks", "2", "--mp-degree", "2", "--report")
    assert rc == 0, err
    assert "model-parallel group: every rank (0-1); data-parallel group: 0" in out
    assert all(r[2:4] == ["every", "rank"] for r in _rows(out, "Groups:"))
    assert "Data parallel: none: the 2 ranks hold the 2 shards of one model (mp_degree 2)" in out


def test_dot_shows_the_ranks_and_a_bad_rank_is_exit_2(mp_program, capsys):
    rc, out, err = run_tool(capsys, mp_program, "--nranks", "4", "--mp-degree", "2", "--rank", "1", "--format", "dot")
    assert rc == 0, err
    assert "AllGather\\nc_concat" in out and "ranks (0, 1)" in out and "ranks (1, 3)" in out
    rc, out, err = run_tool(capsys, mp_program, "--nranks", "2", "--mp-degree", "2", "--rank", "2")
    assert rc == 2 and err.strip() == "paddle-ngraph-dump: --rank 2 is not one of the --nranks 2 ranks"
