"""Small-programs mode of tools/bench.py (``--small``): the fixed cost of a step, where the kernels are
too small to hide it.

    python tools/bench.py --small --rounds 7              # every case
    python tools/bench.py --small --cases dygraph_mlp,static_lenet_2seg --small-steps 300

Each case runs the same model on the engine and on Paddle itself, in one process, in interleaved
rounds: every round times every system once (--steps steps after a short warm-up, median step),
the order of the systems alternating from round to round, so that a busy minute on the shared
machine hits all of them alike. The report gives each system's median over rounds (min-max) and
the ratio Paddle / engine (above 1: the engine is faster), the median of the per-round ratios.

Cases (float32, SGD, random data):
  dygraph_mlp        a 2-layer MLP (64-64-10) Layer at batch 4: paddle_ngraph.DataParallel against
                     the plain dygraph loop (loss.backward(); opt.step(); opt.clear_grad())
  dygraph_embedding  Embedding(1000, 16) of 5 tokens, mean, Linear(16, 10), batch 8: the same
  dygraph_shared_unused  Paddle's parallel_dygraph_shared_unused_var model (one Linear(10, 10) used, a
                     second one unused whose bias is also an attribute of the Layer), batch 4: the same
  dygraph_sparse_embedding  Paddle's parallel_dygraph_sparse_embedding model (a sparse Embedding(1000, 10)
                     of 3 steps, a projection over the 1000 words, its softmax cross-entropy inside the
                     Layer), batch 8: the same, the loss being the Layer's output
  static_mlp         784-600-10 (dist_mnist's MLP) at batch 4: transpile + exe.run against Paddle's executor
  static_lenet       LeNet-5 on 1x28x28 at batch 8
  static_word2vec    4 context words through one Embedding(1000, 32), concatenated, Linear(128, 64),
                     ReLU, Linear(64, 1000) over the vocabulary, batch 8
  static_*_2seg      the same with one op left to Paddle in the middle of the path: |h| (``abs``, its
                     converter hidden while transpiling) of the first layer's ReLU output, which changes
                     nothing but cuts the program into two engine segments around a Paddle op; the report
                     also gives its cost against the same program all on the engine ("fully native")
  static_*_side      an op left to Paddle off the path instead: the per-sample loss weight |w| of a feed,
                     computed between the first layer and the rest, which the plan runs before one
                     segment (transpiler/segments.py); against the same program all on the engine too
  transpile_mpirun   wall time of paddle_ngraph.transpile of static_mlp, the transport made apart
                     (MPI_Init, oneCCL's set-up), on 2 ranks under mpirun and paddle.distributed.launch
                     against one process; each field the slowest rank's
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

DYGRAPH_CASES = ["dygraph_mlp", "dygraph_embedding", "dygraph_shared_unused", "dygraph_sparse_embedding"]
STATIC_MODELS = ["mlp", "lenet", "word2vec"]
STATIC_CASES = [f"static_{m}{s}" for m in STATIC_MODELS for s in ("", "_2seg", "_side")]
CASES = DYGRAPH_CASES + STATIC_CASES + ["transpile_mpirun"]
# The op left to Paddle in the _2seg and _side cases (its converter is hidden while they are transpiled).
PADDLE_OP = "pd_op.abs"
BATCH = {"mlp": 4, "lenet": 8, "word2vec": 8}
VOCAB = 1000
WARMUP = 20  # steps before each timed run: the first round's also build and specialize


# --- the models ----------------------------------------------------------------------------------------
def static_program(model: str, side: bool = False):
    """(main, startup, loss, feed) of ``model``. The loss is weighted per sample: by |w| of a feed
    ``w`` computed after the first layer (``side``), else by ``w`` with |h| of the first layer's
    ReLU output on the path (equal to h)."""
    import numpy as np
    import paddle
    import paddle.nn.functional as F

    batch = BATCH[model]
    rng = np.random.default_rng(0)
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        y = paddle.static.data("y", [-1, 1], "int64")
        w = paddle.static.data("w", [-1, 1], "float32")
        feed = {"y": rng.integers(0, 10 if model != "word2vec" else VOCAB, (batch, 1)).astype("int64"),
                "w": rng.standard_normal((batch, 1)).astype("float32")}

        def middle(h):
            """The op between the first layer and the rest: |w| beside the path, or |h| on it."""
            if side:
                return h, paddle.abs(w)
            return paddle.abs(h), w

        if model == "mlp":
            x = paddle.static.data("x", [-1, 784], "float32")
            feed["x"] = rng.standard_normal((batch, 784)).astype("float32")
            h, weight = middle(F.relu(paddle.nn.Linear(784, 600)(x)))
            logits = paddle.nn.Linear(600, 10)(h)
        elif model == "lenet":
            x = paddle.static.data("x", [-1, 1, 28, 28], "float32")
            feed["x"] = rng.standard_normal((batch, 1, 28, 28)).astype("float32")
            h, weight = middle(F.max_pool2d(F.relu(paddle.nn.Conv2D(1, 6, 5, padding=2)(x)), 2, 2))
            h = F.max_pool2d(F.relu(paddle.nn.Conv2D(6, 16, 5)(h)), 2, 2)
            h = paddle.reshape(h, [-1, 400])
            h = F.relu(paddle.nn.Linear(400, 120)(h))
            h = F.relu(paddle.nn.Linear(120, 84)(h))
            logits = paddle.nn.Linear(84, 10)(h)
        else:
            words = paddle.static.data("words", [-1, 4], "int64")
            feed["words"] = rng.integers(0, VOCAB, (batch, 4)).astype("int64")
            h = paddle.reshape(paddle.nn.Embedding(VOCAB, 32)(words), [-1, 128])
            h, weight = middle(F.relu(paddle.nn.Linear(128, 64)(h)))
            logits = paddle.nn.Linear(64, VOCAB)(h)
        loss = paddle.mean(F.cross_entropy(logits, y, reduction="none") * weight)
        paddle.optimizer.SGD(0.01).minimize(loss)
    return main, startup, loss, feed


def static_systems(model: str, with_paddle_op: bool, side: bool = False) -> dict:
    """name -> step function: the engine (the whole program; with ``with_paddle_op`` also
    "engine_2seg", the program with abs left to Paddle) and Paddle's executor, each on its own copy
    of the program and its own scope."""
    import paddle

    import paddle_ngraph
    from paddle_ngraph.frontend import OP_TABLE

    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    variants = {"paddle": None, "engine": False}
    if with_paddle_op:
        variants["engine_2seg"] = True
    systems = {}
    for name, hide in variants.items():
        main, startup, loss, feed = static_program(model, side)
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            exe.run(startup)
            if hide is not None:
                saved = OP_TABLE.pop(PADDLE_OP) if hide else None
                try:
                    paddle_ngraph.transpile(main)
                finally:
                    if saved is not None:
                        OP_TABLE[PADDLE_OP] = saved

        def step(main=main, scope=scope, feed=feed, loss=loss):
            with paddle.static.scope_guard(scope):
                exe.run(main, feed=feed, fetch_list=[loss])
        systems[name] = step
    return systems


def dygraph_layer(case: str):
    import paddle

    class MLP(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.hidden, self.out = paddle.nn.Linear(64, 64), paddle.nn.Linear(64, 10)

        def forward(self, x):
            return self.out(paddle.nn.functional.relu(self.hidden(x)))

    class EmbeddingLinear(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.embedding, self.out = paddle.nn.Embedding(VOCAB, 16), paddle.nn.Linear(16, 10)

        def forward(self, tokens):
            return self.out(self.embedding(tokens).mean(axis=1))

    class SharedUnused(paddle.nn.Layer):
        """Paddle's test/legacy_test/parallel_dygraph_shared_unused_var.py model."""

        def __init__(self):
            super().__init__()
            self.net_a, self.net_b = paddle.nn.Linear(10, 5), paddle.nn.Linear(10, 10)
            self.bias = self.net_a.bias

        def forward(self, x):
            return self.net_b(x)

    class SparseEmbedding(paddle.nn.Layer):
        """Paddle's test/legacy_test/parallel_dygraph_sparse_embedding.py model (its SimpleNet)."""

        def __init__(self, hidden=10, vocab=VOCAB, steps=3, scale=0.1):
            super().__init__()
            init = paddle.nn.initializer.Uniform(low=-scale, high=scale)
            self.vocab, self.steps = vocab, steps
            self.embedding = paddle.nn.Embedding(vocab, hidden, sparse=True, weight_attr=paddle.ParamAttr(initializer=init))
            self.softmax_weight = self.create_parameter(shape=[hidden, vocab], dtype="float32", default_initializer=init)
            self.softmax_bias = self.create_parameter(shape=[vocab], dtype="float32", default_initializer=init)

        def forward(self, words, label):
            projection = paddle.add(paddle.matmul(self.embedding(words), self.softmax_weight), self.softmax_bias)
            loss = paddle.nn.functional.cross_entropy(paddle.reshape(projection, [-1, self.vocab]), label,
                                                      reduction="none")
            return paddle.sum(paddle.mean(paddle.reshape(loss, [-1, self.steps]), axis=[0]))

    return {"dygraph_mlp": MLP, "dygraph_embedding": EmbeddingLinear, "dygraph_shared_unused": SharedUnused,
            "dygraph_sparse_embedding": SparseEmbedding}[case]()


