"""The CPU backend's SoftmaxCrossEntropy with hard labels in float32 (oneDNN's softmax, the loss from
it) against Paddle's formula: the shifted logits clipped at -64, in the loss and in the softmax."""
import numpy as np
import pytest

from paddle_ngraph.backends.cpu.executable import CPUExecutable
from paddle_ngraph.ir import Function, ops


def _paddles_loss(x, labels):
    shifted = np.maximum(x - x.max(axis=1, keepdims=True), -64).astype(np.float64)
    log_sum = np.log(np.exp(shifted).sum(axis=1))
    return -(shifted[np.arange(len(x)), labels] - log_sum)


@pytest.mark.parametrize("below", [0, 30, 70, 100], ids=lambda b: f"label_{b}_below_max")
def test_loss_where_the_label_logit_lies_far_under_the_maximum(below):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 1000)).astype(np.float32)
    labels = rng.integers(0, 1000, 6)
    x[np.arange(6), labels] = x.max(axis=1) - below
    px = ops.Parameter(dtype="float32", shape=x.shape, name="x")
    py = ops.Parameter(dtype="int64", shape=(6, 1), name="y")
    node = ops.SoftmaxCrossEntropy(px.output(), py.output())
    softmax, loss = CPUExecutable(Function([px, py], {"softmax": node.output(0), "loss": node.output(1)})).call(
        [x, labels.reshape(6, 1).astype(np.int64)])
    np.testing.assert_allclose(loss.ravel(), _paddles_loss(x, labels), rtol=1e-5)
    clipped = np.exp(np.maximum(x - x.max(axis=1, keepdims=True), -64).astype(np.float64))
    np.testing.assert_allclose(softmax, clipped / clipped.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-30)
