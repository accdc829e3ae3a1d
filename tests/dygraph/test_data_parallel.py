"""paddle_ngraph.DataParallel in one process: the Layer's forward and backward on the engine.

Against the same Layer in plain dygraph Paddle, from the same weights: parameters after training
(the user's optimizer with clipping and weight decay, in Paddle), batch-norm running statistics,
eval mode, outputs and their structure, gradients of inputs, new input shapes, checkpoints.
"""
import inspect
import os

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest
from paddle import nn

import paddle_ngraph
from paddle_ngraph.dygraph.runner import LayerEngine

# Every test here runs in dygraph mode (conftest.dynamic_mode), restored after it.
pytestmark = pytest.mark.usefixtures("dynamic_mode")
BACKENDS = ["CPU", "INTERPRETER"]


class ConvBN(nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2D(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2D(4)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        h = F.relu(self.bn(self.conv(x)))
        return self.fc(self.drop(h).reshape([x.shape[0], -1]))


class TwoOutputs(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 8), nn.Linear(8, 3)

    def forward(self, x):
        h = F.tanh(self.fc1(x))
        return {"logits": self.fc2(h), "hidden": h}


def pair(cls, **options):
    paddle.seed(0)
    reference = cls()
    mine = cls()
    mine.set_state_dict(reference.state_dict())
    return reference, paddle_ngraph.DataParallel(mine, **options)


def optimizer(model):
    return paddle.optimizer.Momentum(0.05, parameters=model.parameters(), grad_clip=nn.ClipGradByGlobalNorm(1.0),
                                     weight_decay=1e-3)


def assert_state_close(a, b, tol=1e-5):
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        np.testing.assert_allclose(sb[k].numpy(), sa[k].numpy(), rtol=tol, atol=tol, err_msg=k)


def train_convbn_side_by_side(reference, model, steps: int, seed: int) -> list[tuple[float, float]]:
    """``steps`` steps of ConvBN's loop on the same batches for both; each step's (reference, model) losses."""
    o1, o2 = optimizer(reference), optimizer(model)
    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(steps):
        x = paddle.to_tensor(rng.standard_normal((4, 3, 6, 6)).astype("float32"))
        y = paddle.to_tensor(rng.integers(0, 5, (4, 1)))
        step = []
        for m, o in ((reference, o1), (model, o2)):
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            o.step()
            o.clear_grad()
            step.append(float(loss))
        losses.append(tuple(step))
    return losses


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_matches_paddle_with_batch_norm(backend):
    # Dropout in training draws different masks on the engine: p=0 here, eval mode below.
    reference, model = pair(ConvBN, backend=backend)
    reference.drop.p = model._layers.drop.p = 0.0
    for reference_loss, loss in train_convbn_side_by_side(reference, model, steps=4, seed=0):
        assert abs(reference_loss - loss) < 1e-5
    assert_state_close(reference, model)  # includes bn._mean/_variance, updated in place
    engine = model.engine
    assert engine in paddle_ngraph.engines() and engine.steps == 4 and engine.eager_steps == 0


def test_eval_mode_and_no_grad_run_forward_only():
    reference, model = pair(ConvBN)
    x = paddle.to_tensor(np.random.default_rng(1).standard_normal((3, 3, 6, 6)).astype("float32"))
    reference.eval()
    model.eval()
    assert not model._layers.training and not model._layers.drop.training
    with paddle.no_grad():
        np.testing.assert_allclose(model(x).numpy(), reference(x).numpy(), rtol=1e-5, atol=1e-5)
    mean_before = model._layers.bn._mean.numpy().copy()
    out = model(x)  # eval mode with gradients enabled: dropout off, running statistics read, not updated
    np.testing.assert_allclose(out.numpy(), reference(x).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(model._layers.bn._mean.numpy(), mean_before)
    model.train()
    model(x)  # training mode again: the statistics move
    assert not np.array_equal(model._layers.bn._mean.numpy(), mean_before)
    keys = {(k[0], k[1]) for k in model.engine.compiled}
    assert (False, False) in keys and (False, True) in keys and (True, True) in keys


def test_output_structure_input_gradients_and_new_shapes():
    reference, model = pair(TwoOutputs, backend="INTERPRETER")
    for batch in (5, 3):  # a new shape re-specializes
        data = np.random.default_rng(batch).standard_normal((batch, 6)).astype("float32")
        results = []
        for m in (reference, model):
            x = paddle.to_tensor(data, stop_gradient=False)
            out = m(x)
            assert isinstance(out, dict) and set(out) == {"logits", "hidden"}
            (out["logits"].square().mean() + out["hidden"].sum() * 0.1).backward()
            results.append((out["logits"].numpy(), x.grad.numpy(), m.parameters()[0].grad.numpy()))
            m.clear_gradients()
        for a, b in zip(*results):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    assert len(model.engine.compiled) == 2


def test_gradients_accumulate_like_paddle_and_checkpoints_round_trip(tmp_path):
    # Optimizer checkpoints are keyed by parameter names: a resumed process makes the same names.
    with paddle.utils.unique_name.guard():
        reference, model = pair(TwoOutputs)
    x = paddle.to_tensor(np.random.default_rng(2).standard_normal((4, 6)).astype("float32"))
    for m in (reference, model):
        for _ in range(2):  # two backward passes without clear_grad: param.grad sums them
            m(x)["logits"].sum().backward()
    for p, q in zip(reference.parameters(), model.parameters()):
        np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-5, atol=1e-6)
    # SGD: Momentum's velocities are named by a global counter, which one process cannot replay.
    opt = paddle.optimizer.SGD(0.1, parameters=model.parameters(), grad_clip=nn.ClipGradByGlobalNorm(1.0))
    opt.step()
    paddle.save(model.state_dict(), str(tmp_path / "m.pdparams"))
    paddle.save(opt.state_dict(), str(tmp_path / "m.pdopt"))
    state = paddle.load(str(tmp_path / "m.pdparams"))
    assert set(state) == set(reference.state_dict())  # the Layer's own keys, as paddle.DataParallel's
    paddle.seed(5)
    with paddle.utils.unique_name.guard():
        TwoOutputs()
        fresh = paddle_ngraph.DataParallel(TwoOutputs())
    fresh.set_state_dict(state)
    fresh_opt = paddle.optimizer.SGD(0.1, parameters=fresh.parameters(), grad_clip=nn.ClipGradByGlobalNorm(1.0))
    fresh_opt.set_state_dict(paddle.load(str(tmp_path / "m.pdopt")))
    for m, o in ((model, opt), (fresh, fresh_opt)):
        o.clear_grad()
        m(x)["logits"].sum().backward()
        o.step()
    for p, q in zip(model.parameters(), fresh.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_gradients_accumulated_before_a_new_signature_are_kept():
    """Paddle's tracing of a new signature (here a new batch size, between two backward passes
    without clear_grad) resets every parameter's gradient: the sum must still be there after."""
    reference, model = pair(TwoOutputs)
    rng = np.random.default_rng(3)
    batches = [paddle.to_tensor(rng.standard_normal((n, 6)).astype("float32")) for n in (4, 2, 4, 3)]
    for m in (reference, model):
        for x in batches:
            m(x)["logits"].sum().backward()
    for p, q in zip(reference.parameters(), model.parameters()):
        np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-5, atol=1e-6)


class Alternating(nn.Layer):
    """Paddle's parallel_dygraph_control_flow_same model: ``self.step`` picks the branch."""

    def __init__(self):
        super().__init__()
        self.net_a, self.net_b = nn.Linear(6, 3), nn.Linear(6, 3)
        self.step = 0

    def forward(self, x):
        return self.net_a(x) if self.step % 2 == 0 else self.net_b(x)


def test_plain_attributes_the_forward_reads_key_the_captures(ngraph_logs):
    """A capture took ``self.step``'s value at its trace: the training loop changing it must change
    the branch, as in Paddle (the first capture ran for good). An attribute the class never reads
    (a counter the loop keeps on the Layer) does not capture again; many values of one it reads
    are told once."""
    reference, model = pair(Alternating)
    layer = model._layers
    ref_opt, opt = (paddle.optimizer.SGD(0.1, parameters=m.parameters()) for m in (reference, model))
    rng = np.random.default_rng(4)
    for step in range(4):
        x = paddle.to_tensor(rng.standard_normal((4, 6)).astype("float32"))
        reference.step = layer.step = step
        layer.seen = step  # never read by Alternating
        for m, o in ((reference, ref_opt), (model, opt)):
            m(x).square().mean().backward()
            o.step()
            o.clear_grad()
    for p, q in zip(reference.parameters(), model.parameters()):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-6, atol=1e-7)
    assert model._engine.steps == 4 and len(model._engine.compiled) == 4  # one per value of step, not of seen
    for step in range(4, 4 + 8):
        layer.step = step
        model(x)
    told = [r.getMessage() for r in ngraph_logs.records if "captured 8 times" in r.getMessage()]
    assert len(told) == 1 and "Alternating.step" in told[0], told


def test_a_sparse_embedding_is_told_to_get_a_dense_gradient(ngraph_logs):
    """Paddle's sparse Momentum and Adam differ from their dense forms, and the optimizer is the
    user's: the first capture says so once (with SGD the training equals plain Paddle's)."""
    reference, model = pair(lambda: nn.Sequential(nn.Embedding(20, 4, sparse=True), nn.Flatten(), nn.Linear(12, 2)))
    ids = paddle.to_tensor(np.array([[1, 5, 7], [2, 5, 9]], np.int64))
    ref_opt, opt = (paddle.optimizer.SGD(0.1, parameters=m.parameters()) for m in (reference, model))
    for _ in range(2):
        for m, o in ((reference, ref_opt), (model, opt)):
            m(ids).square().mean().backward()
            o.step()
            o.clear_grad()
    for p, q in zip(reference.parameters(), model.parameters()):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-6, atol=1e-7)
    told = [r.getMessage() for r in ngraph_logs.records if "Embedding(sparse=True)" in r.getMessage()]
    assert len(told) == 1 and "sparse Momentum and Adam differ" in told[0], told


