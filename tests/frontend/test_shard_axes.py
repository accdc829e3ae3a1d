"""frontend/shard_axes.py on the tensor-parallel transformer example's program (mp_degree 2): the
axis found for each of split's shards is the one the example cuts its dense weights along
(``parameter_table``), in the program as built (with Paddle's ``is_distributed`` flags) and read back
from its file (without them); the parameters every rank holds whole are not listed; Adam's moments
follow their parameter.

``paddle.distributed.split`` needs ``fleet.init`` (of one process here, as tests/fleet/test_strategy.py's).
"""
import os
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")


def build_and_read(path: str) -> dict:
    """Builds the example's program of mp rank 0, saves it to ``path``; returns the dense axes of the
    example's table, and shard_axes of the program in memory and read back from the file."""
    import argparse

    import paddle
    import paddle.distributed.fleet as fleet

    from paddle_ngraph.frontend import decode
    from paddle_ngraph.frontend.shard_axes import shard_axes

    sys.path.insert(0, EXAMPLES)
    import tensor_parallel_transformer as example

    paddle.enable_static()
    fleet.init(is_collective=True)
    a = argparse.Namespace(vocab=16, dim=8, heads=2, ffn=16, seq_len=4, batch_size=2, seed=1, lr=1e-3)
    with paddle.pir_utils.OldIrGuard():
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            _, _, loss = example.build(a, 2, 0)
            paddle.optimizer.Adam(a.lr).minimize(loss)
        in_memory = shard_axes(decode(main))
        with open(path, "wb") as f:
            f.write(main.desc.serialize_to_string())
    paddle.enable_static()
    read_back = shard_axes(decode(path))
    table = {name: axis for name, (_, axis, _) in example.parameter_table(a).items()}
    return {"table": table, "in_memory": in_memory, "read_back": read_back}


@pytest.fixture(scope="module")
def found(tmp_path_factory):
    return build_and_read(str(tmp_path_factory.mktemp("axes") / "tp.pdmodel"))


@pytest.mark.parametrize("source", ["in_memory", "read_back"])
def test_the_example_s_shards_are_cut_along_the_axes_of_its_table(found, source):
    axes = found[source]
    sharded = {name: axis for name, axis in found["table"].items() if axis is not None}
    assert {name: axes[name] for name in sharded if name in axes} == sharded
    assert not {name for name, axis in found["table"].items() if axis is None} & set(axes)  # whole on every rank
    for name, axis in sharded.items():  # Adam's moments, cut as their parameter
        assert axes[f"{name}_moment1_0"] == axes[f"{name}_moment2_0"] == axis
    assert len(axes) == 3 * len(sharded)
