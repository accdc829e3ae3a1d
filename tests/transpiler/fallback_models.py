"""Programs with ops the engine lacks, for the fallback tests (one process and mpirun workers).

``signed_square`` is a Paddle custom operator built from ``custom_ops/signed_square.cc`` with
``paddle.utils.cpp_extension`` (once; later loads reuse the build under ``build/``).
"""
from __future__ import annotations

import functools
import os

import numpy as np
import paddle

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_DIR = os.path.join(ROOT, "build", "test_custom_ops")
FEATURES, HIDDEN, CLASSES = 6, 8, 3


@functools.lru_cache(maxsize=None)
def custom_op_module():
    """Loaded once per process: a second ``load`` of the same operator returns an empty module."""
    import contextlib
    import fcntl
    import io
    import warnings

    from paddle.utils.cpp_extension import load

    os.makedirs(BUILD_DIR, exist_ok=True)
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "custom_ops", "signed_square.cc")
    # One process builds at a time: the ranks of a job, and make test's two lanes, load it together.
    with open(os.path.join(BUILD_DIR, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")  # "No ccache found"
            return load(name="pdng_signed_square", sources=[source], build_directory=BUILD_DIR, verbose=False)


def build(middle: str, optimizer: str = "sgd", lr: float = 0.1, batch: int = -1):
    """x -> Linear -> middle -> Linear -> softmax cross-entropy; ``middle``: ``custom`` (the custom
    operator), ``logcumsumexp`` (an op without converter), ``param_logcumsumexp`` (adds the
    logcumsumexp of a parameter: its gradient comes from a Paddle op) or ``cond`` (a static.nn.cond sub-block)."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [batch, FEATURES], "float32")
        y = paddle.static.data("y", [batch, 1], "int64")
        h = paddle.nn.Linear(FEATURES, HIDDEN)(x)
        if middle == "custom":
            h = custom_op_module().pdng_signed_square(h)
        elif middle == "logcumsumexp":
            h = paddle.logcumsumexp(h, axis=1)
        elif middle == "param_logcumsumexp":
            offset = paddle.create_parameter([HIDDEN], "float32", name="offset",
                                             default_initializer=paddle.nn.initializer.Uniform(-0.5, 0.5))
            h = h + paddle.logcumsumexp(offset, axis=0)
        elif middle == "cond":
            h = paddle.static.nn.cond(paddle.mean(h) > 0, lambda: paddle.nn.functional.relu(h), lambda: h * 0.5)
        elif middle != "none":
            raise ValueError(middle)
        logits = paddle.nn.Linear(HIDDEN, CLASSES)(h)
        loss = paddle.mean(paddle.nn.functional.cross_entropy(logits, y))
        make = {"sgd": lambda: paddle.optimizer.SGD(lr), "momentum": lambda: paddle.optimizer.Momentum(lr, 0.9),
                "adagrad": lambda: paddle.optimizer.Adagrad(lr)}[optimizer]
        make().minimize(loss)
    return main, startup, loss


def data(steps: int, batch: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((steps, batch, FEATURES)).astype("float32")
    ys = rng.integers(0, CLASSES, (steps, batch, 1)).astype("int64")
    return xs, ys


def parameter_names(main) -> list[str]:
    if paddle.framework.in_pir_mode():
        return sorted(op.attrs()["parameter_name"] for op in main.global_block().ops if op.name() == "builtin.parameter")
    return sorted(p.name for p in main.all_parameters())


def train(middle, optimizer, xs, ys, transpile=None, seed=1, rank=0, nranks=1):
    """Losses and final parameters of ``len(xs)`` steps; with ``transpile`` (a dict of options) on
    the engine, each rank feeding its ``1/nranks`` share of every batch."""
    paddle.seed(seed)
    main, startup, loss = build(middle, optimizer)

    def parameters(scope):
        return {n: np.array(scope.find_var(n).get_tensor()) for n in parameter_names(main)}

    losses, params, _ = run_steps(main, startup, loss, xs, ys, parameters, transpile, rank, nranks)
    return main, losses, params


def run_steps(main, startup, loss, xs, ys, read, transpile=None, rank=0, nranks=1, fetch=()):
    """(losses, ``read(scope)`` at the end, the values of ``fetch`` at each step) of one training
    step per batch of ``xs``/``ys`` (feeds ``x`` and ``y``); with ``transpile`` (a dict of options)
    on the engine, each rank feeding its ``1/nranks`` share of every batch."""
    import paddle_ngraph

    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        if transpile is not None:
            paddle_ngraph.transpile(main, **transpile)
        share = len(xs[0]) // nranks
        losses, fetched = [], []
        for xb, yb in zip(xs, ys):
            feed = {"x": xb[rank * share:(rank + 1) * share], "y": yb[rank * share:(rank + 1) * share]}
            got = exe.run(main, feed=feed, fetch_list=[loss, *fetch])
            losses.append(float(got[0]))
            fetched.append([np.array(value) for value in got[1:]])
        return np.array(losses), read(scope), fetched


def executed_plan(main, startup) -> list[dict]:
    """What ``transpile`` executed on ``main`` (after ``startup``; INTERPRETER backend): the plan its
    engines carry, as ``unsupported_ops`` reports it; the engines are released after."""
    import paddle_ngraph

    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        paddle.static.Executor(paddle.CPUPlace()).run(startup)
        before = {e.id for e in paddle_ngraph.engines()}
        paddle_ngraph.transpile(main, backend="INTERPRETER")
        made = [e for e in paddle_ngraph.engines() if e.id not in before]
    plans = {id(e.plan) for e in made}
    assert len(plans) == 1 and [e.segment for e in made] == made[0].plan.segments
    paddle_ngraph.release(main)
    return made[0].plan.left_to_paddle()


# --- LoD (legacy sequence ops) --------------------------------------------------------------------
LOD_BATCH = 4  # sequences per step


def lod_program(lr: float = 0.1):
    """Legacy IR: sequences of 3-feature steps -> Linear (mul on the LoD input: its output carries
    the offsets) -> tanh -> sequence_pool (sum, no converter) -> Linear -> mean squared error; SGD."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    main.random_seed = startup.random_seed = 1
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("seq", [-1, 3], "float32", lod_level=1)
        y = paddle.static.data("y", [-1, 1], "float32")
        h = paddle.static.nn.fc(x, 5, activation="tanh")
        pooled = paddle.static.nn.sequence_lod.sequence_pool(h, pool_type="sum")
        loss = paddle.mean(paddle.square(paddle.static.nn.fc(pooled, 1) - y))
        paddle.optimizer.SGD(lr).minimize(loss)
    return main, startup, loss


def lod_train(steps: int, transpile=None, rank=0, nranks=1):
    """(program, losses, parameters) of ``steps`` steps of ``lod_program`` on sequences of 1-4
    steps (another total length every step, and on every rank); with ``transpile`` on the engine,
    each rank feeding its ``1/nranks`` share of the sequences of every batch."""
    import paddle_ngraph
    from paddle.base import core

    main, startup, loss = lod_program()
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    rng = np.random.RandomState(3)
    share = LOD_BATCH // nranks
    losses = []
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        if transpile is not None:
            paddle_ngraph.transpile(main, **transpile)
        for _ in range(steps):
            lengths = [int(n) for n in rng.randint(1, 5, LOD_BATCH)]
            steps_x = rng.uniform(-1, 1, (sum(lengths), 3)).astype("float32")
            ys = rng.uniform(-1, 1, (LOD_BATCH, 1)).astype("float32")
            mine = range(rank * share, (rank + 1) * share)
            offsets = np.cumsum([0] + lengths)
            seq = core.LoDTensor()
            seq.set(np.concatenate([steps_x[offsets[i]:offsets[i + 1]] for i in mine]), paddle.CPUPlace())
            seq.set_recursive_sequence_lengths([[lengths[i] for i in mine]])
            (value,) = exe.run(main, feed={"seq": seq, "y": ys[rank * share:(rank + 1) * share]}, fetch_list=[loss])
            losses.append(float(np.asarray(value)))
        params = {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
    return main, np.array(losses), params