def test_higher_order_gradients_are_refused_with_a_message():
    """The engine's backward builds no graph: paddle.grad(create_graph=True) then backward through
    it (a gradient penalty) gave the parameters no gradient, silently. It is refused, naming why."""
    _, model = pair(TwoOutputs)
    x = paddle.to_tensor(np.random.default_rng(5).standard_normal((4, 6)).astype("float32"), stop_gradient=False)
    with pytest.raises(Exception, match=r"TwoOutputs: paddle.grad\(..., create_graph=True\)"):
        paddle.grad(model(x)["logits"].sum(), [x], create_graph=True)
    # Without create_graph, the same gradient is the engine's, as Paddle's.
    reference, _ = pair(TwoOutputs)
    expected, = paddle.grad(reference(x)["logits"].sum(), [x])
    got, = paddle.grad(model(x)["logits"].sum(), [x] + [p for p in model.parameters()])[:1]
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_uncapturable_layer_runs_eagerly_with_one_message(ngraph_logs):
    class Branchy(TwoOutputs):
        def forward(self, x):
            h = F.tanh(self.fc1(x))
            if h.sum() > 1e9:
                h = h * 2.0
            return self.fc2(h)

    paddle.seed(0)
    model = paddle_ngraph.DataParallel(Branchy())
    x = paddle.ones([2, 6])
    for _ in range(3):
        model(x).sum().backward()
    model(paddle.ones([3, 6]))
    said = [r.getMessage() for r in ngraph_logs.records if "runs eagerly" in r.getMessage()]
    assert len(said) == 1 and "Branchy" in said[0] and "control flow" in said[0], said
    lines, first = inspect.getsourcelines(Branchy.forward)
    line = first + next(k for k, text in enumerate(lines) if "if h.sum()" in text)
    assert f"pd_op.if at {os.path.abspath(__file__)}:{line} (if h.sum() > 1e9:)" in said[0], said
    assert model.engine.steps == 0 and model.engine.eager_steps == 4
    assert isinstance(model.engine, LayerEngine)