def dygraph_systems(case: str) -> dict:
    import numpy as np
    import paddle

    import paddle_ngraph

    paddle.disable_static()
    if case == "dygraph_mlp":
        x = paddle.randn([4, 64])
    elif case == "dygraph_shared_unused":
        x = paddle.randn([4, 10])
    elif case == "dygraph_sparse_embedding":  # as Paddle's test feeds it: words 0 1 2, labels 1 2 3
        x = paddle.to_tensor(np.tile(np.arange(3), (8, 1)).reshape(8, 3, 1).astype("int64"))
        words_label = paddle.to_tensor(np.tile(np.arange(1, 4), 8).reshape(-1, 1).astype("int64"))
    else:
        x = paddle.randint(0, VOCAB, [8, 5])
    label = paddle.randint(0, 10, [x.shape[0], 1])
    systems = {}
    for name in ("paddle", "engine"):
        paddle.seed(1)
        layer = dygraph_layer(case)
        model = paddle_ngraph.DataParallel(layer) if name == "engine" else layer
        opt = paddle.optimizer.SGD(0.01, parameters=model.parameters())

        def step(model=model, opt=opt):
            if case == "dygraph_sparse_embedding":
                loss = model(x, words_label)
            else:
                loss = paddle.nn.functional.cross_entropy(model(x), label)
            loss.backward()
            opt.step()
            opt.clear_grad()
        systems[name] = step
    return systems


