"""Trains the MLP a few steps with PADDLE_NGRAPH_TIMELINE set (by the caller); then writes, for the
test to check the trace against, what the engine ran: the nodes of the executed function, its
buckets and which bucket each optimizer update reads. Args: backend, steps, meta path."""
import json
import os
import sys

os.environ.setdefault("GLOG_minloglevel", "2")

import paddle  # noqa: E402

import paddle_ngraph  # noqa: E402
from paddle_ngraph.zoo import build_program, digits_as_mnist, shard  # noqa: E402


def executed_function(executable):
    """The function whose nodes ran: the CPU backend runs a specialized, fused clone."""
    last = getattr(executable, "last", None)
    return last.function if last is not None else executable.function


def main():
    backend, steps, meta_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    paddle.enable_static()
    x, y = digits_as_mnist()
    main_prog, startup, _, loss = build_program("mnist_mlp", "momentum")
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    paddle_ngraph.transpile(main_prog, backend=backend)
    from paddle_ngraph.ir.ops.optimizer import OptimizerUpdate
    from paddle_ngraph.transpiler import engines

    engine = engines()[-1]
    transport = engine.transport
    for step in range(steps):
        xb, yb = shard(x, y, 16, transport.rank, transport.size, step)
        exe.run(main_prog, feed={"x": xb, "y": yb}, fetch_list=[loss])
    function = executed_function(engine.executable)
    # The native executor holds constants as buffers; the interpreter runs them as nodes.
    not_run = ("Parameter", "Constant") if backend == "CPU" else ("Parameter",)
    nodes = [n for n in function.ordered_nodes() if n.op_type not in not_run]
    update_bucket = {}
    for update in (n for n in nodes if isinstance(n, OptimizerUpdate)):
        producer = update.inputs[update.grad_input].node
        if producer.op_type == "AllReduce":
            update_bucket[update.name] = producer.attrs.get("bucket") or producer.name
    meta = {"rank": transport.rank, "size": transport.size, "engine": engine.id,
            "kernels": sorted(n.name for n in nodes if n.op_type != "AllReduce"),
            "buckets": sorted((n.attrs.get("bucket") or n.name) for n in nodes if n.op_type == "AllReduce"),
            "params": len(main_prog.global_block().all_parameters()), "update_bucket": update_bucket}
    with open(f"{meta_path}.rank{transport.rank}", "w") as f:
        json.dump(meta, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