class Counting(nn.Layer):
    """Paddle's parallel_dygraph_no_sync_control_flow: after ten calls the first layer stops training."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 8), nn.Linear(8, 3)
        self.step = 0

    def forward(self, x):
        self.step = self.step + 1
        h = self.fc1(x)
        if self.step > 10:
            h.stop_gradient = True
        return self.fc2(h)


def test_forward_counting_its_calls_runs_eagerly_and_trains_like_paddle(ngraph_logs):
    reference, model = pair(Counting)
    opts = [paddle.optimizer.SGD(0.1, parameters=m.parameters()) for m in (reference, model)]
    rng = np.random.default_rng(0)
    for _ in range(12):
        x = paddle.to_tensor(rng.standard_normal((4, 6)).astype(np.float32))
        for m, o in zip((reference, model), opts):
            m(x).sum().backward()
            o.step()
            o.clear_grad()
    assert_state_close(reference, model)  # fc1 frozen after ten steps in both
    assert model._layers.step == reference.step == 12  # the trace's call is not counted
    said = [r.getMessage() for r in ngraph_logs.records if "runs eagerly" in r.getMessage()]
    assert len(said) == 1 and "Counting.step (0 -> 1)" in said[0], said
    assert model.engine.steps == 0 and model.engine.eager_steps == 12


def test_precision_bf16_marks_the_forward_and_backward_and_trains_close_to_float32():
    """DataParallel(precision="bf16") on the INTERPRETER: the conv and matmuls of both functions are
    marked; the loss and the trained weights stay close to plain Paddle's float32 (the tolerance of
    bf16's 8 significant bits), and differ from them (the inputs were rounded)."""
    from paddle_ngraph.passes.mixed_precision import bf16_nodes

    reference, model = pair(ConvBN, backend="INTERPRETER", precision="bf16")
    reference.drop.p = model._layers.drop.p = 0.0
    for reference_loss, loss in train_convbn_side_by_side(reference, model, steps=3, seed=1):
        assert abs(reference_loss - loss) < 1e-2 * abs(reference_loss)
    compiled = next(c for c in model.engine.compiled.values() if c is not None)
    forward = sorted(n.op_type for n in bf16_nodes(compiled.capture.forward))
    backward = sorted(n.op_type for n in bf16_nodes(compiled.capture.backward))
    assert forward == ["Convolution", "MatMul"]
    assert backward == ["ConvolutionBackpropFilter", "MatMul", "MatMul"]  # no gradient of the input x
    assert_state_close(reference, model, tol=2e-2)
    assert not np.array_equal(reference.fc.weight.numpy(), model._layers.fc.weight.numpy())


