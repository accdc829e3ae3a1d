"""The compile passes of the CPU backend: fusion, duplicates, liveness (order, in-place), memory plan."""
import numpy as np
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph.backends import get_backend
from paddle_ngraph.distributed.transport import NullTransport
from paddle_ngraph.ir.roles import STATE_PREFIX
from paddle_ngraph.ir import Function, clone_function, ops
from paddle_ngraph.passes import InsertAllReduce, PassManager
from paddle_ngraph.passes.eliminate_duplicates import EliminateDuplicates
from paddle_ngraph.backends.cpu.passes.fuse_matmul_bias import FuseMatMulBias
from paddle_ngraph.backends.cpu.passes.liveness import Liveness
from paddle_ngraph.backends.cpu.passes.memory_plan import MemoryPlan
from paddle_ngraph.passes.shard_optimizer import ShardOptimizer
from paddle_ngraph.zoo.models import build_program, make_batch

from harness import assert_trained_close

paddle.enable_static()


def model_function(model="mnist_mlp", optimizer="sgd", batch=8, nranks=1, zero_stage=0, compress="none"):
    main, startup, _, _ = build_program(model, optimizer)
    function = paddle_ngraph.convert(main)
    if nranks > 1:
        sharded = [ShardOptimizer(nranks, min_buckets=4)] if zero_stage else []
        PassManager(sharded + [InsertAllReduce(nranks, min_buckets=4, compress=compress)]).run(function)
    feed = make_batch(model, batch, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    inputs = []
    for p in function.parameters:
        t = p.output_types[0]
        inputs.append(feed[p.name] if p.name in feed else
                      (rng.standard_normal([d if d >= 0 else batch for d in t.shape]) * 0.1).astype(t.dtype.numpy))
    shapes = {p.name: a.shape for p, a in zip(function.parameters, inputs)}
    return clone_function(function, shapes), inputs


def state_map(function):
    names = {p.name for p in function.parameters}
    return {r: r[len(STATE_PREFIX):] for r in function.results if r[len(STATE_PREFIX):] in names}


def run(function, inputs, backend="INTERPRETER", **compile_args):
    outs = get_backend(backend).compile(function, **compile_args).call([np.array(a) for a in inputs])
    return [np.array(o) for o in outs]


def test_fusion_makes_matmul_bias_and_keeps_results():
    function, inputs = model_function()
    expected = run(function, inputs)
    fuse = FuseMatMulBias()
    PassManager([fuse]).run(function)
    fused = [n for n in function.ordered_nodes() if n.op_type == "MatMulBias"]
    assert sorted(n.attrs["activation"] for n in fused) == ["none", "relu"]
    assert not any(n.op_type == "Relu" for n in function.ordered_nodes())  # absorbed, ReluBackprop reads the fused output
    for got, want in zip(run(function, inputs), expected):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_fusion_leaves_a_matmul_whose_product_is_read_elsewhere():
    x = ops.Parameter(dtype="float32", shape=(2, 3), name="x")
    w = ops.Parameter(dtype="float32", shape=(3, 4), name="w")
    b = ops.Parameter(dtype="float32", shape=(4,), name="b")
    mm = ops.MatMul(x.output(), w.output(), name="mm")
    f = Function([x, w, b], {"y": ops.Add(mm.output(), b.output()).output(), "raw": mm.output()})
    assert FuseMatMulBias().run(f) is False


def test_duplicates_are_merged_and_random_nodes_are_not():
    x = ops.Parameter(dtype="float32", shape=(4,), name="x")
    a1, a2 = ops.Exp(x.output()), ops.Exp(x.output())
    d1, d2 = ops.DropoutMask(x.output(), prob=0.5), ops.DropoutMask(x.output(), prob=0.5)
    f = Function([x], {"a": ops.Add(a1.output(), a2.output()).output(), "d1": d1.output(), "d2": d2.output()})
    dedup = EliminateDuplicates()
    PassManager([dedup]).run(f)
    assert dedup.removed == 1
    assert sum(n.op_type == "Exp" for n in f.ordered_nodes()) == 1
    assert sum(n.op_type == "DropoutMask" for n in f.ordered_nodes()) == 2


@pytest.mark.parametrize("model", ["mnist_mlp", "resnet_small", "transformer_layer"])
def test_memory_plan_never_overlaps_two_live_buffers(model):
    function, _ = model_function(model, batch=4, nranks=2)
    live = Liveness(state_map(function))
    plan = MemoryPlan(live)
    PassManager([live, plan]).run(function)
    arena = [r for r in live.roots.values() if r.kind == "arena"]
    for i, a in enumerate(arena):
        for b in arena[i + 1:]:
            if a.first <= b.last and b.first <= a.last:  # alive at a common step
                oa, ob = plan.offsets[a.key], plan.offsets[b.key]
                assert oa + a.nbytes <= ob or ob + b.nbytes <= oa, f"{a.key} and {b.key} overlap"
    assert plan.arena_bytes < plan.unplanned_bytes  # reuse happened


def test_overlap_order_starts_buckets_early_and_waits_late():
    function, _ = model_function("resnet_small", batch=4, nranks=2)
    live = Liveness()
    live.run(function)
    kinds = [(s.kind, s.node) for s in live.steps]
    position = {(k, n.id): i for i, (k, n) in enumerate(kinds)}
    starts = [n for k, n in kinds if k == "start"]
    assert len(starts) >= 4  # min_buckets
    for c in starts:
        start = position[("start", c.id)]
        # started as soon as its bucket is complete: right after its last input's producer...
        producers = [position[("compute", i.node.id)] for i in c.inputs]
        assert start > max(producers)
        between = [n for k, n in kinds[max(producers) + 1:start] if k == "compute"]
        assert not between, f"{c.name} waited for {[n.name for n in between]}"
        # ...and waited for just before its first reader
        wait = position[("wait", c.id)]
        readers = [position[("compute", n.id)] for k, n in kinds if k == "compute"
                   and any(i.node.id == c.id for i in n.inputs)]
        assert wait == min(readers) - 1 or kinds[wait + 1][0] == "wait"
    # the backward pass goes on between the first start and its wait
    first = starts[0]
    computed = [n for k, n in kinds[position[("start", first.id)]:position[("wait", first.id)]] if k == "compute"]
    assert any(n.op_type.startswith("Convolution") for n in computed)


def test_updates_go_in_place_after_every_other_reader_of_their_parameter():
    function, inputs = model_function("mnist_mlp", optimizer="adam")
    live = Liveness(state_map(function))
    live.run(function)
    assert len(live.inplace) == len(state_map(function))  # 4 parameters and their moments
    order = {s.node.id: i for i, s in enumerate(live.steps)}
    for (node_id, _), param_id in live.inplace.items():
        readers = [n for n in function.ordered_nodes() if any(i.node.id == param_id for i in n.inputs)]
        assert all(order[r.id] <= order[node_id] for r in readers)


def test_cpu_backend_writes_updated_state_into_the_inputs_and_matches_the_interpreter():
    function, inputs = model_function("mnist_mlp", optimizer="momentum")
    expected = dict(zip(function.results, run(function, inputs)))
    arrays = [np.array(a) for a in inputs]
    executable = get_backend("CPU").compile(function, inplace_results=state_map(function))
    outs = dict(zip(function.results, executable.call(arrays)))
    index = {p.name: i for i, p in enumerate(function.parameters)}
    for result, param in state_map(function).items():
        assert np.shares_memory(outs[result], arrays[index[param]]), result
        assert_trained_close(arrays[index[param]], expected[result], "momentum", result, lr=0.03)


def planned(function):
    live = Liveness(state_map(function))
    plan = MemoryPlan(live)
    PassManager([live, plan]).run(function)
    return live, plan


def arena_range(live, plan, output):
    """[first byte, end) of a value in the arena."""
    value = (output.node.id, output.index)
    start = plan.offsets[live.value_root[value]] + live.value_offset[value]
    return start, start + output.type.nbytes()


@pytest.mark.parametrize("model,optimizer,compress", [("mnist_mlp", "sgd", "none"), ("resnet_small", "momentum", "none"),
                                                      ("transformer_layer", "adam", "none"), ("lenet", "sgd", "bf16")])
def test_gradients_are_written_into_their_bucket_region(model, optimizer, compress):
    function, _ = model_function(model, optimizer, batch=4, nranks=2, compress=compress)
    live, plan = planned(function)
    starts = [s for s in live.steps if s.kind == "start"]
    assert len(starts) >= 2
    for step in starts:
        bucket = step.node
        assert step.pack == (), f"{bucket.name} packs {[bucket.inputs[k].node.name for k in step.pack]}"
        region = plan.offsets[("region", bucket.id)]
        for k, grad in enumerate(bucket.inputs):
            # the gradient's buffer is the k-th slot of the region: the AllReduce reads and writes it in place
            assert arena_range(live, plan, grad) == arena_range(live, plan, bucket.output(k))
            start, end = arena_range(live, plan, grad)
            assert region <= start and end <= region + live.roots[("region", bucket.id)].nbytes
            # and the region is allocated from the moment that gradient is produced
            produced = next(p for p, s in enumerate(live.steps) if s.node is grad.node and s.kind == "compute")
            assert live.roots[("region", bucket.id)].first <= produced


def test_zero_flattened_bucket_holds_its_gradients():
    function, _ = model_function("mnist_mlp", "adam", batch=4, nranks=2, zero_stage=1)
    live, plan = planned(function)
    scatters = [s.node for s in live.steps if s.kind == "start" and s.node.op_type == "ReduceScatter"]
    assert len(scatters) >= 2
    for scatter in scatters:
        concat = scatter.inputs[0].node
        assert concat.op_type == "Concat"
        offset = arena_range(live, plan, concat.output(0))[0]
        for piece in concat.inputs:
            if piece.node.op_type == "Constant":  # the padding to a multiple of the ranks: copied
                continue
            assert arena_range(live, plan, piece) == (offset, offset + piece.type.nbytes()), piece.node.name
            offset += piece.type.nbytes()


class RootTransport(NullTransport):
    """A second rank as the root of every broadcast, holding twice this rank's values."""

    size = 2

    def broadcast(self, array, root=0):
        return np.array(array) * 2


def test_a_value_read_after_its_bucket_starts_is_packed_and_not_overwritten():
    # A Broadcast, in place in its region like an AllReduce bucket: the CPU backend reduces AllReduce
    # only through a native communicator, while a Broadcast takes the transport's Python path.
    x = ops.Parameter(dtype="float32", shape=(5,), name="x")
    w = ops.Parameter(dtype="float32", shape=(3,), name="w")
    g = ops.Negative(x.output(), name="g")  # read again after the bucket starts, below
    h = ops.Negative(w.output(), name="h")  # a result: the collective must not overwrite it
    k = ops.Multiply(w.output(), w.output(), name="k")  # an ordinary gradient
    bucket = ops.Broadcast(g.output(), h.output(), k.output(), x.output(), name="bucket")
    late = ops.Multiply(g.output(), g.output(), name="late")
    f = Function([x, w], {"r0": bucket.output(0), "r1": bucket.output(1), "r2": bucket.output(2),
                          "r3": bucket.output(3), "late": late.output(), "h": h.output()})
    live, _ = planned(clone_function(f))
    start = next(s for s in live.steps if s.kind == "start")
    assert start.pack == (0, 1, 3)  # k alone was written into the region; x is an input
    xs, ws = np.linspace(-1, 1, 5).astype(np.float32), np.array([0.5, -2.0, 3.0], np.float32)
    outs = dict(zip(f.results, get_backend("CPU").compile(f).call([xs, ws], transport=RootTransport())))
    np.testing.assert_array_equal(outs["r0"], -2 * xs)
    np.testing.assert_array_equal(outs["r1"], -2 * ws)
    np.testing.assert_array_equal(outs["r2"], 2 * ws * ws)
    np.testing.assert_array_equal(outs["r3"], 2 * xs)
    np.testing.assert_array_equal(outs["late"], xs * xs)
    np.testing.assert_array_equal(outs["h"], -ws)


def test_concat_of_whole_blocks_takes_its_pieces_in_place():
    x = ops.Parameter(dtype="float32", shape=(2, 3), name="x")
    w = ops.Parameter(dtype="float32", shape=(4,), name="w")
    a = ops.Reshape(ops.Negative(x.output(), name="a").output(), shape=(-1,), name="a_flat")  # placed
    b = ops.Multiply(w.output(), w.output(), name="b")  # placed, and read again after the Concat
    pad = ops.Constant(np.zeros(2), dtype="float32", name="pad")  # copied
    joined = ops.Concat(a.output(), w.output(), b.output(), pad.output(), axis=0, name="joined")  # w copied
    f = Function([x, w], {"joined": joined.output(), "b2": ops.Add(b.output(), b.output()).output()})
    live, plan = planned(clone_function(f))
    concat = next(s.node for s in live.steps if s.node.op_type == "Concat")
    start = arena_range(live, plan, concat.output(0))[0]
    assert arena_range(live, plan, concat.inputs[0]) == (start, start + 24)
    assert arena_range(live, plan, concat.inputs[2]) == (start + 40, start + 56)
    assert live.value_root[(concat.inputs[1].node.id, 0)] != live.value_root[(concat.id, 0)]
    xs, ws = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, -2, 3, 0.5], np.float32)
    outs = dict(zip(f.results, get_backend("CPU").compile(f).call([xs, ws])))
    np.testing.assert_array_equal(outs["joined"], np.concatenate([-xs.reshape(-1), ws, ws * ws, np.zeros(2, np.float32)]))
    np.testing.assert_array_equal(outs["b2"], 2 * ws * ws)
