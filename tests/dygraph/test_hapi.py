"""paddle.Model (hapi) around paddle_ngraph.DataParallel in one process, against paddle.Model around
the plain Layer: fit, evaluate with another batch size (the last batch smaller) and predict; and what
the wrapper refuses to take as a network."""
import numpy as np
import paddle
import pytest
from paddle import nn

import paddle_ngraph

pytestmark = pytest.mark.usefixtures("dynamic_mode")


class Classifier(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, features):
        return self.fc2(nn.functional.relu(self.fc1(features)))


class Samples(paddle.io.Dataset):
    def __init__(self):
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((40, 8)).astype("float32")
        self.y = rng.integers(0, 4, (40, 1)).astype("int64")

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def run(wrap: bool):
    paddle.seed(0)
    net = Classifier()
    network = paddle_ngraph.DataParallel(net) if wrap else net
    model = paddle.Model(network)
    model.prepare(paddle.optimizer.Adam(0.01, parameters=net.parameters()), nn.CrossEntropyLoss(),
                  paddle.metric.Accuracy())
    data = Samples()
    model.fit(data, batch_size=16, epochs=2, verbose=0, shuffle=False)
    result = model.evaluate(data, batch_size=7, verbose=0)
    predicted = np.concatenate(model.predict(data, batch_size=16, verbose=0)[0])
    return result, predicted, net, network


def test_hapi_fit_evaluate_predict_with_the_wrapped_network_match_paddle():
    ref_result, ref_predicted, reference, _ = run(False)
    result, predicted, net, wrapped = run(True)
    assert wrapped.engine.steps > 0 and wrapped.engine.eager_steps == 0  # on the engine, not eagerly
    np.testing.assert_allclose(result["loss"], ref_result["loss"], rtol=1e-5)
    assert result["acc"] == ref_result["acc"]
    np.testing.assert_allclose(predicted, ref_predicted, rtol=1e-5, atol=1e-6)
    for (k, a), (_, b) in zip(reference.state_dict().items(), net.state_dict().items()):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)


def test_wrapping_something_else_than_a_layer_is_a_config_error_naming_it():
    from paddle_ngraph.errors import ConfigError

    with pytest.raises(ConfigError, match="wraps a paddle.nn.Layer, got function"):
        paddle_ngraph.DataParallel(lambda x: x)