# --- timing ----------------------------------------------------------------------------------------------
def median_step(step, steps: int, warmup: int) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def interleave(systems: dict, rounds: int, steps: int, warmup: int) -> dict:
    """name -> [median step seconds per round]; the order of the systems turns every round."""
    names = list(systems)
    times = {n: [] for n in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(median_step(systems[name], steps, warmup))
    return times


def summarize(times: dict, pairs) -> dict:
    """Medians (min-max) per system and, per (numerator, denominator) pair, the median and min-max
    of the per-round ratios of their times."""
    out = {"ms": {n: [1e3 * t for t in ts] for n, ts in times.items()}, "ratios": {}}
    for slow, fast in pairs:
        ratios = [a / b for a, b in zip(times[slow], times[fast])]
        out["ratios"][f"{slow}/{fast}"] = ratios
    return out


def run_case(case: str, rounds: int, steps: int, warmup: int) -> dict:
    if case in DYGRAPH_CASES:
        systems = dygraph_systems(case)
        pairs = [("paddle", "engine")]
    else:
        model = case[len("static_"):].replace("_2seg", "").replace("_side", "")
        two = case.endswith(("_2seg", "_side"))
        systems = static_systems(model, two, side=case.endswith("_side"))
        pairs = [("paddle", "engine_2seg"), ("engine_2seg", "engine")] if two else [("paddle", "engine")]
    times = interleave(systems, rounds, steps, warmup)
    return summarize(times, pairs)


# --- transpile under mpirun ------------------------------------------------------------------------------
def transpile_worker() -> dict:
    """One rank: seconds to import paddle and paddle_ngraph, to make the transport, and to transpile."""
    started = time.perf_counter()
    import paddle

    import paddle_ngraph
    from paddle_ngraph.distributed import resolve_transport
    imported = time.perf_counter()
    paddle.enable_static()
    main, startup, loss, feed = static_program("mlp")
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        begin = time.perf_counter()
        transport = resolve_transport(None, None, "auto", 60.0)
        made = time.perf_counter()
        paddle_ngraph.transpile(main, transport=transport)
        transpiled = time.perf_counter()
        exe.run(main, feed=feed, fetch_list=[loss])
    return {"rank": transport.rank, "import_s": imported - started, "transport_s": made - begin,
            "transpile_s": transpiled - made}


def case_in_its_process(script: str, case: str, rounds: int, steps: int, timeout: float) -> dict:
    """``script --case CASE --rounds R --steps S --json FILE`` in a fresh process: its result."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, os.path.abspath(script), "--case", case, "--rounds", str(rounds),
                   "--steps", str(steps), "--json", out.name]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{case}: {done.stderr[-3000:]}")
        with open(out.name) as f:
            return json.load(f)


def run_transpile(ranks: int, rounds: int, timeout: float) -> dict:
    """Per round: one process alone, one job of ``ranks`` ranks under mpirun (MPI transport) and one under
    paddle.distributed.launch (oneCCL); each field the slowest rank's."""
    from bench import venv_bin

    script = [os.path.abspath(__file__), "--transpile-worker"]
    jobs = {"1 process": [sys.executable] + script,
            f"mpirun, {ranks} ranks": [venv_bin("mpirun"), "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
                                       sys.executable] + script,
            f"paddle.distributed.launch, {ranks} ranks": [sys.executable, "-m", "paddle.distributed.launch",
                                                          "--nproc_per_node", str(ranks), "--log_dir", "log"] + script}
    results = {name: [] for name in jobs}
    for _ in range(rounds):
        for name, command in jobs.items():
            with tempfile.TemporaryDirectory() as out:
                env = {**os.environ, "PDNG_SMALL_OUT": out}
                done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=out)
                if done.returncode != 0:
                    raise RuntimeError(f"{name}: {done.stderr[-2000:]}")
                ranks_out = [json.load(open(os.path.join(out, f))) for f in sorted(os.listdir(out)) if f.endswith(".json")]
            results[name].append({key: max(r[key] for r in ranks_out) for key in ranks_out[0] if key != "rank"})
    return results


