"""What features_worker.py and test_strategy_features.py share: the model, the data, the features.

The reference of each feature is Paddle alone in one process on the concatenated batch
(``reference``); the worker trains the same program under fleet with strategy.ngraph.
"""
import numpy as np
import paddle
import paddle.nn.functional as F

SEED, STEPS, BATCH, NRANKS, FEATURES_IN, CLASSES = 3, 6, 8, 2, 12, 4
LR = 0.05

# name -> strategy attributes, optimizer, whether the model has batch norm, and what the engine maps
# it onto (the reference's optimizer and accumulation).
FEATURES = {
    "gradient_merge": dict(strategy={"gradient_merge": True, "gradient_merge_configs": {"k_steps": 2, "avg": True}},
                           optimizer="momentum", batch_norm=False, merge=(2, True)),
    "gradient_merge_sum": dict(strategy={"gradient_merge": True,
                                         "gradient_merge_configs": {"k_steps": 3, "avg": False}},
                               optimizer="sgd", batch_norm=False, merge=(3, False)),
    "sharding": dict(strategy={"sharding": True, "sharding_configs": {"stage": 1, "sharding_degree": NRANKS}},
                     optimizer="adam", batch_norm=False),
    "fp16_allreduce": dict(strategy={"fp16_allreduce": True}, optimizer="sgd", batch_norm=False),
    "sync_batch_norm": dict(strategy={"sync_batch_norm": True}, optimizer="momentum", batch_norm=True),
    "lars": dict(strategy={"lars": True, "lars_configs": {"lars_coeff": 0.01, "lars_weight_decay": 0.0005,
                                                          "exclude_from_weight_decay": ["b_0"]}},
                 optimizer="momentum", batch_norm=False, inner="lars"),
    "lamb": dict(strategy={"lamb": True, "lamb_configs": {"lamb_weight_decay": 0.01,
                                                          "exclude_from_weight_decay": ["b_0"]}},
                 optimizer="adam", batch_norm=False, inner="lamb"),
}


def build(batch_norm: bool):
    x = paddle.static.data("x", [None, FEATURES_IN], "float32")
    y = paddle.static.data("y", [None, 1], "int64")
    hidden = paddle.nn.Linear(FEATURES_IN, 16, bias_attr=not batch_norm)(x)
    if batch_norm:
        hidden = paddle.nn.BatchNorm1D(16)(hidden)
    logits = paddle.nn.Linear(16, CLASSES)(F.relu(hidden))
    return paddle.mean(F.cross_entropy(logits, y))


def optimizer(name: str, lr: float = LR):
    if name == "sgd":
        return paddle.optimizer.SGD(lr)
    if name == "momentum":
        return paddle.optimizer.Momentum(lr, momentum=0.9)
    return paddle.optimizer.Adam(lr)


def data():
    rng = np.random.default_rng(SEED)
    n = STEPS * BATCH * NRANKS
    return rng.standard_normal((n, FEATURES_IN)).astype("float32"), rng.integers(0, CLASSES, (n, 1)).astype("int64")


def shard(x, y, step, rank, nranks):
    start = step * BATCH * nranks + rank * BATCH
    return x[start:start + BATCH], y[start:start + BATCH]


def state(program) -> dict:
    """Parameters and batch-norm statistics from the current scope, by name."""
    scope = paddle.static.global_scope()
    names = sorted(v.name for v in _persistables(program)
                   if any(k in v.name for k in ("linear", "batch_norm")) and not v.name.endswith("_moment1_0")
                   and "velocity" not in v.name and "moment" not in v.name and "pow_acc" not in v.name)
    return {n: np.array(scope.find_var(n).get_tensor()) for n in names if scope.find_var(n) is not None}


def _persistables(program):
    if hasattr(program, "list_vars"):
        return [v for v in program.list_vars() if v.persistable]
    ops = program.global_block().ops
    return [type("V", (), {"name": op.attrs()["parameter_name"]}) for op in ops if op.name() == "builtin.parameter"]
