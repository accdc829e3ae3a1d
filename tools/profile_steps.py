"""Per-node wall time of one training step of a reference model on the CPU backend.

    python tools/profile_steps.py [--model mnist_mlp] [--batch 128] [--steps 20] [--threads N]

Prints the nodes of the compiled (specialized, fused) function sorted by median time.
"""
from __future__ import annotations

import argparse
import sys

from paddle_ngraph.quiet import quiet_this_process

quiet_this_process()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mnist_mlp")
    parser.add_argument("--optimizer", default="sgd")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)

    import numpy as np
    import paddle

    paddle.enable_static()
    import paddle_ngraph
    from paddle_ngraph.backends import get_backend
    from paddle_ngraph.zoo.models import build_program, make_batch

    main_program, startup, _, _ = build_program(args.model, args.optimizer)
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        function = paddle_ngraph.convert(main_program)
        feed = make_batch(args.model, args.batch, np.random.default_rng(0))
        inputs = [feed[p.name] if p.name in feed else np.array(scope.find_var(p.name).get_tensor())
                  for p in function.parameters]
    executable = get_backend("CPU", threads=args.threads).compile(function)
    executable.call(inputs)
    native = executable.last.native
    native.set_profiling(True)
    samples = []
    for _ in range(args.steps):
        executable.call(inputs)
        samples.append(native.step_seconds)
    times = np.median(np.array(samples), axis=0)
    labels = [f"{s.kind:7s} {s.node.op_type:28s} {s.node.name}" for s in executable.last.liveness.steps]
    total = times.sum()
    print(f"{args.model} batch {args.batch}, {executable.threads} threads: {total * 1e3:.3f} ms per step "
          f"(sum of step medians), arena {native.arena_bytes / 2**20:.1f} MB")
    for t, label in sorted(zip(times, labels), reverse=True)[:args.top]:
        print(f"  {t * 1e3:8.3f} ms {100 * t / total:5.1f}%  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
