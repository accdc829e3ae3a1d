#!/usr/bin/env python
"""Held-out accuracy of precision bf16 against fp32 on the bundled digits (INTERPRETER, one process).

Trains a model of paddle_ngraph.zoo (mnist_mlp, lenet) on the first samples of scikit-learn's
digits laid out as MNIST, the same steps, batches and initial weights in fp32 and in bf16, then
evaluates both on the held-out samples, in the precision each trained in (the forward function
converted from Paddle's test clone, with the mixed-precision pass for bf16):

  python tools/bf16_accuracy.py --model mnist_mlp --steps 300
  python tools/bf16_accuracy.py --model lenet --steps 300 --json out.json

The INTERPRETER is the reference of the mixed-precision function (the CPU backend has no bf16
kernels yet). Prints one line per precision and the difference in points.
"""
import argparse
import json
import sys

from paddle_ngraph.quiet import quiet_this_process

quiet_this_process()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="mnist_mlp", choices=["mnist_mlp", "lenet"])
    p.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    p.add_argument("--batch-size", type=int, default=64, help="batch size (default 64)")
    p.add_argument("--optimizer", default="momentum", choices=["sgd", "momentum", "adam"])
    p.add_argument("--lr", type=float, default=0.03, help="learning rate (default 0.03)")
    p.add_argument("--held-out", type=int, default=297, help="last samples kept for evaluation (default 297)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", help="also write the results (with every step's loss) to this file")
    p.add_argument("--plot", help="also plot both precisions' training losses, step by step, to this PNG "
                   "(matplotlib: make bench-deps)")
    return p.parse_args(argv)


def logits_name(program) -> str:
    """The logits: the input of the legacy program's softmax cross-entropy."""
    for op in program.global_block().ops:
        if op.type == "softmax_with_cross_entropy":
            return op.input("Logits")[0]
    raise ValueError("no softmax_with_cross_entropy op in the program")


def train_and_evaluate(args, precision: str, data) -> dict:
    import numpy as np
    import paddle

    import paddle_ngraph
    from paddle_ngraph.backends import get_backend
    from paddle_ngraph.passes import PassManager
    from paddle_ngraph.passes.mixed_precision import MixedPrecision
    from paddle_ngraph.zoo import build_program, shard

    (x_train, y_train), (x_test, y_test) = data
    with paddle.pir_utils.OldIrGuard():
        main, startup, _, loss = build_program(args.model, args.optimizer, args.lr, seed=args.seed)
        test = main.clone(for_test=True)  # before transpile: Paddle's forward-only program
        scope = paddle.static.Scope()
        exe = paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(scope):
            exe.run(startup)
            paddle_ngraph.transpile(main, backend="INTERPRETER", precision=precision, transport="null")
            losses = []
            for step in range(args.steps):
                xb, yb = shard(x_train, y_train, args.batch_size, 0, 1, step)
                losses.append(float(exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])[0]))
            function = paddle_ngraph.convert(test, fetch_list=[logits_name(test)])
            mixed = MixedPrecision(precision)
            PassManager([mixed]).run(function)
            feeds = {"x": x_test, "y": y_test}  # the test clone still computes the loss, which reads y
            inputs = [feeds[p.name] if p.name in feeds else np.array(scope.find_var(p.name).get_tensor())
                      for p in function.parameters]
            (logits,) = get_backend("INTERPRETER").compile(function).call(inputs)
    accuracy = float(np.mean(np.argmax(logits, axis=1) == y_test.reshape(-1)))
    return {"precision": precision, "accuracy": accuracy, "final_loss": float(np.mean(losses[-10:])),
            "bf16_nodes_in_evaluation": len(mixed.marked), "losses": losses}


def plot_losses(args, results, path: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        ax.plot(range(1, len(r["losses"]) + 1), r["losses"], label=f"{r['precision']} (held-out "
                f"{100 * r['accuracy']:.1f}%)", linewidth=1)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (log scale)")
    ax.set_title(f"{args.model}, {args.optimizer} lr {args.lr}, batch {args.batch_size}: fp32 and bf16 (INTERPRETER)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"written: {path}")


def main(argv=None):
    args = parse_args(argv)
    import paddle

    from paddle_ngraph.zoo import digits_as_mnist

    paddle.enable_static()
    x, y = digits_as_mnist()
    if args.model == "lenet":
        x = x.reshape(-1, 1, 28, 28)
    n = len(x) - args.held_out
    data = ((x[:n], y[:n]), (x[n:], y[n:]))
    results = [train_and_evaluate(args, precision, data) for precision in ("fp32", "bf16")]
    for r in results:
        print(f"{args.model} {args.optimizer} {args.steps} steps x {args.batch_size}: {r['precision']}: held-out "
              f"accuracy {100 * r['accuracy']:.2f}% on {args.held_out} samples, loss (last 10 steps) "
              f"{r['final_loss']:.4f}")
    difference = 100 * (results[1]["accuracy"] - results[0]["accuracy"])
    print(f"bf16 - fp32: {difference:+.2f} points")
    if args.plot:
        plot_losses(args, results, args.plot)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "steps": args.steps, "results": results, "difference_points": difference},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
