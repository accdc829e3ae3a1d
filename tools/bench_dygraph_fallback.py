#!/usr/bin/env python
"""What a dygraph Layer pays for an op the engine lacks, in one process, in one run.

    python tools/bench_dygraph_fallback.py --batch-size 32 --rounds 20

One training step (``loss.backward(); opt.step(); opt.clear_grad()``, SGD) of a small conv net
(conv, relu, x*|x|, pool, conv, relu, pool, two Linear) under ``paddle_ngraph.DataParallel``, x*|x|
written five ways:

- ``engine``: as Paddle ops the engine converts: the whole program on the engine;
- ``engine-as-segments``: the same program through the segmented runtime (dygraph/segmented.py),
  which then holds one forward and one backward engine segment and no Paddle op: what the runtime
  itself costs;
- ``custom-segments``: the Paddle custom operator of the fallback tests
  (tests/transpiler/custom_ops/signed_square.cc, built once under build/): engine segments with
  the operator and its gradient run by Paddle between them;
- ``custom-eager``: that Layer in plain dygraph Paddle (what ran before segments: the whole Layer
  eagerly);
- ``paddle-eager``: the first Layer in plain dygraph Paddle.

The Layers run in alternating rounds (the order reversed every round), so that each sees the same
machine load. Reported: median and 10th percentile ms per step, and the ratio of medians to
``engine``.
"""
import argparse
import os
import statistics
import sys
import time

from paddle_ngraph.quiet import quiet_this_process

quiet_this_process()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ["engine", "engine-as-segments", "custom-segments", "custom-eager", "paddle-eager"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="CPU")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=10, help="steps per round (default 10)")
    p.add_argument("--rounds", type=int, default=20, help="alternating rounds (default 20)")
    args = p.parse_args(argv)

    import numpy as np
    import paddle
    import paddle.nn.functional as F
    from paddle import nn

    import paddle_ngraph

    sys.path.insert(0, os.path.join(ROOT, "tests", "transpiler"))
    from fallback_models import custom_op_module

    custom = custom_op_module().pdng_signed_square

    class Net(nn.Layer):
        def __init__(self, square):
            super().__init__()
            self.square = square
            self.conv1, self.conv2 = nn.Conv2D(1, 8, 3, padding=1), nn.Conv2D(8, 16, 3, padding=1)
            self.fc1, self.fc2 = nn.Linear(16 * 7 * 7, 64), nn.Linear(64, 10)

        def forward(self, x):
            h = F.relu(self.conv1(x))
            h = custom(h) if self.square == "custom" else h * paddle.abs(h)
            h = F.max_pool2d(F.relu(self.conv2(F.max_pool2d(h, 2))), 2)
            return self.fc2(F.relu(self.fc1(h.reshape([x.shape[0], -1]))))

    def as_segments(engine):
        """The engine's programs through the segmented runtime, even when it converts every op."""
        from paddle_ngraph.dygraph.runner import trace
        from paddle_ngraph.dygraph.segmented import SegmentedCompiled

        engine._compile = lambda a, training, grad, layer: SegmentedCompiled(engine, trace(layer, a, training, grad))

    models = {}
    for mode in MODES:
        paddle.seed(0)
        layer = Net("custom" if mode.startswith("custom") else "formula")
        model = layer if mode.endswith("eager") else paddle_ngraph.DataParallel(layer, backend=args.backend)
        if mode == "engine-as-segments":
            as_segments(model.engine)
        models[mode] = (model, paddle.optimizer.SGD(0.01, parameters=model.parameters()))
    rng = np.random.default_rng(0)
    x = paddle.to_tensor(rng.standard_normal((args.batch_size, 1, 28, 28)).astype("float32"))
    y = paddle.to_tensor(rng.integers(0, 10, (args.batch_size, 1)))

    def step(model, opt):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()

    times = {mode: [] for mode in MODES}
    for mode in MODES:  # capture and compile, outside the timing
        for _ in range(3):
            step(*models[mode])
    for r in range(args.rounds):
        for mode in (MODES if r % 2 == 0 else MODES[::-1]):
            for _ in range(args.steps):
                start = time.perf_counter()
                step(*models[mode])
                times[mode].append((time.perf_counter() - start) * 1e3)
    for mode in MODES:
        if not mode.endswith("eager"):
            engine = models[mode][0].engine
            where = [c.summary() if c.segmented else "the whole program on the engine"
                     for c in engine.compiled.values() if c is not None]
            print(f"# {mode}: {where[0]} (steps {engine.steps}, eager {engine.eager_steps})")
    base = statistics.median(times["engine"])
    print("| Layer | ms per step, median | 10th percentile | vs engine |")
    print("| --- | --- | --- | --- |")
    for mode in MODES:
        t = sorted(times[mode])
        median = statistics.median(t)
        print(f"| {mode} | {median:.2f} | {t[len(t) // 10]:.2f} | {median / base:.2f}x |")


if __name__ == "__main__":
    main()
