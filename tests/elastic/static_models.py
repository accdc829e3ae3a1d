"""The static program the elastic tests train, in either IR: a small regression net with Adam,
its global batch per step, and the persistable variables to compare."""
import numpy as np
import paddle

FEATURES = 6
GLOBAL_BATCH = 12


def build(hidden: int = 16, lr: float = 0.05, distributed_optimizer=None):
    """(main, startup, loss) of a fresh program; names are the same in every process.
    ``distributed_optimizer``: wraps the optimizer before minimize (fleet's)."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, FEATURES], "float32")
        y = paddle.static.data("y", [-1, 1], "float32")
        hidden_out = paddle.nn.functional.relu(paddle.nn.Linear(FEATURES, hidden)(x))
        out = paddle.nn.Linear(hidden, 1)(hidden_out)
        loss = paddle.nn.functional.mse_loss(out, y)
        optimizer = paddle.optimizer.Adam(learning_rate=lr)
        if distributed_optimizer is not None:
            optimizer = distributed_optimizer(optimizer)
        optimizer.minimize(loss)
    return main, startup, loss


def batch(step: int, rank: int, size: int):
    """This rank's rows of the global batch of ``step`` for a group of ``size`` (the global batch is
    kept whatever the group)."""
    rng = np.random.default_rng(1000 + step)
    x = rng.standard_normal((GLOBAL_BATCH, FEATURES)).astype(np.float32)
    y = (x.sum(axis=1, keepdims=True) * 0.5 + 0.1).astype(np.float32)
    rows = GLOBAL_BATCH // size
    return {"x": x[rank * rows:(rank + 1) * rows], "y": y[rank * rows:(rank + 1) * rows]}


def persistables(state) -> dict:
    """Every persistable variable of the State's program, from the scope."""
    scope = paddle.static.global_scope()
    names = state._part.parameters + state._part.others
    return {n: np.array(scope.find_var(n).get_tensor(), copy=True) for n in names
            if scope.find_var(n) is not None and scope.find_var(n).get_tensor()._is_initialized()}


def fleet_optimizer(configs: dict):
    """``build``'s ``distributed_optimizer`` through fleet: ``strategy.ngraph`` with these
    ``ngraph_configs`` (fleet.init here, so in the process that builds)."""
    import paddle.distributed.fleet as fleet

    import paddle_ngraph  # noqa: F401  (adds strategy.ngraph)

    fleet.init(is_collective=True)
    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    strategy.ngraph_configs = configs
    return lambda optimizer: fleet.distributed_optimizer(optimizer, strategy)
