"""paddle.Model (hapi) around paddle_ngraph.DataParallel in one process, against paddle.Model around
the plain Layer: fit, evaluate with another batch size (the last batch smaller) and predict; and what
the wrapper refuses to take as a network. Under a launcher: paddle.Model of the plain Layer with
fleet's strategy.ngraph, and of the wrapper without fleet, on the engine without paddle.DataParallel,
against one process on the whole batch."""
import numpy as np
import paddle
import pytest
from paddle import nn

import paddle_ngraph
from paddle_ngraph.distributed.ccl import available as ccl_available

pytestmark = pytest.mark.usefixtures("dynamic_mode")


class Classifier(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, features):
        return self.fc2(nn.functional.relu(self.fc1(features)))


class Samples(paddle.io.Dataset):
    def __init__(self, size=40):
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((size, 8)).astype("float32")
        self.y = rng.integers(0, 4, (size, 1)).astype("int64")

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


# --- under a launcher ------------------------------------------------------------------------------
RANK_BATCH, SAMPLES, EPOCHS = 8, 48, 2  # 3 steps an epoch of 2 ranks x 8, and of one process x 16


def fit_on_this_rank(how: str):
    """On each rank: paddle.Model of the plain Layer after fleet.init with strategy.ngraph (``fleet``),
    or of paddle_ngraph.DataParallel without fleet (``wrapper``); fit, then evaluate."""
    import paddle.distributed.fleet as fleet
    from paddle.hapi.model import DynamicGraphAdapter

    paddle.disable_static()
    if how == "fleet":
        strategy = fleet.DistributedStrategy()
        strategy.ngraph = True
        fleet.init(is_collective=True, strategy=strategy)
    paddle.seed(0)
    net = Classifier()
    model = paddle.Model(net if how == "fleet" else paddle_ngraph.DataParallel(net))
    adapter = model._adapter
    assert isinstance(adapter, DynamicGraphAdapter)
    wrapped = model.network
    assert isinstance(wrapped, paddle_ngraph.DataParallel) and wrapped._layers is net
    # No paddle.DataParallel around it (with one rank hapi makes none).
    assert getattr(adapter, "ddp_model", wrapped) is wrapped
    model.prepare(paddle.optimizer.Adam(0.01, parameters=net.parameters()), nn.CrossEntropyLoss(),
                  paddle.metric.Accuracy())
    data = Samples(SAMPLES)
    model.fit(data, batch_size=RANK_BATCH, epochs=EPOCHS, verbose=0, shuffle=False)
    result = model.evaluate(data, batch_size=RANK_BATCH, verbose=0)
    engine = wrapped.engine
    return {"acc": result["acc"], "state": {k: v.numpy() for k, v in net.state_dict().items()},
            "steps": engine.steps, "updates": engine.updates, "eager_steps": engine.eager_steps}


def fit_in_one_process(batch_size):
    paddle.seed(0)
    net = Classifier()
    model = paddle.Model(net)
    model.prepare(paddle.optimizer.Adam(0.01, parameters=net.parameters()), nn.CrossEntropyLoss(),
                  paddle.metric.Accuracy())
    data = Samples(SAMPLES)
    model.fit(data, batch_size=batch_size, epochs=EPOCHS, verbose=0, shuffle=False)
    result = model.evaluate(data, batch_size=batch_size, verbose=0)
    return result["acc"], {k: v.numpy() for k, v in net.state_dict().items()}


@pytest.mark.distributed
@pytest.mark.parametrize("how,nranks,launcher", [
    ("fleet", 2, "mpirun"), ("wrapper", 2, "mpirun"), ("fleet", 1, "mpirun"),
    pytest.param("fleet", 2, "launch", marks=pytest.mark.skipif(
        not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")),
])
def test_hapi_under_a_launcher_trains_on_the_engine_as_one_process_on_the_whole_batch(how, nranks, launcher):
    from ranks import run_ranks

    run = run_ranks(fit_on_this_rank, nranks, how, launcher=launcher, timeout=180)
    ref_acc, ref_state = fit_in_one_process(nranks * RANK_BATCH)
    train_steps = EPOCHS * SAMPLES // (nranks * RANK_BATCH)
    for rank, got in enumerate(run.results):
        # Engine steps: fit's and evaluate's forward calls; updates: fit's backwards with AllReduce.
        assert got["steps"] > train_steps and got["eager_steps"] == 0, (rank, got)
        assert got["updates"] == (train_steps if nranks > 1 else 0), (rank, got)
        assert got["acc"] == ref_acc  # evaluate gathers every rank's outputs
        for name, value in ref_state.items():
            np.testing.assert_allclose(got["state"][name], value, rtol=1e-5, atol=1e-6, err_msg=f"rank {rank}: {name}")
