"""Collectives over groups of ranks (ir/groups.py, ``Transport.group``): the MPI transport's group
communicators against NumPy, and IR collectives with a ``group`` on both backends, on 4 ranks laid
out as Paddle lays out tensor parallelism (mp_degree 2: model-parallel groups [0, 1] and [2, 3],
data-parallel groups [0, 2] and [1, 3])."""
import numpy as np
import pytest

from ranks import run_ranks
from paddle_ngraph.distributed import NullTransport
from paddle_ngraph.distributed.ccl import available as ccl_available
from paddle_ngraph.errors import ConfigError, TransportError, ValidationError
from paddle_ngraph.ir import Function, ops
from paddle_ngraph.ir.groups import RankLayout

NRANKS, MP = 4, 2


def _value(rank: int, shape, dtype="float32") -> np.ndarray:
    """What each rank contributes: distinct per rank, the same formula everywhere."""
    return (np.arange(np.prod(shape)).reshape(shape) * (rank + 1) + rank).astype(dtype)


def _group_function(group, axis_gather: int):
    x = ops.Parameter(dtype="float32", shape=(2, 3), name="x")
    n = len(group)
    summed = ops.AllReduce(x.output(), reduction="sum", group=group, name="sum_over_group")
    biggest = ops.AllReduce(x.output(), reduction="max", group=group, name="max_over_group")
    gathered = ops.AllGather(x.output(), world_size=n, axis=axis_gather, group=group, name="gather_over_group")
    scattered = ops.ReduceScatter(x.output(), world_size=n, reduction="sum", group=group, name="scatter")
    everywhere = ops.AllReduce(x.output(), reduction="sum", name="sum_over_all")
    return Function([x], {"sum": summed.output(0), "max": biggest.output(0), "gather": gathered.output(0),
                          "scatter": scattered.output(0), "all": everywhere.output(0)})


def groups_worker(transport_name: str = "mpi"):
    from paddle_ngraph.backends import get_backend
    from paddle_ngraph.distributed import make_transport

    transport = make_transport(transport_name)
    layout = RankLayout(transport.size, transport.rank, MP)
    mp, dp = layout.mp_group(), layout.dp_group()
    transport.make_groups([mp, dp])
    checked = []
    for name, group in (("mp", mp), ("dp", dp)):
        sub = transport.group(group)
        assert (sub.size, sub.rank) == (len(group), group.index(transport.rank)), (name, sub)
        for dtype in ("float32", "float64", "int64", "float16"):
            mine = _value(transport.rank, (4, 3), dtype)
            theirs = [_value(r, (4, 3), dtype) for r in group]
            np.testing.assert_array_equal(sub.allreduce(mine, "sum"), np.sum(theirs, axis=0).astype(dtype))
            np.testing.assert_array_equal(sub.allreduce(mine, "max"), np.max(theirs, axis=0))
            np.testing.assert_array_equal(sub.allgather(mine), np.concatenate(theirs))
            total = np.sum(theirs, axis=0).astype(dtype)
            np.testing.assert_array_equal(sub.reduce_scatter(mine, "sum"), np.split(total, len(group))[sub.rank])
        root_value = _value(group[1], (5,), "float32")
        got = sub.broadcast(_value(transport.rank, (5,), "float32"), root=1)
        np.testing.assert_array_equal(got, root_value)
        checked.append(name)

    # Which collectives the CPU backend leaves to the transport's Python object (its fallback).
    from paddle_ngraph.backends.cpu import executable

    through_python = []
    original = executable.Specialization._run_collective

    def counted(self, index, ins, outs):
        through_python.append(self.collectives[index].name)
        return original(self, index, ins, outs)

    executable.Specialization._run_collective = counted
    for backend in ("INTERPRETER", "CPU"):
        for group, axis in ((mp, 1), (dp, 0)):
            f = _group_function(group, axis)
            out = get_backend(backend).compile(f).call([_value(transport.rank, (2, 3))], transport)
            results = dict(zip(f.results, out))
            theirs = [_value(r, (2, 3)) for r in group]
            np.testing.assert_array_equal(results["sum"], np.sum(theirs, axis=0))
            np.testing.assert_array_equal(results["max"], np.max(theirs, axis=0))
            np.testing.assert_array_equal(results["gather"], np.concatenate(theirs, axis=axis))
            np.testing.assert_array_equal(results["scatter"],
                                          np.split(np.sum(theirs, axis=0), len(group))[group.index(transport.rank)])
            np.testing.assert_array_equal(results["all"], np.sum([_value(r, (2, 3)) for r in range(NRANKS)], axis=0))
            checked.append(f"{backend}:{group}")
    transport.close()
    return checked, sorted(set(through_python))


