"""The local ops of Paddle's tensor-parallel programs against Paddle's own CPU kernels, in both IRs
(legacy programs: paddle.distributed.split emits them there; PIR: fleet.meta_parallel's layers
captured from dygraph). The collectives among them need ranks: tests/distributed/
test_model_parallel.py and test_dygraph_model_parallel.py train them against Paddle's dense model."""
import numpy as np
import pytest

from harness import check_against_paddle, static_op
import paddle_ngraph
from paddle_ngraph.errors import RefusedOpError
import paddle


def _shard_case(dtype, start_index):
    rng = np.random.default_rng(3)
    table = rng.standard_normal((4, 5)).astype(dtype)
    ids = rng.integers(0, 12, (3, 7)).astype("int64")
    ids[0, :3] = [start_index, start_index + 3, (start_index + 4) % 12]  # both ends, and just past
    return table, ids


def _c_embedding(start_index):
    from paddle import _C_ops

    return lambda w, ids: static_op(lambda: _C_ops.c_embedding(w, ids, start_index, 12), "c_embedding",
                                    {"W": w, "Ids": ids}, {"start_index": start_index, "vocab_size": 12})


@pytest.mark.parametrize("ir", ["legacy", "pir"])
@pytest.mark.parametrize("start_index", [0, 4, 8])
def test_c_embedding_reads_its_shard_and_zeros_elsewhere(start_index, ir):
    """A shard of rows [start_index, start_index + 4) of a 12-row table; ids anywhere in the
    vocabulary (those of other shards read zeros, and their gradients reach no row here)."""
    table, ids = _shard_case("float32", start_index)
    check_against_paddle(_c_embedding(start_index), {"w": table, "ids": ids}, ir=ir)


@pytest.mark.parametrize("start_index", [0, 4, 8])
def test_c_embedding_in_float64(start_index):
    """Forward against Paddle; the gradient against NumPy: Paddle 3.3.1's CPU c_embedding_grad
    clears ``numel * sizeof(DataType)`` bytes (4 per element) of its float64 output before adding
    into it, so the second half of its rows holds whatever the memory held."""
    table, ids = _shard_case("float64", start_index)
    check_against_paddle(_c_embedding(start_index), {"w": table, "ids": ids}, ir="legacy", grads=False)
    with paddle.pir_utils.OldIrGuard():
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            w = paddle.static.data("w", list(table.shape), "float64")
            w.stop_gradient = False
            i = paddle.static.data("ids", list(ids.shape), "int64")
            out = _c_embedding(start_index)(w, i)
            delta = paddle.static.data("delta", [3, 7, 5], "float64")
            total = static_op(None, "reduce_sum", {"X": out * delta}, {"dim": [], "reduce_all": True, "keep_dim": False})
            (grad,) = paddle.static.gradients([total], [w])
        function = paddle_ngraph.convert(main, fetch_list=[grad])
    dout = np.random.default_rng(5).standard_normal((3, 7, 5))
    from harness import run_function

    got = next(iter(run_function(function, {"w": table, "ids": ids, "delta": dout}).values()))
    want = np.zeros_like(table)
    local = ids.reshape(-1) - start_index
    inside = (local >= 0) & (local < 4)
    np.add.at(want, local[inside], dout.reshape(-1, 5)[inside])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _program_with(op_type: str, attrs: dict, slots=("X", "Out")):
    with paddle.pir_utils.OldIrGuard():
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [4, 6], "float32")
            out = static_op(None, op_type, {slots[0]: x}, attrs, outputs=(slots[1],))
    return main, out


def test_a_ring_of_another_size_is_refused_by_name():
    """c_concat's nranks must be the ring's size here: one rank, ring 0 is every rank."""
    main, out = _program_with("c_concat", {"ring_id": 0, "nranks": 2, "rank": 0})
    with pytest.raises(RefusedOpError, match=r"c_concat.*nranks 2, but ring 0 has 1 rank\(s\) here"):
        paddle_ngraph.convert(main, fetch_list=[out])
    main, out = _program_with("all_reduce", {"ring_id": 5, "reduce_type": 0}, ("x", "out"))
    with pytest.raises(RefusedOpError, match="ring_id 5 is none of the rings"):
        paddle_ngraph.convert(main, fetch_list=[out])