def test_tensor_parallelism_without_fleets_hybrid_groups_is_refused():
    """docs/model-parallel.md: the tensor-parallel layers and the engine's rings come from the
    hybrid groups fleet.init builds (tests/distributed/test_dygraph_model_parallel.py runs them)."""
    with pytest.raises(paddle_ngraph.ConfigError, match="mp_degree 2 in dygraph: the tensor-parallel layers need "
                                                        "Paddle's hybrid groups; call fleet.init"):
        paddle_ngraph.DataParallel(TwoOutputs(), mp_degree=2)


class ConstantOutput(nn.Layer):
    """A forward whose output no gradient reaches: a constant made in forward, the parameters unused."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return paddle.full([1], 0.5, dtype="float32") + x.shape[0] * 0.0


class ConstantBeside(nn.Layer):
    """Two outputs: one trains the Linear, the other is a constant (its gradient's placeholder seed)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x), paddle.full([2], 1.5, dtype="float32")


@pytest.mark.parametrize("backend", BACKENDS)
def test_outputs_no_gradient_reaches_train_like_paddle(backend):
    # Paddle's outputs carry no gradient here (the constant's seed is Paddle's placeholder
    # variable): the Layer still runs on the engine, the constant equals Paddle's, and the output
    # beside it trains as in Paddle.
    rng = np.random.default_rng(3)
    for cls in (ConstantOutput, ConstantBeside):
        reference, model = pair(cls, backend=backend)
        o1 = paddle.optimizer.SGD(0.1, parameters=reference.parameters())
        o2 = paddle.optimizer.SGD(0.1, parameters=model.parameters())
        for _ in range(3):
            x = paddle.to_tensor(rng.standard_normal((4, 4)).astype("float32"))
            outputs = []
            for m, o in ((reference, o1), (model, o2)):
                out = m(x)
                out = out if isinstance(out, tuple) else (out,)
                assert out[-1].stop_gradient
                trained = [t for t in out if not t.stop_gradient]
                if trained:
                    sum(t.square().sum() for t in trained).backward()
                o.step()
                o.clear_grad()
                outputs.append([t.numpy() for t in out])
            for a, b in zip(*outputs):
                np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
        assert_state_close(reference, model)
        assert model.engine.eager_steps == 0 and model.engine.steps == 3


def test_sync_batch_norm_layer_refused_before_any_step():
    """A Layer with SyncBatchNorm: Paddle on CPU cannot run it (no sync_batch_norm CPU kernel; its
    to_static refuses the op), so the engine's capture would fail and the eager fallback would stop
    inside Paddle at the first forward. DataParallel refuses it at construction, naming the sublayers."""

    class ConvSyncBN(nn.Layer):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2D(3, 4, 3, bias_attr=False)
            self.norm = nn.SyncBatchNorm(4)
            self.head = nn.Sequential(nn.Conv2D(4, 4, 1), nn.SyncBatchNorm(4, weight_attr=False, bias_attr=False))

        def forward(self, x):
            return self.head(self.norm(self.conv(x))).mean()

    x = paddle.randn([2, 3, 6, 6])
    with pytest.raises(RuntimeError, match="sync_batch_norm"):  # Paddle alone, as the premise says
        ConvSyncBN()(x)
    with pytest.raises(paddle_ngraph.ConfigError, match=r"ConvSyncBN holds paddle.nn.SyncBatchNorm sublayer\(s\) "
                                                        r"norm, head.1: .*no CPU kernel"):
        paddle_ngraph.DataParallel(ConvSyncBN())


def test_pylayer_runs_eagerly_named_as_a_pylayer_and_trains_like_paddle(ngraph_logs):
    """A forward calling a PyLayer traces as pd_op.pylayer, whose backward is the user's Python: the
    Layer runs eagerly, the one message calls it a PyLayer (not control flow on tensor values) and
    gives the line calling its ``apply``, and it trains as plain Paddle."""
    from paddle.autograd import PyLayer

    class Cube(PyLayer):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensor()
            return dy * 3.0 * x * x

    class WithCube(TwoOutputs):
        def forward(self, x):
            return self.fc2(Cube.apply(F.tanh(self.fc1(x))))

    runs = []
    for wrap in (False, True):
        paddle.seed(3)
        layer = WithCube()
        model = paddle_ngraph.DataParallel(layer) if wrap else layer
        opt = paddle.optimizer.SGD(0.1, parameters=model.parameters())
        losses = []
        for step in range(3):
            loss = model(paddle.to_tensor(np.linspace(-1, 1, 12, dtype="float32").reshape(2, 6) * (step + 1))).sum()
            loss.backward()
            opt.step()
            opt.clear_grad()
            losses.append(float(loss))
        runs.append((losses, [p.numpy() for p in model.parameters()]))
    said = [r.getMessage() for r in ngraph_logs.records if "runs eagerly" in r.getMessage()]
    assert len(said) == 1 and "WithCube" in said[0] and "a PyLayer" in said[0] and "pd_op.pylayer" in said[0], said
    assert "control flow" not in said[0], said
    # The line calling .apply, once (not the line calling the Layer, nor the PyLayer's backward's).
    lines, first = inspect.getsourcelines(WithCube.forward)
    line = first + next(k for k, text in enumerate(lines) if "Cube.apply" in text)
    assert said[0].count("pd_op.pylayer at") == 1, said
    assert f"pd_op.pylayer at {os.path.abspath(__file__)}:{line} (return self.fc2(Cube.apply(" in said[0], said
    np.testing.assert_array_equal(runs[1][0], runs[0][0])
    for got, ref in zip(runs[1][1], runs[0][1]):
        np.testing.assert_array_equal(got, ref)
    assert model.engine.eager_steps == 3 and model.engine.steps == 0


class Grouped(nn.Layer):
    """Inputs in lists and tuples, nested, 9 tensors in all (a transformer's (word, position, bias)
    groups), some of them reaching a gradient."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(6, 5)
        self.dec = nn.Linear(6, 5)
        self.out = nn.Linear(5, 3)

    def forward(self, enc_inputs, dec_inputs, scale):
        a, b, (c, d) = enc_inputs
        e, f, g, h = dec_inputs
        enc = F.tanh(self.enc(a + b) * c + d)
        dec = F.tanh(self.dec(e * f) + g + h)
        return self.out(enc * dec) * scale, enc.sum()


def test_inputs_in_lists_and_tuples_are_captured_and_train_like_paddle():
    rng = np.random.default_rng(7)
    values = [rng.standard_normal(s).astype("float32") for s in
              ([4, 6], [4, 6], [4, 5], [4, 5], [4, 6], [4, 6], [4, 5], [4, 5], [4, 3])]
    runs = []
    for wrap in (False, True):
        paddle.seed(11)
        layer = Grouped()
        model = paddle_ngraph.DataParallel(layer) if wrap else layer
        opt = paddle.optimizer.SGD(0.1, parameters=model.parameters())
        losses, input_grads = [], []
        for step in range(3):
            t = [paddle.to_tensor(v * (step + 1)) for v in values]
            t[0].stop_gradient = t[6].stop_gradient = False  # in a tuple, and in a list
            out, enc_sum = model((t[0], t[1], [t[2], t[3]]), [t[4], t[5], t[6], t[7]], t[8])
            loss = (out * out).mean() + 0.01 * enc_sum
            loss.backward()
            input_grads.append([t[0].grad.numpy(), t[6].grad.numpy()])
            opt.step()
            opt.clear_grad()
            losses.append(float(loss))
        runs.append((losses, input_grads, [p.numpy() for p in model.parameters()]))
    assert model.engine.steps == 3 and model.engine.eager_steps == 0  # captured, not run eagerly
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-6)
    # Rounding of other summation orders, relative to each tensor as a whole (tests/harness.py).
    for got, ref in zip(runs[1][1], runs[0][1]):
        for g, r in zip(got, ref):
            assert np.linalg.norm(g - r) <= 1e-5 * np.linalg.norm(r)
    for got, ref in zip(runs[1][2], runs[0][2]):
        assert np.linalg.norm(got - ref) <= 1e-5 * np.linalg.norm(ref)


def test_inputs_of_other_kinds_still_run_eagerly(ngraph_logs):
    paddle.seed(11)
    model = paddle_ngraph.DataParallel(Grouped())
    t = [paddle.ones([2, 6]), paddle.ones([2, 6]), paddle.ones([2, 5]), paddle.ones([2, 5])]
    model((t[0], t[1], [t[2], t[3]]), [t[0], t[1], t[2], t[3]], 2.0)  # a Python float
    said = [r.getMessage() for r in ngraph_logs.records if "runs eagerly" in r.getMessage()]
    assert len(said) == 1 and "non-tensor positional inputs" in said[0], said
    assert model.engine.eager_steps == 1 and model.engine.steps == 0


class WithLabel(nn.Layer):
    """Paddle's own dygraph-to-static MNIST model is called ``model(img, label=label)``."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, inputs, label=None, scale=None):
        logits = self.fc(inputs) if scale is None else self.fc(inputs) * scale
        return logits, F.cross_entropy(logits, label)


def test_keyword_inputs_by_position_are_captured_and_train_like_paddle():
    rng = np.random.default_rng(8)
    xs, ys = rng.standard_normal((3, 4, 6)).astype("float32"), rng.integers(0, 3, (3, 4, 1))
    runs = []
    for wrap in (False, True):
        paddle.seed(12)
        layer = WithLabel()
        model = paddle_ngraph.DataParallel(layer) if wrap else layer
        opt = paddle.optimizer.Adam(0.01, parameters=model.parameters())
        losses = []
        for x, y in zip(xs, ys):
            _, loss = model(paddle.to_tensor(x), label=paddle.to_tensor(y))
            loss.backward()
            opt.step()
            opt.clear_grad()
            losses.append(float(loss))
        runs.append((losses, [p.numpy() for p in model.parameters()]))
    assert model.engine.steps == 3 and model.engine.eager_steps == 0  # captured, not run eagerly
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-6)
    for got, ref in zip(runs[1][1], runs[0][1]):
        assert np.linalg.norm(got - ref) <= 1e-5 * np.linalg.norm(ref)