needs_ccl = pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")


@pytest.mark.distributed
@pytest.mark.parametrize("transport", ["mpi", pytest.param("ccl", marks=needs_ccl)])
def test_group_collectives_on_four_ranks(transport):
    run = run_ranks(groups_worker, NRANKS, transport)
    for rank, (checked, through_python) in enumerate(run.results):
        layout = RankLayout(NRANKS, rank, MP)
        assert checked == ["mp", "dp"] + [f"{b}:{g}" for b in ("INTERPRETER", "CPU")
                                         for g in (layout.mp_group(), layout.dp_group())]
        # MPI: the groups' collectives run from C++ over the groups' communicators, but for the
        # AllGather along axis 1; oneCCL's groups have no native path.
        grouped = ["gather_over_group", "max_over_group", "scatter", "sum_over_group"]
        assert through_python == (["gather_over_group"] if transport == "mpi" else grouped)


def test_layout_follows_paddles_topology():
    """mp innermost, as Paddle's CommunicateTopology orders ["data", "pipe", "sharding", "sep", "model"]."""
    assert [RankLayout(4, r, 2).mp_group() for r in range(4)] == [(0, 1), (0, 1), (2, 3), (2, 3)]
    assert [RankLayout(4, r, 2).dp_group() for r in range(4)] == [(0, 2), (1, 3), (0, 2), (1, 3)]
    assert RankLayout(2, 1, 2).mp_group() == ()  # every rank: the whole job
    assert RankLayout(2, 1, 2).dp_group() == (1,)
    assert RankLayout(2, 1, 1).ring(0) == ()  # no model parallelism: ring 0 is the global ring
    assert RankLayout(4, 3, 2).ring(2) == (1, 3)
    with pytest.raises(ConfigError, match="mp_degree 3 must .* divide"):
        RankLayout(4, 0, 3)


def test_group_attribute_is_checked():
    x = ops.Parameter(dtype="float32", shape=(2, 3), name="x")
    with pytest.raises(ValidationError, match="distinct ranks"):
        ops.AllReduce(x.output(), group=(1, 0))
    with pytest.raises(ValidationError, match="world_size 3 is not the size of group"):
        ops.AllGather(x.output(), world_size=3, group=(0, 1))
    assert ops.AllGather(x.output(), world_size=2, axis=-1, group=(0, 1)).output_types[0].shape == (2, 6)


def test_one_process_groups():
    t = NullTransport()
    assert t.group((0,)) is t and t.group(()) is t
    with pytest.raises(TransportError, match="beyond the job"):
        t.group((0, 1))


def test_groups_survive_serialization():
    from paddle_ngraph.ir import from_json, to_json

    f = _group_function((1, 3), 1)
    back = from_json(to_json(f))
    groups = sorted((n.name, n.attrs["group"]) for n in back.ordered_nodes() if "group" in n.attrs)
    assert groups == sorted((n.name, n.attrs["group"]) for n in f.ordered_nodes() if "group" in n.attrs)
    assert ("gather_over_group", (1, 3)) in groups and ("sum_over_all", ()) in groups
