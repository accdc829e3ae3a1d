"""Control flow: what the sub-block bodies Paddle runs cost a step, and what running them on the engine
could save.

    python tools/bench_control_flow.py --rounds 5               # every case, a markdown table
    python tools/bench_control_flow.py --cases while_h256_n16 --rounds 3 --steps 20

Control-flow ops and the ops of their sub-blocks run in Paddle (docs/fallback.md, "Control flow").
Each case runs, in one process, in interleaved rounds (every round times every system once, after a
warm-up, the order turning from round to round), several systems on their own program and scope:

  gm_<model>_<opt>_k<k>   legacy GradientMergeOptimizer(<opt>, k_steps=<k>, avg=True) on the MLP
                          784-600-10 (batch 16) or LeNet-5 (batch 8): its conditional_block holds the
                          updates (scale, sgd/momentum, zeroing the merged gradients) and runs every k-th step.
      paddle, engine      Paddle's executor; transpile (CPU backend; the block left to Paddle). The step
                          time is the mean over a cycle of k steps (median per phase); "block" is the
                          median of the update step minus that of the other steps: the sub-block's work
                          with its conditional_block.
      body_paddle, body_engine   the sub-block's ops copied into a program of their own (straight-line,
                          every value persistable in the scope): what its work costs each, once.
  while_h<H>_n<N>         legacy static.nn.while_loop, x -> Linear(H, H) -> h, then N times
                          h = tanh(h W + b) (one W, b) in the loop, mean, SGD; Paddle builds its gradient
                          (while_grad). Batch 16.
      paddle, engine      the program with the loop (the loop and its gradient left to Paddle)
      unrolled_paddle, unrolled_engine   the same computation with the loop unrolled: straight-line
      unrolled_borders    the unrolled program on the engine with an ``assign`` of h after every
                          iteration left to Paddle (its converter hidden): one engine segment per iteration,
                          forward and backward, with a Paddle op between: the body on the engine with a
                          border per iteration, as running the loop body on the engine would have it.
      unrolled_assign_paddle   that program on Paddle: what the assigns themselves cost in Paddle.
                          The report adds, from n=4 and n=32 of one H, the cost of one more iteration
                          (forward and backward) of each.
  cond_h<H>_d<D>          PIR static.nn.cond on a fed flag: x -> Linear(H, H) -> h, then the true branch
                          D times h = tanh(Linear(H, H)(h)), the false branch h * 0.5; Linear(H, 10),
                          softmax cross-entropy, SGD. Batch 16.
      paddle, engine      the flag true (the branch runs)
      paddle_false, engine_false   the flag false: "branch" is true minus false
      inline_paddle, inline_engine   the branch's layers straight in the program (no cond)
      base_paddle, base_engine   the same with D = 0: "inline - base" is the branch's own work.

Report: ms per step, median over rounds of each round's value (min-max), load average before/after.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from bench_small import case_in_its_process  # tools/, beside this script

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

GM_CASES = ["gm_mlp_sgd_k2", "gm_mlp_momentum_k4", "gm_lenet_momentum_k4"]
WHILE_CASES = [f"while_h{h}_n{n}" for h in (64, 256, 512) for n in (4, 32)]
COND_CASES = ["cond_h256_d4", "cond_h512_d8"]
CASES = GM_CASES + WHILE_CASES + COND_CASES
BATCH = {"mlp": 16, "lenet": 8, "while": 16, "cond": 16}
WARMUP = 8


# --- programs --------------------------------------------------------------------------------------------
def legacy_tanh(x):
    """Paddle 3.3.1's ``paddle.tanh`` has no legacy-IR path: the legacy op, appended by hand."""
    from paddle.base.layer_helper import LayerHelper

    helper = LayerHelper("tanh")
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(type="tanh", inputs={"X": x}, outputs={"Out": out})
    return out


def gm_program(model: str, opt: str, k: int):
    import numpy as np
    import paddle
    import paddle.nn.functional as F

    batch = BATCH[model]
    rng = np.random.default_rng(0)
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        y = paddle.static.data("y", [-1, 1], "int64")
        feed = {"y": rng.integers(0, 10, (batch, 1)).astype("int64")}
        if model == "mlp":
            x = paddle.static.data("x", [-1, 784], "float32")
            feed["x"] = rng.standard_normal((batch, 784)).astype("float32")
            logits = paddle.nn.Linear(600, 10)(F.relu(paddle.nn.Linear(784, 600)(x)))
        else:
            x = paddle.static.data("x", [-1, 1, 28, 28], "float32")
            feed["x"] = rng.standard_normal((batch, 1, 28, 28)).astype("float32")
            h = F.max_pool2d(F.relu(paddle.nn.Conv2D(1, 6, 5, padding=2)(x)), 2, 2)
            h = F.max_pool2d(F.relu(paddle.nn.Conv2D(6, 16, 5)(h)), 2, 2)
            h = F.relu(paddle.nn.Linear(400, 120)(paddle.reshape(h, [-1, 400])))
            logits = paddle.nn.Linear(84, 10)(F.relu(paddle.nn.Linear(120, 84)(h)))
        loss = paddle.mean(F.cross_entropy(logits, y))
        inner = paddle.optimizer.SGD(0.01) if opt == "sgd" else paddle.optimizer.Momentum(0.01, 0.9)
        paddle.incubate.optimizer.GradientMergeOptimizer(inner, k_steps=k, avg=True).minimize(loss)
    return main, startup, loss, feed