def test_keyword_inputs_leaving_a_none_parameter_out_pass_it_as_none(ngraph_logs):
    """``scale=`` without ``label``: label's default None is passed as None; here the forward cannot
    take it (cross_entropy of None), so the Layer runs eagerly, the warning naming the line, and
    fails with Paddle's own error."""
    model = paddle_ngraph.DataParallel(WithLabel())
    with pytest.raises(Exception):  # label None: Paddle's own error, eagerly
        model(paddle.ones([2, 6]), scale=paddle.ones([1]))
    said = [r.getMessage() for r in ngraph_logs.records if "runs eagerly" in r.getMessage()]
    assert len(said) == 1 and "test_data_parallel.py:" in said[0] and "F.cross_entropy(logits, label)" in said[0], said
    assert model.engine.eager_steps == 1 and model.engine.steps == 0


class Optional(nn.Layer):
    """forward(x, gtbox=None, ..., im_shape=None), as Paddle's YOLOv3 test model: called at inference
    as ``model(img, im_shape=shape)``, or with the Nones given."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x, mask=None, scale=None):
        h = self.fc(x)
        if mask is not None:
            h = h * mask
        return h if scale is None else h * scale


def test_none_inputs_are_captured_and_train_like_paddle():
    rng = np.random.default_rng(9)
    xs, ss = rng.standard_normal((3, 4, 6)).astype("float32"), rng.uniform(0.5, 2.0, (3, 4, 3)).astype("float32")
    runs = []
    for wrap in (False, True):
        paddle.seed(13)
        layer = Optional()
        model = paddle_ngraph.DataParallel(layer) if wrap else layer
        opt = paddle.optimizer.SGD(0.1, parameters=model.parameters())
        for i, (x, s) in enumerate(zip(xs, ss)):
            x, s = paddle.to_tensor(x), paddle.to_tensor(s)
            out = model(x, scale=s) if i % 2 else model(x, None, s)
            (out ** 2).mean().backward()
            opt.step()
            opt.clear_grad()
        runs.append([p.numpy() for p in model.parameters()])
    assert model.engine.steps == 3 and model.engine.eager_steps == 0  # one signature, captured
    assert len(model.engine.compiled) == 1
    for got, ref in zip(runs[1], runs[0]):
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)


def test_paddle_data_parallels_own_arguments_are_taken():
    """paddle.DataParallel(layer, strategy, comm_buffer_size=25, last_comm_buffer_size=1,
    find_unused_parameters=False, group=None): Paddle's tests call it so (test_dist_base.py passes a
    ParallelStrategy second and find_unused_parameters=True); replacing the class must not need
    more. A group of part of the ranks is refused: the engine averages over all of them."""
    from paddle.distributed.parallel import ParallelStrategy

    from paddle_ngraph.errors import ConfigError

    reference, model = pair(TwoOutputs, find_unused_parameters=True, comm_buffer_size=25, last_comm_buffer_size=1,
                            group=None)
    x = paddle.ones([2, 6])
    np.testing.assert_allclose(model(x)["logits"].numpy(), reference(x)["logits"].numpy(), rtol=1e-6)
    assert model.engine.steps == 1
    paddle_ngraph.DataParallel(TwoOutputs(), ParallelStrategy(), find_unused_parameters=False)

    class Part:
        nranks = 3

    with pytest.raises(ConfigError, match="group of 3 of the 1 ranks"):
        paddle_ngraph.DataParallel(TwoOutputs(), group=Part())


def test_hooks_registered_on_parameters_run_at_every_backward_as_in_paddle():
    """``param.register_hook`` (a gradient scaled or logged on its way to ``param.grad``) sees
    each backward's gradient and what it returns is what accumulates: the engine hands parameter
    gradients to Paddle's accumulation, as Paddle's own backward does (it had added them in place
    from the second step on, and the hook got None)."""
    def train(wrap):
        paddle.seed(0)
        net = paddle.nn.Sequential(paddle.nn.Linear(4, 4), paddle.nn.ReLU(), paddle.nn.Linear(4, 2))
        seen = []
        net[0].weight.register_hook(lambda g: (seen.append(g.numpy().copy()), g * 0.5)[1])
        model = paddle_ngraph.DataParallel(net) if wrap else net
        opt = paddle.optimizer.SGD(0.1, parameters=model.parameters())
        x = paddle.to_tensor(np.random.default_rng(1).standard_normal((3, 4)).astype("float32"))
        for _ in range(3):
            model(x).sum().backward()
            opt.step()
            opt.clear_grad()
        return seen, net[0].weight.numpy(), (model.engine.steps if wrap else None)

    ref_seen, ref_weight, _ = train(False)
    seen, weight, steps = train(True)
    assert steps == 3 and len(seen) == len(ref_seen) == 3
    for got, want in zip(seen, ref_seen):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(weight, ref_weight, rtol=1e-6, atol=1e-7)


def test_a_layer_made_inside_forward_runs_eagerly_with_a_message(ngraph_logs):
    """A Layer built inside ``forward`` has new parameters at every call: the captured program would
    read the first call's, gone since (a KeyError at the first step). It runs eagerly, said once."""
    class MakesItsHead(nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            paddle.seed(7)  # the same new head at every call, in both runs
            return nn.Linear(4, 2)(self.fc(x))

    x = paddle.to_tensor(np.random.default_rng(2).standard_normal((3, 4)).astype("float32"))
    paddle.seed(0)
    reference = MakesItsHead()
    model = paddle_ngraph.DataParallel(MakesItsHead())
    model.set_state_dict(reference.state_dict())
    for m in (reference, model):
        for _ in range(2):
            m(x).sum().backward()
    np.testing.assert_allclose(model._layers.fc.weight.grad.numpy(), reference.fc.weight.grad.numpy(), rtol=1e-6)
    said = [r.getMessage() for r in ngraph_logs.records if "not the Layer's" in r.getMessage()]
    assert len(said) == 1 and "Layer MakesItsHead" in said[0] and "linear_" in said[0], said
    assert model.engine.steps == 0 and model.engine.eager_steps == 2


class KeepsWhatItComputes(nn.Layer):
    """Keeps its intermediate values in attributes, as Paddle's YOLOv3 test model keeps
    ``self.outputs`` and ``self.losses``: one set in __init__, one first set by the forward."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)
        self.outputs = []

    def forward(self, x):
        h = self.fc(x)
        self.outputs = [h]
        self.losses = {"square": (h * h).mean()}
        return h


def test_attributes_a_traced_forward_sets_hold_no_placeholders():
    """The trace ran the forward on placeholders of the program; left in the attributes, they were
    what ``model._layers.outputs`` gave after a call on the engine (float() of one failed)."""
    net = KeepsWhatItComputes()
    model = paddle_ngraph.DataParallel(net)
    model(paddle.ones([2, 6])).mean().backward()
    assert model.engine.steps == 1 and model.engine.eager_steps == 0
    assert net.outputs == [] and not hasattr(net, "losses")
