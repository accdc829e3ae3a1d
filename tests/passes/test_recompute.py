"""The recompute pass on IR functions: which forward nodes are copied into backward, what the copies
read, the order they run in, and that both backends compute the same bits with fewer bytes alive."""
import numpy as np
import paddle
import pytest

from paddle_ngraph.backends import get_backend
from paddle_ngraph.frontend import ConversionSession, decode, forward_sinks
from paddle_ngraph.passes.recompute import RECOMPUTE_PREFIX
from paddle_ngraph.passes import PassManager
from paddle_ngraph.passes.eliminate_duplicates import EliminateDuplicates
from paddle_ngraph.passes.recompute import Recompute
from paddle_ngraph.zoo.models import FEEDS, build_program, checkpoint_names

paddle.enable_static()


def converted(model, **kwargs):
    """(function, forward node ids, checkpoint values) of ``model``'s PIR training program."""
    main, _, _, _ = build_program(model, "adam", **kwargs)
    view = decode(main)
    session = ConversionSession(view)
    session.convert_ops([op for op in view.ops if op.block == 0])
    fetch = [n for op in forward_sinks(view) for n in op.output_names() if n in session.env]
    function = session.function(fetch)
    return function, session.forward_ids, [session.env[n] for n in checkpoint_names(model, main)]


def recomputed(model, **kwargs):
    function, forward, checkpoints = converted(model, **kwargs)
    recompute = Recompute(checkpoints, forward)
    PassManager([recompute]).run(function)
    return function, forward, checkpoints, recompute


def copies(function):
    return [n for n in function.ordered_nodes() if n.name.startswith(RECOMPUTE_PREFIX)]


def test_forward_nodes_before_the_last_checkpoint_are_copied_for_their_backward_readers():
    function, forward, checkpoints, recompute = recomputed("transformer_layer", dropout=0.1)
    made = copies(function)
    assert made and len(made) == len(recompute.recomputed) and recompute.redirected > 0
    by_name = {n.name: n for n in function.ordered_nodes()}
    checkpoint_ids = {c.node.id for c in checkpoints}
    for copy in made:
        original = by_name[copy.name[len(RECOMPUTE_PREFIX):]]
        assert original.id in forward and original.id not in checkpoint_ids
        assert type(copy) is type(original) and copy.attrs == original.attrs
        # Same inputs, or the copies of recomputed ones.
        for mine, theirs in zip(copy.inputs, original.inputs):
            assert mine.index == theirs.index
            assert mine.node is theirs.node or mine.node.name == RECOMPUTE_PREFIX + theirs.node.name
    # Forward nodes never read a copy; backward nodes no longer read a recomputed original.
    originals = {by_name[c.name[len(RECOMPUTE_PREFIX):]].id for c in made}
    for node in function.ordered_nodes():
        if node.id in forward:
            assert not any(i.node.name.startswith(RECOMPUTE_PREFIX) for i in node.inputs), node.name
        elif not node.name.startswith(RECOMPUTE_PREFIX):
            assert not any(i.node.id in originals for i in node.inputs), node.name


def test_dropout_masks_are_kept_and_read_by_the_copies():
    function, _, _, _ = recomputed("transformer_layer", dropout=0.1)
    assert not [c for c in copies(function) if c.op_type == "DropoutMask"]
    masks = {n.id for n in function.ordered_nodes() if n.op_type == "DropoutMask"}
    assert masks and any(i.node.id in masks for c in copies(function) for i in c.inputs)


def test_nothing_after_the_last_checkpoint_is_recomputed():
    function, forward, checkpoints, recompute = recomputed("mnist_mlp")
    assert not recompute.recomputed and not copies(function)  # relu, then logits: nothing between


def test_copies_run_in_backward_after_the_forward_pass():
    function, forward, _, _ = recomputed("resnet_small")
    order = function.ordered_nodes()
    position = {n.id: k for k, n in enumerate(order)}
    last_forward = max(position[i] for i in forward if i in position)
    users = function.users()
    for copy in copies(function):
        assert position[copy.id] > last_forward
    # A copy runs after the other inputs of the reader that pulls it in: the first copy runs once the
    # gradient reaching the last block exists, not right after the loss.
    first = min(copies(function), key=lambda c: position[c.id])
    reader = min(users[first.id], key=lambda u: position[u.id])
    while reader.name.startswith(RECOMPUTE_PREFIX):
        reader = min(users[reader.id], key=lambda u: position[u.id])
    assert any(position[i.node.id] > last_forward for i in reader.inputs if i.node.id not in forward)


def test_eliminate_duplicates_keeps_the_copies():
    function, _, _, _ = recomputed("resnet_small")
    before = len(copies(function))
    PassManager([EliminateDuplicates()]).run(function)
    assert len(copies(function)) == before > 0


def _inputs(function, batch, seed):
    rng = np.random.default_rng(seed)
    out = []
    for p in function.parameters:
        t = p.output_types[0]
        shape = [batch if d < 0 else d for d in t.shape]
        high = next((h for spec in FEEDS.values() for n, (_, _, h) in spec.items() if n == p.name), None)
        if t.dtype.numpy.kind in "iu":
            out.append(rng.integers(0, high or 2, size=shape).astype(t.dtype.numpy))
        else:
            value = rng.standard_normal(shape) * 0.1
            if "moment" in p.name:
                value = np.abs(value)
            if "pow_acc" in p.name or "learning_rate" in p.name:
                value = np.full(shape, 0.5)
            out.append(value.astype(t.dtype.numpy))
    return out


@pytest.mark.parametrize("model", ["transformer_layer", "resnet_small", "lenet"])
def test_both_backends_compute_the_same_bits_with_less_memory(backend, model):
    kwargs = {"dropout": 0.0} if model == "transformer_layer" else {}
    plain, _, _ = converted(model, **kwargs)
    function, _, _, recompute = recomputed(model, **kwargs)
    assert recompute.recomputed
    compiler = get_backend(backend)
    inputs = _inputs(plain, 16, 0)
    assert [p.name for p in plain.parameters] == [p.name for p in function.parameters]
    expected = compiler.compile(plain)
    got = compiler.compile(function)
    for step in range(2):  # the second step from the first one's updated state
        a = [np.array(v, copy=True) for v in expected.call(inputs)]
        b = [np.array(v, copy=True) for v in got.call(inputs)]
        for name, x, y in zip(plain.results, a, b):
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), f"step {step}: {name}"
    if backend == "CPU":
        assert got.peak_bytes < expected.peak_bytes