def body_program(main):
    """The ops of ``main``'s first sub-block copied into the global block of a new program, every
    variable they touch persistable (so that the program reads and writes the scope, as the sub-block does)."""
    import paddle

    block = main.block(1)
    body = paddle.static.Program()
    target = body.global_block()
    names = set()
    for op in block.ops:
        names.update(op.input_arg_names)
        names.update(op.output_arg_names)
    for name in sorted(names):
        var = block._var_recursive(name)
        target.create_var(name=name, shape=var.shape, dtype=var.dtype, persistable=True)
    for op in block.ops:
        target.append_op(type=op.type, inputs={k: op.input(k) for k in op.input_names},
                         outputs={k: op.output(k) for k in op.output_names}, attrs=op.all_attrs())
    return body, sorted(names)


def while_program(hidden: int, iterations: int, mode: str):
    """``mode``: ``loop`` (static.nn.while_loop), ``unrolled`` or ``borders`` (unrolled, an assign of h
    after every iteration)."""
    import numpy as np
    import paddle

    batch = BATCH["while"]
    rng = np.random.default_rng(0)
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, hidden], "float32")
        feed = {"x": rng.standard_normal((batch, hidden)).astype("float32")}
        h = legacy_tanh(paddle.nn.Linear(hidden, hidden)(x))
        cell = paddle.nn.Linear(hidden, hidden)
        if mode == "loop":
            i = paddle.full([1], 0, "int64")
            limit = paddle.full([1], iterations, "int64")
            _, h = paddle.static.nn.while_loop(lambda i, h: i < limit, lambda i, h: [i + 1, legacy_tanh(cell(h))], [i, h])
        else:
            for _ in range(iterations):
                h = legacy_tanh(cell(h))
                if mode == "borders":
                    h = paddle.assign(h)
        loss = paddle.mean(h)
        paddle.optimizer.SGD(0.01).minimize(loss)
    return main, startup, loss, feed


def cond_program(hidden: int, depth: int, inline: bool):
    import numpy as np
    import paddle
    import paddle.nn.functional as F

    batch = BATCH["cond"]
    rng = np.random.default_rng(0)
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, hidden], "float32")
        y = paddle.static.data("y", [-1, 1], "int64")
        flag = paddle.static.data("flag", [1], "float32")
        feed = {"x": rng.standard_normal((batch, hidden)).astype("float32"),
                "y": rng.integers(0, 10, (batch, 1)).astype("int64"), "flag": np.ones([1], "float32")}
        h = paddle.tanh(paddle.nn.Linear(hidden, hidden)(x))
        layers = [paddle.nn.Linear(hidden, hidden) for _ in range(depth)]

        def heavy():
            out = h
            for layer in layers:
                out = paddle.tanh(layer(out))
            return out
        if inline:
            h = heavy() + 0.0 * paddle.sum(flag)
        else:
            h = paddle.static.nn.cond(paddle.sum(flag) > 0, heavy, lambda: h * 0.5)
        loss = paddle.mean(F.cross_entropy(paddle.nn.Linear(hidden, 10)(h), y))
        paddle.optimizer.SGD(0.01).minimize(loss)
    return main, startup, loss, feed


# --- systems ---------------------------------------------------------------------------------------------
def make_system(exe, built, engine: bool, hide=(), feed_override=None):
    """A step function on its own scope: ``built`` is (main, startup, loss, feed)."""
    import paddle

    import paddle_ngraph
    from paddle_ngraph.frontend import OP_TABLE

    main, startup, loss, feed = built
    feed = {**feed, **(feed_override or {})}
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        if engine:
            saved = {name: OP_TABLE.pop(name) for name in hide}
            try:
                paddle_ngraph.transpile(main)
            finally:
                OP_TABLE.update(saved)

    def step():
        with paddle.static.scope_guard(scope):
            exe.run(main, feed=feed, fetch_list=[loss])
    return step, scope


