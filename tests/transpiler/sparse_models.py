"""A small word2vec-like program with a sparse embedding (is_sparse=True), in both IRs, for the
tests of sparse gradients (one process and mpirun workers).

Three context words share one embedding table (one ``lookup_table_v2`` per word in the legacy IR,
whose selected-rows gradients a ``sum`` adds), then a ReLU hidden layer and a softmax over the vocabulary
predicts the next word. The ids come from a part of the vocabulary, so most rows of the table get no
gradient in a step: that is where a sparse update and a dense one could differ.
"""
from __future__ import annotations

import numpy as np
import paddle

VOCAB, EMBED, HIDDEN, CONTEXT = 30, 6, 8, 3
IDS_USED = 12  # ids drawn from [0, IDS_USED): rows above never get a gradient
TABLE = "shared_w"
LR = 0.1


def optimizer(name: str):
    return {
        "sgd": lambda: paddle.optimizer.SGD(LR),
        "momentum": lambda: paddle.optimizer.Momentum(LR, 0.9),
        "nesterov": lambda: paddle.optimizer.Momentum(LR, 0.9, use_nesterov=True),
        "adam": lambda: paddle.optimizer.Adam(LR),
        "adam_lazy": lambda: paddle.optimizer.Adam(LR, lazy_mode=True),
        "sgd_l2": lambda: paddle.optimizer.SGD(LR, weight_decay=paddle.regularizer.L2Decay(0.05)),
        "momentum_l2": lambda: paddle.optimizer.Momentum(LR, 0.9, weight_decay=paddle.regularizer.L2Decay(0.05)),
        "adagrad": lambda: paddle.optimizer.Adagrad(LR),
    }[name]()


def build(opt: str, sparse: bool = True, padding_idx: int | None = None, batch: int = -1):
    """(main, startup, loss) of the current IR: legacy ``paddle.static.nn.embedding(is_sparse=...)``,
    PIR ``paddle.nn.Embedding(sparse=...)``; the table is named ``shared_w``."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        words = [paddle.static.data(f"w{k}", [batch, 1], "int64") for k in range(CONTEXT)]
        label = paddle.static.data("next", [batch, 1], "int64")
        table = paddle.ParamAttr(name=TABLE, initializer=paddle.nn.initializer.Normal(0.0, 0.5))
        if paddle.framework.in_pir_mode():
            embedding = paddle.nn.Embedding(VOCAB, EMBED, padding_idx=padding_idx, sparse=sparse, weight_attr=table)
            embeds = [embedding(w) for w in words]
        else:
            embeds = [paddle.static.nn.embedding(w, [VOCAB, EMBED], is_sparse=sparse, padding_idx=padding_idx,
                                                 param_attr=table if k == 0 else TABLE)
                      for k, w in enumerate(words)]
        h = paddle.reshape(paddle.concat(embeds, axis=-1), [-1, CONTEXT * EMBED])
        h = paddle.nn.functional.relu(paddle.nn.Linear(CONTEXT * EMBED, HIDDEN)(h))
        logits = paddle.nn.Linear(HIDDEN, VOCAB)(h)
        loss = paddle.mean(paddle.nn.functional.cross_entropy(logits, label))
        optimizer(opt).minimize(loss)
    return main, startup, loss


def data(steps: int, batch: int, seed: int = 0):
    """Per step a feed dict of the whole batch."""
    rng = np.random.default_rng(seed)
    return [{**{f"w{k}": rng.integers(0, IDS_USED, (batch, 1)).astype("int64") for k in range(CONTEXT)},
             "next": rng.integers(0, VOCAB, (batch, 1)).astype("int64")} for _ in range(steps)]


def parameter_names(main) -> list[str]:
    if paddle.framework.in_pir_mode():
        return sorted(op.attrs()["parameter_name"] for op in main.global_block().ops if op.name() == "builtin.parameter")
    return sorted(p.name for p in main.all_parameters())


def train(opt: str, feeds, sparse: bool = True, padding_idx: int | None = None, transpile=None, seed: int = 1,
          rank: int = 0, nranks: int = 1):
    """(losses, parameters) after one step per feed; with ``transpile`` (a dict of options) on the
    engine, each rank feeding its ``1/nranks`` share of every batch."""
    import paddle_ngraph

    paddle.seed(seed)
    main, startup, loss = build(opt, sparse, padding_idx)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        if transpile is not None:
            paddle_ngraph.transpile(main, **transpile)
        losses = []
        for feed in feeds:
            share = len(feed["next"]) // nranks
            mine = {k: v[rank * share:(rank + 1) * share] for k, v in feed.items()}
            losses.append(float(exe.run(main, feed=mine, fetch_list=[loss])[0]))
        return np.array(losses), {n: np.array(scope.find_var(n).get_tensor()) for n in parameter_names(main)}
