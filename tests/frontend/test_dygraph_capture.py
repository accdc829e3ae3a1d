"""Capturing a dygraph Layer (frontend/dygraph.py) and splitting forward from backward
(frontend/split_backward.py); the bucketed AllReduce of gradient results (insert_allreduce.py)."""
import inspect

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest
from paddle import nn

from paddle_ngraph.backends import get_backend
from paddle_ngraph.frontend.dygraph import CaptureError, capture, values_leaving_graph
from paddle_ngraph.passes.insert_allreduce import average_gradient_results

# Every test here runs in dygraph mode (conftest.dynamic_mode), restored after it.
pytestmark = pytest.mark.usefixtures("dynamic_mode")


class Net(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1, self.bn, self.fc2 = nn.Linear(8, 16), nn.BatchNorm1D(16), nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.bn(self.fc1(x))))


def test_train_capture_splits_at_the_output_gradients():
    net = Net()
    cap = capture(net, [paddle.randn([5, 8])], training=True, with_grad=True)
    assert set(cap.params) == {p.name for p in net.parameters()} | {net.bn._mean.name, net.bn._variance.name}
    assert sorted(cap.state) == sorted([net.bn._mean.name, net.bn._variance.name])  # running statistics
    assert sorted(cap.grads) == sorted(p.name for p in net.parameters() if not p.stop_gradient)
    forward, backward = cap.forward, cap.backward
    assert "out:0" in forward.results and all(n in forward.results for n in cap.saved)
    assert backward.parameters[0].name == "grad_out:0"
    assert not any(n.startswith("grad_out") for n in (p.name for p in forward.parameters))
    # Graph inputs the backward reads (weights, the batch) are its own parameters, not saved values.
    saved_sources = {forward.results[n].node.op_type for n in cap.saved}
    assert "Parameter" not in saved_sources
    assert set(backward.results) == {f"grad:{p}" for p in cap.grads}


def test_eval_capture_is_forward_only_with_test_mode_ops():
    net = Net()
    net.eval()
    cap = capture(net, [paddle.randn([5, 8])], training=False, with_grad=False)
    assert cap.backward is None and cap.state == []
    assert "BatchNormInference" in {n.op_type for n in cap.forward.ordered_nodes()}


def test_captured_functions_compute_what_paddle_computes():
    paddle.seed(0)
    net = Net()
    x = paddle.randn([5, 8])
    cap = capture(net, [x], training=True, with_grad=True)
    tensors = {p.name: p.numpy() for p in net.parameters()} | {b.name: b.numpy() for b in net.buffers()}
    inputs = [x.numpy() if p.name == cap.inputs[0] else tensors[p.name] for p in cap.forward.parameters]
    outputs = dict(zip(cap.forward.results, get_backend("INTERPRETER").compile(cap.forward).call(inputs)))
    expected = net(x)
    np.testing.assert_allclose(outputs["out:0"], expected.numpy(), rtol=1e-5, atol=1e-6)
    seed = np.ones(expected.shape, np.float32)
    expected.sum().backward()
    feeds = {"grad_out:0": seed, cap.inputs[0]: x.numpy(), **tensors,
             **{n: outputs[n] for n in cap.saved}}
    grads = dict(zip(cap.backward.results, get_backend("INTERPRETER").compile(cap.backward)
                     .call([feeds[p.name] for p in cap.backward.parameters])))
    for p in (p for p in net.parameters() if not p.stop_gradient):
        np.testing.assert_allclose(grads[f"grad:{p.name}"], p.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=p.name)


def test_values_leaving_the_graph_refuse_capture():
    class Peek(Net):
        def forward(self, x):
            print(x.mean().item())
            return super().forward(x)

    lines, first = inspect.getsourcelines(Peek.forward)
    line = first + next(k for k, text in enumerate(lines) if ".item()" in text)
    assert values_leaving_graph(Peek()) == [f"Peek.forward calls .item() at {inspect.getsourcefile(Peek.forward)}:{line}"]
    assert values_leaving_graph(Net()) == []
    with pytest.raises(CaptureError, match=r"Layer Peek .*\.item\(\)"):
        capture(Peek(), [paddle.randn([2, 8])], training=True, with_grad=True)


def test_forward_changing_python_state_refuses_capture_and_keeps_the_state():
    """A forward that counts its calls in an attribute (Paddle's parallel_dygraph_no_sync_control_flow
    stops a gradient after ten): a captured program would neither count nor read the count again.
    The capture is refused naming the attribute, and the trace's own change is undone."""
    class Counting(Net):
        def __init__(self):
            super().__init__()
            self.step = 0

        def forward(self, x):
            self.step = self.step + 1
            h = self.fc1(x)
            if self.step > 10:
                h.stop_gradient = True
            return self.fc2(h)

    net = Counting()
    with pytest.raises(CaptureError, match=r"Layer Counting .*changes Python state \(Counting\.step \(0 -> 1\)\)"):
        capture(net, [paddle.randn([2, 8])], training=True, with_grad=True)
    assert net.step == 0
    capture(Net(), [paddle.randn([2, 8])], training=True, with_grad=True)  # Paddle's own attributes: not state


def test_translator_errors_name_the_users_line_and_the_error():
    """Paddle's parallel_dygraph_control_flow_different branches on a tensor's value with branches of
    different ranks: the translator's message starts with "In transformed code:"; what reaches the
    user names the line of the forward and the error that stopped the translator."""
    class EmptyOrNot(nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 1)
            self.phony = self.create_parameter(shape=[1], dtype="float32")

        def forward(self, x, conf):
            inds = paddle.nonzero(conf.flatten() > 0).flatten()
            if inds.numel() == 0:
                return self.phony * 0
            return paddle.gather(self.fc(x), inds).sum()

    lines, first = inspect.getsourcelines(EmptyOrNot.forward)
    line = first + next(k for k, text in enumerate(lines) if "if inds.numel()" in text)
    x, conf = paddle.randn([4, 4]), paddle.to_tensor([[0], [1], [0], [1]])
    with pytest.raises(CaptureError) as raised:
        capture(EmptyOrNot(), [x, conf], training=True, with_grad=True)
    said = str(raised.value)
    assert f"{inspect.getsourcefile(EmptyOrNot.forward)}:{line} (if inds.numel() == 0:)" in said, said
    assert "rank inconsistency" in said, said


def test_gradient_results_are_bucketed_in_backward_order():
    net = Net()
    cap = capture(net, [paddle.randn([5, 8])], training=True, with_grad=True)
    names = [f"grad:{p}" for p in cap.grads]
    averaged = average_gradient_results(cap.backward, names, bucket_bytes=1 << 20, min_buckets=3)
    reduces = [n for n in averaged.ordered_nodes() if n.op_type == "AllReduce"]
    assert len(reduces) >= 3 and all(n.attrs["reduction"] == "avg" for n in reduces)
    covered = [averaged.results[n].node for n in names]
    assert all(node.op_type == "AllReduce" for node in covered)
    # fc2's gradients are ready first in backward: they are in the first bucket.
    first = {names[k] for k, node in enumerate(covered) if node is reduces[0]}
    assert any(net.fc2.weight.name in n or net.fc2.bias.name in n for n in first)