def body_system(exe, main, source_scope, engine: bool):
    """The sub-block's ops as a program of their own, on a scope holding the values ``source_scope``
    has after a few steps (zeros for what it lacks)."""
    import numpy as np
    import paddle

    import paddle_ngraph

    body, names = body_program(main)
    scope = paddle.static.Scope()
    for name in names:
        source = source_scope.find_var(name)
        if source is not None and source.get_tensor()._is_initialized():
            value = np.array(source.get_tensor())
        else:
            var = body.global_block().var(name)
            value = np.zeros([max(d, 1) for d in var.shape], paddle.base.data_feeder.convert_dtype(var.dtype))
        scope.var(name).get_tensor().set(value, paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        if engine:
            paddle_ngraph.transpile(body)

    def step():
        with paddle.static.scope_guard(scope):
            exe.run(body)
    return step, scope


def systems_of(case: str):
    """(systems: name -> step, cycle: steps per cycle of the step's phases)."""
    import paddle

    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    kind = case.split("_")[0]
    if kind == "gm":
        _, model, opt, k = case.split("_")
        k = int(k[1:])
        systems = {}
        for name, engine in (("paddle", False), ("engine", True)):
            built = gm_program(model, opt, k)
            systems[name], scope = make_system(exe, built, engine)
            if name == "paddle":
                for _ in range(k):
                    systems[name]()
                main, source = built[0], scope
        for name, engine in (("body_paddle", False), ("body_engine", True)):
            systems[name] = body_system(exe, main, source, engine)[0]
        return systems, {"paddle": k, "engine": k}
    if kind == "while":
        _, h, n = case.split("_")
        hidden, iterations = int(h[1:]), int(n[1:])
        systems = {
            "paddle": make_system(exe, while_program(hidden, iterations, "loop"), False)[0],
            "engine": make_system(exe, while_program(hidden, iterations, "loop"), True)[0],
            "unrolled_paddle": make_system(exe, while_program(hidden, iterations, "unrolled"), False)[0],
            "unrolled_engine": make_system(exe, while_program(hidden, iterations, "unrolled"), True)[0],
            "unrolled_borders": make_system(exe, while_program(hidden, iterations, "borders"), True,
                                            hide=("assign",))[0],
            "unrolled_assign_paddle": make_system(exe, while_program(hidden, iterations, "borders"), False)[0],
        }
        return systems, {}
    _, h, d = case.split("_")
    hidden, depth = int(h[1:]), int(d[1:])
    import numpy as np

    off = {"flag": np.zeros([1], "float32")}
    systems = {
        "paddle": make_system(exe, cond_program(hidden, depth, False), False)[0],
        "engine": make_system(exe, cond_program(hidden, depth, False), True)[0],
        "paddle_false": make_system(exe, cond_program(hidden, depth, False), False, feed_override=off)[0],
        "engine_false": make_system(exe, cond_program(hidden, depth, False), True, feed_override=off)[0],
        "inline_paddle": make_system(exe, cond_program(hidden, depth, True), False)[0],
        "inline_engine": make_system(exe, cond_program(hidden, depth, True), True)[0],
        "base_paddle": make_system(exe, cond_program(hidden, 0, True), False)[0],
        "base_engine": make_system(exe, cond_program(hidden, 0, True), True)[0],
    }
    return systems, {}


# --- timing ----------------------------------------------------------------------------------------------
def time_steps(step, steps: int, warmup: int, cycle: int) -> dict:
    """ms: the mean over the cycle's phases of each phase's median step; block: the slowest phase's
    median minus the median of the others (only for a cycle of 2 or more)."""
    for _ in range(warmup * cycle):
        step()
    phases = [[] for _ in range(cycle)]
    for i in range(steps * cycle):
        started = time.perf_counter()
        step()
        phases[i % cycle].append(time.perf_counter() - started)
    medians = [1e3 * statistics.median(p) for p in phases]
    out = {"ms": statistics.mean(medians)}
    if cycle > 1:
        slow = max(range(cycle), key=lambda p: medians[p])
        out["block"] = medians[slow] - statistics.median([m for p, m in enumerate(medians) if p != slow])
    return out


def run_case(case: str, rounds: int, steps: int) -> dict:
    import paddle

    # The whole case in its IR: the executor picks the IR of a run by the mode of the moment.
    with (paddle.pir_utils.IrGuard() if case.startswith("cond_") else paddle.pir_utils.OldIrGuard()):
        systems, cycles = systems_of(case)
        names = list(systems)
        result = {n: [] for n in names}
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                result[name].append(time_steps(systems[name], steps, WARMUP, cycles.get(name, 1)))
    return result


# --- report ----------------------------------------------------------------------------------------------
def spread(values, digits=3) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def field(result, name, key="ms"):
    return [r[key] for r in result[name]]


def report_lines(report: dict) -> list[str]:
    lines = []
    cases = report["cases"]
    gm = [c for c in cases if c.startswith("gm_")]
    if gm:
        lines += ["| case | engine ms/step | Paddle ms/step | block in Paddle, engine program (ms, every k-th step) | "
                  "block in Paddle, Paddle program | body alone: Paddle ms | body alone: engine ms |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for c in gm:
            r = cases[c]
            lines.append(f"| `{c}` | {spread(field(r, 'engine'))} | {spread(field(r, 'paddle'))} | "
                         f"{spread(field(r, 'engine', 'block'))} | {spread(field(r, 'paddle', 'block'))} | "
                         f"{spread(field(r, 'body_paddle'))} | {spread(field(r, 'body_engine'))} |")
        lines.append("")
    wl = [c for c in cases if c.startswith("while_")]
    if wl:
        lines += ["| case | engine (loop in Paddle) | Paddle | unrolled: Paddle | unrolled: engine | "
                  "unrolled, a border per iteration: engine | that program on Paddle |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for c in wl:
            r = cases[c]
            lines.append(f"| `{c}` | " + " | ".join(spread(field(r, n)) for n in
                         ("engine", "paddle", "unrolled_paddle", "unrolled_engine", "unrolled_borders",
                          "unrolled_assign_paddle")) + " |")
        lines.append("")
        slopes = []
        for hidden in sorted({int(c.split("_")[1][1:]) for c in wl}):
            short, long = cases.get(f"while_h{hidden}_n4"), cases.get(f"while_h{hidden}_n32")
            if not (short and long):
                continue

            def per_iteration(name):
                return 1e3 * (statistics.median(field(long, name)) - statistics.median(field(short, name))) / 28
            row = {n: per_iteration(n) for n in long}
            slopes.append(f"| {hidden} | {row['paddle']:.0f} | {row['engine']:.0f} | {row['unrolled_paddle']:.0f} | "
                          f"{row['unrolled_engine']:.0f} | {row['unrolled_borders']:.0f} | "
                          f"{row['unrolled_assign_paddle'] - row['unrolled_paddle']:.0f} |")
        if slopes:
            lines += ["| H | us per iteration: Paddle's loop | engine program's loop (in Paddle) | body in Paddle (unrolled) | "
                      "body on the engine (unrolled) | body on the engine, a border per iteration | of which: the "
                      "2 assigns in Paddle |", "| --- | --- | --- | --- | --- | --- | --- |"] + slopes + [""]
    cd = [c for c in cases if c.startswith("cond_")]
    if cd:
        lines += ["| case | engine, branch taken | Paddle, branch taken | engine, not taken | Paddle, not taken | "
                  "inline: engine | inline: Paddle | D = 0 inline: engine | D = 0 inline: Paddle |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for c in cd:
            r = cases[c]
            lines.append(f"| `{c}` | " + " | ".join(spread(field(r, n)) for n in
                         ("engine", "paddle", "engine_false", "paddle_false", "inline_engine", "inline_paddle",
                          "base_engine", "base_paddle")) + " |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated, from: " + ", ".join(CASES))
    parser.add_argument("--case", choices=CASES, help="run one case in this process (the worker)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40, help="timed steps per system and round (cycles for gm_)")
    parser.add_argument("--json", help="write the report (or, with --case, the case's result) here")
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args(argv)
    if args.case:
        sys.path.insert(0, ROOT)
        from paddle_ngraph.quiet import quiet_this_process

        quiet_this_process()
        result = run_case(args.case, args.rounds, args.steps)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f)
        else:
            print(json.dumps(result, indent=1))
        return 0
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"unknown cases {unknown}; known: {CASES}")
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "load_before": os.getloadavg(), "rounds": args.rounds,
              "steps": args.steps, "cases": {}}
    for case in cases:
        print(f"[control flow] {case}...", end=" ", file=sys.stderr, flush=True)
        started = time.monotonic()
        report["cases"][case] = case_in_its_process(__file__, case, args.rounds, args.steps, args.timeout)
        print(f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    report["load_after"] = os.getloadavg()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    before, after = (", ".join(f"{x:.1f}" for x in report[k]) for k in ("load_before", "load_after"))
    print(f"Run {report['date']}; load average {before} before, {after} after; {args.rounds} interleaved rounds "
          f"of {args.steps} timed steps (cycles) per system; ms per step, median over rounds (min-max).\n")
    print("\n".join(report_lines(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