# --- report ----------------------------------------------------------------------------------------------
def _spread(values, scale=1.0, digits=2) -> str:
    values = [v * scale for v in values]
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def report_lines(report: dict) -> list[str]:
    lines = ["| case | batch | engine ms/step | Paddle ms/step | Paddle / engine | with the Paddle op / all on the engine |",
             "| --- | --- | --- | --- | --- | --- |"]
    for case, result in report["cases"].items():
        if case == "transpile_mpirun":
            continue
        ms, ratios = result["ms"], result["ratios"]
        engine = "engine_2seg" if "engine_2seg" in ms else "engine"
        model = case.replace("static_", "").replace("_2seg", "").replace("_side", "")
        batch = BATCH.get(model, 4 if case in ("dygraph_mlp", "dygraph_shared_unused") else 8)
        border = _spread(ratios["engine_2seg/engine"]) if "engine_2seg/engine" in ratios else ""
        lines.append(f"| `{case}` | {batch} | {_spread(ms[engine], digits=3)} | {_spread(ms['paddle'], digits=3)} | "
                     f"**{_spread(ratios[f'paddle/{engine}'])}** | {border} |")
    transpile = report["cases"].get("transpile_mpirun")
    if transpile:
        lines += ["", "| transpile of static_mlp | import s | transport s | transpile s |", "| --- | --- | --- | --- |"]
        for name, runs in transpile.items():
            lines.append(f"| {name} | {_spread([r['import_s'] for r in runs])} | "
                         f"{_spread([r['transport_s'] for r in runs])} | {_spread([r['transpile_s'] for r in runs])} |")
    return lines


def run_small(cases, args) -> dict:
    """The report of --small: every case in its own process (a case's engines and Paddle's caches do
    not meet the next case's), with the load average before and after."""
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "load_before": os.getloadavg(), "rounds": args.rounds,
              "steps": args.small_steps, "cases": {}}
    for case in cases:
        print(f"[small] {case}...", end=" ", file=sys.stderr, flush=True)
        started = time.monotonic()
        if case == "transpile_mpirun":
            report["cases"][case] = run_transpile(2, args.rounds, args.timeout)
        else:
            report["cases"][case] = case_in_its_process(__file__, case, args.rounds, args.small_steps, args.timeout)
        print(f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    report["load_after"] = os.getloadavg()
    return report


def small_header(report: dict, machine: str) -> str:
    before, after = (", ".join(f"{x:.1f}" for x in report[k]) for k in ("load_before", "load_after"))
    return (f"Run {report['date']} on {machine}; load average {before} before and {after} after; "
            f"{report['rounds']} interleaved rounds of {report['steps']} timed steps per system (median step "
            f"per round); ms per step: median over rounds (min-max); ratios: median of the per-round ratios (min-max).")


def main(argv=None) -> int:
    """Worker entry points: one case in this process (--case), or one rank of the transpile timing."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=[c for c in CASES if c != "transpile_mpirun"])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--json")
    parser.add_argument("--transpile-worker", action="store_true")
    args = parser.parse_args(argv)
    sys.path.insert(0, ROOT)
    from paddle_ngraph.quiet import quiet_this_process

    quiet_this_process()
    if args.transpile_worker:
        result = transpile_worker()
        with open(os.path.join(os.environ["PDNG_SMALL_OUT"], f"rank{result['rank']}.json"), "w") as f:
            json.dump(result, f)
        return 0
    result = run_case(args.case, args.rounds, args.steps, WARMUP)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)
    else:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
