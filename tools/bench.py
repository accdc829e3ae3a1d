"""Training throughput of paddle_ngraph against its peers, side by side in one run.

    python tools/bench.py                       # every model, systems and rank counts below
    python tools/bench.py --models mnist_mlp --ranks 1,2 --steps 50 --repeats 3
    python tools/bench.py --smoke               # a few steps of everything, for the tests
    python tools/bench.py --scaling --ranks 2   # scaling efficiency, 1 against 2 ranks of one thread each
    python tools/bench.py --precision fp32,bf16 # what bf16 buys, against torch.autocast
    python tools/bench.py --small --rounds 7    # fixed per-step costs of small programs against Paddle
    python tools/bench.py --mp --rounds 5       # tensor parallelism (mp=2) against dp=2 and one process

Systems (each on the same model, per-rank batch and random data):
  ngraph-cpu       paddle_ngraph, CPU backend (transpile + plain exe.run); 2+ ranks under mpirun (MPI)
  ngraph-ccl       the same under paddle.distributed.launch (oneCCL transport), 2+ ranks
  ngraph-interp    paddle_ngraph, INTERPRETER backend (the NumPy reference)
  paddle           Paddle's own static executor, one process (Paddle 3's static collective training
                   does not run on CPU: reported as such for 2+ ranks)
  paddle-dp        paddle.DataParallel (dygraph, gloo) under paddle.distributed.launch
  ngraph-dygraph   the same dygraph loop on the engine: paddle_ngraph.DataParallel under mpirun (MPI)
  ngraph-dygraph-fleet  the same with fleet.distributed_model/optimizer and strategy.ngraph under
                   paddle.distributed.launch (oneCCL), 2+ ranks
  torch-ddp        torch DistributedDataParallel (gloo) under torchrun, where torch is installed
The peers run the same four models rebuilt in dygraph and in torch (tools/bench_models.py, same
layers and parameter counts, tested in tests/tools/test_bench_models.py).

With --precision fp32,bf16 (tools/bench_precision.py) each model runs in float32 and in bf16 in interleaved
rounds, on ngraph-cpu (precision: bf16) and torch-ddp (torch.autocast bf16) by default, models
mnist_mlp_wide (784-1024-1024-10), resnet_small and transformer_layer, one rank; the report gives the
speed-up of bf16 per system and what the engine did with it (bf16 as marked, or why float32).

With --accumulate-steps 1,2,4 the ngraph systems also run with gradient accumulation: a step is then
k exe.run calls of the per-rank batch (k micro-batches, one AllReduce and update), its samples k
times the batch; "comm" is the share of the step the communication thread spent in collectives
(ngraph-cpu), so the rows of one run show what accumulating pays and saves.

Per configuration: median and spread of ms/step over repeats (each repeat: warm-up, then --steps
timed steps, median step), samples/s over all ranks, scaling efficiency against the same system on
1 rank, the share of allreduce time hidden behind the backward pass (ngraph systems), peak RSS per
rank, and the machine's sgemm GFLOP/s and memcpy GB/s measured in the same run, next to each
model's FLOP-bound step time. Then tools/bench_allreduce.py on 2 ranks (allreduce bus bandwidth
by message size: the CPU backend's native path, uncompressed and with bf16/fp16 compression, the
transports, bare mpi4py). --compress bf16|fp16 runs the ngraph systems with compressed gradients.
--recompute on|both runs the ngraph systems with recompute (the layer outputs of each model as
checkpoints, paddle_ngraph.zoo.models.checkpoint_names), "both" next to the same runs without; the
peak memory of a step is reported as the engine's arena (the CPU backend's memory plan; for the
INTERPRETER the most bytes of intermediate values alive at once) next to the peak RSS.

Output: --out (JSON), the same table as Markdown (--out with .md), and PNG plots (matplotlib):
<out>_throughput.png (samples/s per model, system and rank count) and <out>_allreduce.png.
Install the peers first: `make bench-deps` (torch 2.13 CPU, matplotlib).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from bench_models import VARIANTS, resolve
from bench_mp import add_options as add_mp_options, mp_header, mp_lines, mp_worker, run_mp
from bench_precision import PRECISION_SYSTEMS, precision_lines, run_precision
from bench_scaling import SCALING_SYSTEMS, interleaved_rounds, run_scaling, scaling_lines
from bench_small import CASES as SMALL_CASES, report_lines as small_lines, run_small, small_header

from paddle_ngraph.quiet import quiet_env, quiet_this_process

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = ["mnist_mlp", "lenet", "resnet_small", "transformer_layer"]
# The models of the precision mode: products big enough for bf16 to matter, a convolution
# network and a transformer layer.
PRECISION_MODELS = ["mnist_mlp_wide", "resnet_small", "transformer_layer"]
SYSTEMS = ["ngraph-cpu", "ngraph-ccl", "ngraph-interp", "paddle", "paddle-dp", "ngraph-dygraph", "ngraph-dygraph-fleet",
           "torch-ddp"]


# --- worker: one rank of one configuration ------------------------------------------------------------
def worker(args) -> dict:
    quiet_this_process()
    import numpy as np

    if args.system == "ngraph-mp":
        return mp_worker(args)
    if args.system in ("paddle-dp", "ngraph-dygraph", "ngraph-dygraph-fleet"):
        return dygraph_worker(args)
    if args.system == "torch-ddp":
        return torch_worker(args)
    import paddle

    paddle.enable_static()
    from paddle_ngraph.zoo.models import build_program, make_batch

    zoo_model, model_kwargs = resolve(args.model)
    main, startup, _, loss = build_program(zoo_model, args.optimizer, lr=0.01, **model_kwargs)
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    rank, engine = 0, None
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        if args.system.startswith("ngraph"):
            import paddle_ngraph
            from paddle_ngraph.transpiler import engines

            from paddle_ngraph.zoo.models import checkpoint_names

            backend = "INTERPRETER" if args.system == "ngraph-interp" else "CPU"
            checkpoints = checkpoint_names(zoo_model, main) if args.recompute == "on" else []
            paddle_ngraph.transpile(main, backend=backend, bucket_mb=args.bucket_mb, zero_stage=args.zero_stage,
                                    compress=args.compress, accumulate_steps=int(args.accumulate_steps),
                                    recompute_checkpoints=checkpoints, threads=int(args.threads),
                                    precision=args.precision)
            engine = engines()[-1]
            rank = engine.transport.rank if engine.transport is not None else 0
        rng = np.random.default_rng(rank)
        feeds = [make_batch(zoo_model, args.batch, rng) for _ in range(4)]
        # One timed step = k calls (micro-batches) with accumulation: one optimizer update.
        k = int(args.accumulate_steps) if engine is not None else 1

        def step(i):
            for j in range(k):
                exe.run(main, feed=feeds[(i * k + j) % 4], fetch_list=[loss])

        for i in range(args.warmup):
            step(i)
        repeats = []
        for _ in range(args.repeats):
            if engine is not None:
                engine.comm_seconds = engine.wait_seconds = 0.0
            times = []
            for i in range(args.steps):
                t0 = time.perf_counter()
                step(i)
                times.append(time.perf_counter() - t0)
            repeat = {"ms_per_step": 1e3 * float(np.median(times)), "mean_ms_per_step": 1e3 * float(np.mean(times))}
            if engine is not None and engine.comm_seconds > 0:
                repeat["hidden_share"] = max(0.0, 1.0 - engine.wait_seconds / engine.comm_seconds)
                repeat["comm_ms_per_step"] = 1e3 * engine.comm_seconds / args.steps
            repeats.append(repeat)
        state_mb = optimizer_state_bytes(scope, engine) / 2**20
    result = {"rank": rank, "repeats": repeats, "peak_rss_mb": peak_rss_mb(), "optimizer_state_mb": state_mb}
    if engine is not None and args.precision == "bf16":
        # What the engine did with the marks: the CPU backend's reason for float32, if it ran float32.
        result["precision_note"] = getattr(engine.executable, "float32_instead", None) or "bf16 as marked"
    peak = engine.executable.peak_bytes if engine is not None else None
    if peak is not None:
        result["arena_mb"] = peak / 2**20
    return result


def optimizer_state_bytes(scope, engine) -> int:
    """Bytes of optimizer state (moments, velocities) this rank holds: in the scope, and in the
    engine's ZeRO-1 slices (not counting the slices of the parameters themselves)."""
    import numpy as np

    total = 0
    for name in scope.local_var_names():
        if "moment" in name or "velocity" in name:
            tensor = scope.find_var(name).get_tensor()
            total += np.array(tensor).nbytes if tensor._is_initialized() else 0
    sharded = getattr(engine, "sharded", None)
    if sharded is not None:
        total += sum(a.nbytes for n, a in zip(sharded.names, sharded.arrays) if n != sharded.sources[n].master)
    return total


def peer_feeds(args, rank):
    """The model's feeds as NumPy arrays, features first and the label last, as in the zoo's FEEDS."""
    import numpy as np

    from paddle_ngraph.zoo.models import FEEDS, make_batch

    rng = np.random.default_rng(rank)
    zoo_model, _ = resolve(args.model)
    return [[batch[name] for name in FEEDS[zoo_model]] for batch in (make_batch(zoo_model, args.batch, rng)
                                                                     for _ in range(4))]


def dygraph_worker(args) -> dict:
    """paddle.DataParallel over gloo, the model rebuilt in dygraph."""
    import paddle
    import paddle.distributed as dist

    from bench_models import paddle_loss, paddle_model

    if args.system == "ngraph-dygraph-fleet":
        import paddle_ngraph  # noqa: F401  (strategy.ngraph)
        from paddle.distributed import fleet

        strategy = fleet.DistributedStrategy()
        strategy.ngraph = True
        strategy.ngraph_configs = {"bucket_mb": args.bucket_mb, "compress": args.compress, "threads": int(args.threads)}
        fleet.init(is_collective=True, strategy=strategy)
        model = fleet.distributed_model(peer_model(paddle_model, args.model))
        opt = fleet.distributed_optimizer(paddle.optimizer.SGD(0.01, parameters=model.parameters()))
        return dygraph_loop(args, model, opt, dist.get_rank())
    if args.system == "ngraph-dygraph":
        import paddle_ngraph  # under mpirun, this sets the ranks Paddle's APIs report

        model = paddle_ngraph.DataParallel(peer_model(paddle_model, args.model), bucket_mb=args.bucket_mb,
                                           compress=args.compress,
                                           threads=int(args.threads))
        opt = paddle.optimizer.SGD(0.01, parameters=model.parameters())
        return dygraph_loop(args, model, opt, dist.get_rank())
    dist.init_parallel_env()
    rank = dist.get_rank()
    model = peer_model(paddle_model, args.model)
    model = paddle.DataParallel(model) if dist.get_world_size() > 1 else model
    opt = paddle.optimizer.SGD(0.01, parameters=model.parameters())
    return dygraph_loop(args, model, opt, rank)


def peer_model(factory, name: str):
    """The dygraph or torch model of a benchmark model name (a zoo model or one of its VARIANTS)."""
    zoo_model, model_kwargs = resolve(name)
    return factory(zoo_model, **model_kwargs)


def dygraph_loop(args, model, opt, rank) -> dict:
    import paddle

    from bench_models import paddle_loss

    feeds = [[paddle.to_tensor(a) for a in batch] for batch in peer_feeds(args, rank)]

    def step(i):
        *inputs, y = feeds[i % 4]
        loss = paddle_loss(model(*inputs), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        float(loss)

    return timed(step, args, rank)


def torch_worker(args) -> dict:
    """torch DDP over gloo, the model rebuilt in torch, one thread per rank as torchrun's default."""
    import torch
    import torch.distributed as dist

    from bench_models import torch_loss, torch_model

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    model = peer_model(torch_model, args.model)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    feeds = [[torch.from_numpy(a) for a in batch] for batch in peer_feeds(args, rank)]

    # --precision bf16: torch's own mixed precision on CPU, autocast around the forward and the loss.
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.precision == "bf16" else contextlib.nullcontext

    def step(i):
        *inputs, y = feeds[i % 4]
        with autocast():
            loss = torch_loss(model(*inputs), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        float(loss)

    return timed(step, args, rank)


def timed(step, args, rank) -> dict:
    import numpy as np

    for i in range(args.warmup):
        step(i)
    repeats = []
    for _ in range(args.repeats):
        times = []
        for i in range(args.steps):
            t0 = time.perf_counter()
            step(i)
            times.append(time.perf_counter() - t0)
        repeats.append({"ms_per_step": 1e3 * float(np.median(times))})
    return {"rank": rank, "repeats": repeats, "peak_rss_mb": peak_rss_mb()}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --- orchestrator -----------------------------------------------------------------------------------------
def venv_bin(name: str) -> str:
    path = os.path.join(os.path.dirname(sys.executable), name)
    return path if os.path.exists(path) else (shutil.which(name) or name)


def launch_command(system: str, ranks: int, worker_args: list[str], log_dir: str) -> list[str] | None:
    script = [sys.executable, os.path.abspath(__file__), "--worker", *worker_args]
    if ranks == 1 and system not in ("ngraph-ccl", "ngraph-dygraph-fleet"):
        return script
    if system in ("ngraph-cpu", "ngraph-interp", "ngraph-dygraph"):
        return [venv_bin("mpirun"), "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), *script]
    if system in ("ngraph-ccl", "paddle-dp", "ngraph-dygraph-fleet"):
        return [sys.executable, "-m", "paddle.distributed.launch", "--log_dir", log_dir,
                "--nproc_per_node", str(ranks), *script[1:]]
    if system == "torch-ddp":
        return [venv_bin("torchrun"), "--standalone", f"--nproc_per_node={ranks}", *script[1:]]
    return None


def unsupported(system: str, model: str, ranks: int) -> str | None:
    if system == "paddle" and ranks > 1:
        return ("Paddle 3.3.1 static collective training does not run on CPU (fleet minimize: "
                "'comm_id must be generated in paddlepaddle-xpu', see ../shared/notes/platform.md)")
    if system == "ngraph-ccl" and ranks == 1:
        return "one rank has nothing to communicate (see ngraph-cpu)"
    if system == "ngraph-dygraph-fleet" and ranks == 1:
        return "fleet's dygraph path needs a launcher (see ngraph-dygraph for one process)"
    if system == "torch-ddp":
        try:
            import torch  # noqa: F401
        except ImportError:
            return "torch is not installed (pip install torch==2.13.0 to compare)"
    if system in ("ngraph-ccl", "ngraph-dygraph-fleet"):
        from paddle_ngraph.distributed.ccl import available

        if not available():
            return "the ccl transport is not built"
    return None


def run_config(system, model, ranks, args, accumulate_steps: int = 1, recompute: str = "off") -> dict:
    """One configuration; a failed run is tried once more, and the first failure is kept in the result
    (torchrun's gloo rendezvous, for one, fails now and then on a loaded machine)."""
    reason = unsupported(system, model, ranks)
    if reason:
        return {"status": "not run", "reason": reason}
    result = run_once(system, model, ranks, args, accumulate_steps, recompute)
    for _ in range(args.retries):
        if result["status"] != "failed":
            break
        first = result["reason"]
        print(f"failed ({first[-200:]}); trying once more...", end=" ", file=sys.stderr, flush=True)
        time.sleep(5)  # let the failed run's sockets and processes go
        result = run_once(system, model, ranks, args, accumulate_steps, recompute)
        result["earlier_failure"] = first
    return result


def outcome(result: dict) -> str:
    if result["status"] == "ok":
        return f"{result['ms_per_step']:.2f} ms/step, {result['samples_per_s']:.0f} samples/s"
    return f"{result['status']}: {result['reason'][-200:]}"


def run_once(system, model, ranks, args, accumulate_steps: int = 1, recompute: str = "off",
             threads: int | None = None, precision: str = "fp32") -> dict:
    """One job of one configuration. ``threads``: compute threads per rank (default: the cores shared out
    among the ranks); the engine's ``threads`` key is 0 (its default) unless given."""
    with tempfile.TemporaryDirectory() as tmp:
        worker_args = ["--system", system, "--model", model, "--batch", str(args.batch), "--steps", str(args.steps),
                       "--warmup", str(args.warmup), "--repeats", str(args.repeats), "--optimizer", args.optimizer,
                       "--bucket-mb", str(args.bucket_mb), "--zero-stage", str(args.zero_stage), "--compress", args.compress,
                       "--result-dir", tmp, "--accumulate-steps", str(accumulate_steps), "--recompute", recompute,
                       "--threads", str(threads or 0), "--precision", precision]
        cmd = launch_command(system, ranks, worker_args, os.path.join(tmp, "log"))
        env = quiet_env(OMP_NUM_THREADS=str(threads or max(1, (os.cpu_count() or 1) // ranks)))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
        except subprocess.TimeoutExpired:
            return {"status": "failed", "reason": f"timed out after {args.timeout} s"}
        results = [json.load(open(os.path.join(tmp, f))) for f in sorted(os.listdir(tmp)) if f.endswith(".json")]
        if proc.returncode != 0 or len(results) != ranks:
            logs = ""
            log_dir = os.path.join(tmp, "log")
            if os.path.isdir(log_dir):
                logs = "".join(open(os.path.join(log_dir, f), errors="replace").read()[-1500:]
                               for f in sorted(os.listdir(log_dir)))
            tail = (proc.stderr + proc.stdout + logs).strip().splitlines()[-6:]
            return {"status": "failed", "reason": " | ".join(tail)}
    return summarize(results, ranks, args.batch * accumulate_steps)


def summarize(results: list[dict], ranks: int, batch: int) -> dict:
    """``batch``: samples per rank and step (k micro-batches with accumulation)."""
    import numpy as np

    # A step of the job lasts as long as its slowest rank's.
    per_repeat = [max(r["repeats"][k]["ms_per_step"] for r in results) for k in range(len(results[0]["repeats"]))]
    ms = float(np.median(per_repeat))
    out = {"status": "ok", "ms_per_step": ms, "ms_spread": [float(min(per_repeat)), float(max(per_repeat))],
           "samples_per_s": ranks * batch * 1e3 / ms, "peak_rss_mb": max(r["peak_rss_mb"] for r in results)}
    if "precision_note" in results[0]:  # what the engine did with precision bf16 (bf16 kernels, or why float32)
        out["precision_note"] = results[0]["precision_note"]
    if "optimizer_state_mb" in results[0]:
        out["optimizer_state_mb"] = max(r["optimizer_state_mb"] for r in results)
    if "arena_mb" in results[0]:
        out["arena_mb"] = max(r["arena_mb"] for r in results)
    hidden = [rep["hidden_share"] for r in results for rep in r["repeats"] if "hidden_share" in rep]
    if hidden:
        out["hidden_share"] = float(np.median(hidden))
        out["comm_ms_per_step"] = float(np.median([rep["comm_ms_per_step"] for r in results for rep in r["repeats"]
                                                   if "comm_ms_per_step" in rep]))
        # comm time is summed over a repeat's steps: compare it with the mean step, not the median.
        out["comm_share"] = float(np.median([rep["comm_ms_per_step"] / rep["mean_ms_per_step"] for r in results
                                             for rep in r["repeats"] if "comm_ms_per_step" in rep]))
    return out


def measure_limits() -> dict:
    """sgemm GFLOP/s (NumPy's BLAS, all cores) and memcpy GB/s, measured now."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    a @ a
    t0 = time.perf_counter()
    n = 10
    for _ in range(n):
        a @ a
    gflops = n * 2 * 1024 ** 3 / (time.perf_counter() - t0) / 1e9
    src = np.ones(64 << 20, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    t0 = time.perf_counter()
    for _ in range(n):
        np.copyto(dst, src)
    gbs = n * src.nbytes / (time.perf_counter() - t0) / 1e9
    return {"sgemm_gflops": gflops, "memcpy_gbs": gbs}


def model_gflop_per_sample(model: str) -> float | None:
    """Forward + backward FLOPs per sample of the model's matmuls and convolutions (3x forward)."""
    quiet_this_process()
    import paddle

    paddle.enable_static()
    import paddle_ngraph
    from paddle_ngraph.ir import clone_function
    from paddle_ngraph.zoo.models import build_program

    from bench_models import resolve

    zoo_model, model_kwargs = resolve(model)
    main, _, _, _ = build_program(zoo_model, "sgd", **model_kwargs)
    function = paddle_ngraph.convert(main)
    shapes = {p.name: tuple(1 if d < 0 else d for d in p.output_types[0].shape) for p in function.parameters}
    function = clone_function(function, shapes)
    flop = 0
    for node in function.ordered_nodes():
        if node.op_type == "MatMul":
            a, b = node.inputs[0].type.shape, node.inputs[1].type.shape
            k = a[-2] if node.attrs["transpose_a"] else a[-1]
            out = 1
            for d in node.output_types[0].shape:
                out *= d
            flop += 2 * out * k
        elif node.op_type == "Convolution":
            w = node.inputs[1].type.shape
            out = 1
            for d in node.output_types[0].shape:
                out *= d
            flop += 3 * 2 * out * (w[1] * w[2] * w[3])  # forward, backward data, backward filter
    return flop / 1e9 if flop else None


def print_table(report: dict):
    limits = report["limits"]
    print(f"\n{report['machine']}  sgemm {limits['sgemm_gflops']:.0f} GFLOP/s, memcpy {limits['memcpy_gbs']:.1f} GB/s, "
          f"per-rank batch {report['batch']}")
    header = f"{'model':18s} {'system':14s} {'ranks':>5s} {'ms/step':>9s} {'spread':>15s} {'samples/s':>10s} " \
             f"{'scaling':>7s} {'hidden':>6s} {'RSS MB':>7s}  note"
    print(header)
    print("-" * len(header))
    for row in report["results"]:
        r = row["result"]
        if r["status"] != "ok":
            print(f"{row['model']:18s} {system_label(row):14s} {row['ranks']:5d} {'-':>9s} {'':15s} {'':10s} {'':7s} "
                  f"{'':6s} {'':7s}  {r['status']}: {r['reason'][:110]}")
            continue
        spread = f"{r['ms_spread'][0]:.2f}-{r['ms_spread'][1]:.2f}"
        scaling = f"{r['scaling']:.2f}" if "scaling" in r else ""
        hidden = f"{100 * r['hidden_share']:.0f}%" if "hidden_share" in r else ""
        note = f"FLOP bound {r['flop_bound_ms']:.2f} ms" if "flop_bound_ms" in r else ""
        if "earlier_failure" in r:
            note += " (second try; the first failed)"
        if r.get("optimizer_state_mb"):
            note += f" optimizer state {r['optimizer_state_mb']:.2f} MB/rank"
        if "comm_share" in r:
            note += f" comm {100 * r['comm_share']:.0f}% of the step"
        if "arena_mb" in r:
            note += f" arena {r['arena_mb']:.2f} MB"
        print(f"{row['model']:18s} {system_label(row):14s} {row['ranks']:5d} {r['ms_per_step']:9.2f} {spread:>15s} "
              f"{r['samples_per_s']:10.0f} {scaling:>7s} {hidden:>6s} {r['peak_rss_mb']:7.0f}  {note}")


def system_label(row: dict) -> str:
    k = row.get("accumulate_steps", 1)
    return row["system"] + (f" k={k}" if k > 1 else "") + (" rc" if row.get("recompute") == "on" else "")


def run_allreduce_bench(args) -> list:
    """tools/bench_allreduce.py on 2 ranks under mpirun; [] with a message if it cannot run."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "allreduce.json")
        cmd = [venv_bin("mpirun"), "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable,
               os.path.join(HERE, "bench_allreduce.py"), "--json", out, "--repeats", "3" if args.smoke else "10",
               "--max-bytes", str(1 << 20 if args.smoke else 64 << 20),
               "--systems", "native,native-bf16,native-fp16,ccl,mpi,mpi4py"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                              env=quiet_env())
        if proc.returncode != 0 or not os.path.exists(out):
            print(f"allreduce benchmark failed: {(proc.stderr or proc.stdout)[-500:]}", file=sys.stderr)
            return []
        return json.load(open(out))


def write_markdown(report: dict, path: str):
    limits = report["limits"]
    lines = [f"Run {report['date']} on {report['machine']}; sgemm {limits['sgemm_gflops']:.0f} GFLOP/s, memcpy "
             f"{limits['memcpy_gbs']:.1f} GB/s (measured in the same run); per-rank batch {report['batch']}, "
             f"{report['optimizer']}, median of {report['repeats']} repeats of {report['steps']} steps.", "",
             "| model | system | ranks | ms/step | spread | samples/s | scaling | hidden comm | comm share | peak RSS MB | arena MB | FLOP bound ms |",
             "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in report["results"]:
        r = row["result"]
        if r["status"] != "ok":
            lines.append(f"| {row['model']} | {system_label(row)} | {row['ranks']} | {r['status']}: {r['reason']} | | | | | | | | |")
            continue
        if "earlier_failure" in r:
            lines.append(f"| {row['model']} | {system_label(row)} | {row['ranks']} | first try failed: "
                         f"{r['earlier_failure'][-150:]} | | | | | | | | |")
        lines.append(f"| {row['model']} | {system_label(row)} | {row['ranks']} | {r['ms_per_step']:.2f} | "
                     f"{r['ms_spread'][0]:.2f}-{r['ms_spread'][1]:.2f} | {r['samples_per_s']:.0f} | "
                     f"{r.get('scaling', float('nan')):.2f} | "
                     f"{(str(round(100 * r['hidden_share'])) + '%') if 'hidden_share' in r else ''} | "
                     f"{(str(round(100 * r['comm_share'])) + '%') if 'comm_share' in r else ''} | "
                     f"{r['peak_rss_mb']:.0f} | {(format(r['arena_mb'], '.2f')) if 'arena_mb' in r else ''} | "
                     f"{r.get('flop_bound_ms', float('nan')):.2f} |")
    if report.get("allreduce"):
        lines += ["", "Allreduce, 2 ranks, float32 sum (bus GB/s = 2(n-1)/n x bytes / time):", "",
                  "| system | bytes | ms | bus GB/s |", "| --- | ---: | ---: | ---: |"]
        lines += [f"| {a['system']} | {a['bytes']} | {a['ms']:.3f} | {a['bus_GBps']:.2f} |" for a in report["allreduce"]]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def plot(report: dict, stem: str) -> list[str]:
    """The seeds' picture: throughput bars per system against rank count, one panel per model;
    and allreduce bus bandwidth against message size."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots (make bench-deps)", file=sys.stderr)
        return []
    written = []
    models = list(dict.fromkeys(r["model"] for r in report["results"]))
    everyone = list(dict.fromkeys(r["system"] for r in report["results"] if r["result"]["status"] == "ok"))
    colors = {system: f"C{i}" for i, system in enumerate(everyone)}  # one color per system in every panel
    fig, axes = plt.subplots(1, len(models), figsize=(4.5 * len(models), 4.4), squeeze=False)
    for ax, model in zip(axes[0], models):
        rows = [r for r in report["results"] if r["model"] == model and r["result"]["status"] == "ok"]
        systems = list(dict.fromkeys(r["system"] for r in rows))
        ranks = sorted({r["ranks"] for r in rows})
        width = 0.8 / max(len(systems), 1)
        for k, system in enumerate(systems):
            values = [next((r["result"]["samples_per_s"] for r in rows if r["system"] == system and r["ranks"] == n), 0)
                      for n in ranks]
            ax.bar([i + k * width for i in range(len(ranks))], values, width, label=system, color=colors[system])
        ax.set_xticks([i + width * (len(systems) - 1) / 2 for i in range(len(ranks))])
        ax.set_xticklabels([f"{n} rank{'s' if n > 1 else ''}" for n in ranks])
        ax.set_title(model)
        ax.set_ylabel("samples/s")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[s]) for s in everyone]
    fig.legend(handles, everyone, loc="lower center", ncol=len(everyone), fontsize=8, frameon=False)
    fig.suptitle(f"Training throughput, per-rank batch {report['batch']} ({report['machine']})", fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(stem + "_throughput.png", dpi=110)
    written.append(stem + "_throughput.png")
    if report.get("allreduce"):
        fig, ax = plt.subplots(figsize=(6, 4))
        for system in dict.fromkeys(a["system"] for a in report["allreduce"]):
            points = [a for a in report["allreduce"] if a["system"] == system]
            ax.plot([a["bytes"] for a in points], [a["bus_GBps"] for a in points], marker="o", label=system)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message bytes")
        ax.set_ylabel("bus GB/s")
        ax.axhline(report["limits"]["memcpy_gbs"], color="grey", linestyle="--", label="memcpy (same run)")
        ax.set_title("Allreduce, 2 ranks, float32 sum")
        ax.legend()
        fig.tight_layout()
        fig.savefig(stem + "_allreduce.png", dpi=110)
        written.append(stem + "_allreduce.png")
    return written


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=None, help="comma-separated, from: " + ", ".join(MODELS + list(VARIANTS)) +
                        " (default: " + ",".join(MODELS) + "; with --precision fp32,bf16: " + ",".join(PRECISION_MODELS) +
                        "); mnist_mlp_wide is mnist_mlp with hidden layers 1024-1024")
    parser.add_argument("--systems", default=None, help="comma-separated, from: " + ", ".join(SYSTEMS) +
                        " (default: all; with --scaling: " + ",".join(SCALING_SYSTEMS) + ")")
    parser.add_argument("--ranks", default=None,
                        help="comma-separated rank counts (default 1,2,4; with --precision fp32,bf16: 1)")
    parser.add_argument("--batch", type=int, default=128, help="per-rank batch (default 128)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per repeat (default 30)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--optimizer", default="sgd", choices=["sgd", "momentum", "adam"])
    parser.add_argument("--bucket-mb", type=float, default=32.0, help="gradient fusion bucket of paddle_ngraph")
    parser.add_argument("--zero-stage", type=int, default=0, choices=[0, 1],
                        help="paddle_ngraph's zero_stage: 1 shards the optimizer state (ZeRO-1)")
    parser.add_argument("--accumulate-steps", default="1",
                        help="comma-separated accumulate_steps k for the ngraph systems (e.g. 1,2,4): a step is "
                             "k micro-batches of --batch and one update; other systems run k=1 only")
    parser.add_argument("--compress", default="none", choices=["none", "bf16", "fp16"],
                        help="wire format of the ngraph systems' float32 gradients (the compress key; default none)")
    parser.add_argument("--recompute", default="off", choices=["off", "on", "both"],
                        help="recompute in the ngraph systems, with each model's layer outputs as checkpoints; both: "
                             "with and without, side by side (labelled 'rc')")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per configuration")
    parser.add_argument("--out", default="bench_results.json", help="JSON report (default bench_results.json)")
    parser.add_argument("--smoke", action="store_true", help="2 steps, 1 repeat, batch 8: checks that it runs")
    parser.add_argument("--no-allreduce", action="store_true", help="skip the allreduce micro-benchmark")
    parser.add_argument("--retries", type=int, default=1, help="runs more of a configuration that failed (default 1)")
    parser.add_argument("--replot", action="store_true", help="only rewrite the table and plots from --out's JSON")
    parser.add_argument("--scaling", action="store_true",
                        help="scaling mode: one rank with one thread against N ranks (--ranks) with one thread each, "
                             "in --rounds interleaved rounds; systems default to " + ",".join(SCALING_SYSTEMS) +
                             " (see tools/bench_scaling.py)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds of --scaling and --precision fp32,bf16 (default 5)")
    parser.add_argument("--precision", default="fp32",
                        help="fp32 (default), or fp32,bf16: precision mode, each model's step in float32 against bf16 "
                             "(the engine's precision: bf16; torch's autocast) in interleaved rounds of one run "
                             "(see tools/bench_precision.py)")
    # worker mode (started by this tool)
    parser.add_argument("--small", action="store_true",
                        help="the small-programs suite: fixed per-step costs of tiny dygraph Layers and small static "
                             "programs (also with one op left to Paddle) against Paddle in one process, interleaved "
                             "--rounds, and transpile's time under mpirun and paddle.distributed.launch "
                             "(see tools/bench_small.py)")
    parser.add_argument("--cases", default=None, help="with --small, comma-separated, from: " + ", ".join(SMALL_CASES) +
                        " (default: all)")
    parser.add_argument("--small-steps", type=int, default=200, help="with --small: timed steps per system and round")
    add_mp_options(parser)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mp-degree", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--mp-model", help=argparse.SUPPRESS)
    parser.add_argument("--system", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--result-dir", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.worker:
        result = worker(args)
        with open(os.path.join(args.result_dir, f"rank{result['rank']}.json"), "w") as f:
            json.dump(result, f)
        return 0

    if args.replot:
        return replot(args.out)
    if args.small:
        return small_mode(parser, args)
    if args.mp:
        return mp_mode(parser, args)
    models, systems, ranks, accumulate, precision_mode = resolve_selection(parser, args)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    if args.scaling or precision_mode:
        if args.rounds < 1:
            parser.error("--rounds: at least 1")
        # One timed repeat per job: the rounds are the repeats.
        args.repeats = 1
    if args.scaling:
        limits = measure_limits()
        report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(), "batch": args.batch,
                  "steps": args.steps, "optimizer": args.optimizer, "limits": limits,
                  "scaling": run_scaling(models, systems, ranks, args, run_once, unsupported)}
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
        return write_scaling(report, args.out)

    if precision_mode:
        report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(), "batch": args.batch,
                  "steps": args.steps, "optimizer": args.optimizer,
                  "precision": run_precision(models, systems, ranks, args, run_once, unsupported)}
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
        return write_precision(report, args.out)

    return run_throughput(models, systems, ranks, accumulate, args)


def replot(out: str) -> int:
    """Rewrites the table and plots of a report already measured."""
    report = json.load(open(out))
    stem = os.path.splitext(out)[0]
    if "scaling" in report:
        return write_scaling(report, out)
    if "precision" in report:
        return write_precision(report, out)
    if "small" in report:
        return write_small(report, out)
    write_markdown(report, stem + ".md")
    print_table(report)
    print(f"\nwritten: {', '.join([stem + '.md'] + plot(report, stem))}")
    return 0


def resolve_selection(parser, args):
    """The models, systems, rank counts and accumulation steps to measure, from the options and
    the mode's defaults; usage errors through ``parser``."""
    if args.smoke:
        args.steps, args.warmup, args.repeats, args.batch = 2, 1, 1, 8
    precisions = [p for p in args.precision.split(",") if p]
    precision_mode = precisions != ["fp32"]
    if precision_mode and sorted(precisions) != ["bf16", "fp32"]:
        parser.error(f"--precision: fp32 or fp32,bf16, got '{args.precision}'")
    if precision_mode and args.scaling:
        parser.error("--precision fp32,bf16 and --scaling are separate modes: run them one at a time")
    if args.models is None:
        args.models = ",".join(PRECISION_MODELS if precision_mode else MODELS)
    models = [m for m in args.models.split(",") if m]
    if args.systems is None:
        args.systems = ",".join(SCALING_SYSTEMS if args.scaling else PRECISION_SYSTEMS if precision_mode else SYSTEMS)
    systems = [s for s in args.systems.split(",") if s]
    if args.ranks is None:
        args.ranks = "1" if precision_mode else "1,2,4"
    ranks = [int(r) for r in args.ranks.split(",") if r]
    try:
        accumulate = [int(k) for k in args.accumulate_steps.split(",") if k]
    except ValueError:
        accumulate = []
    if not accumulate or min(accumulate) < 1:
        parser.error(f"--accumulate-steps: integers >= 1, got '{args.accumulate_steps}'")
    for m in models:
        if m not in MODELS and m not in VARIANTS:
            parser.error(f"unknown model '{m}'; valid: {', '.join(MODELS + list(VARIANTS))}")
    for s in systems:
        if s not in SYSTEMS:
            parser.error(f"unknown system '{s}'; valid: {', '.join(SYSTEMS)}")
    return models, systems, ranks, accumulate, precision_mode


def run_throughput(models, systems, ranks, accumulate, args) -> int:
    """The default mode: every configuration once (with its repeats), then the report."""
    limits = measure_limits()
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(), "batch": args.batch,
              "steps": args.steps, "repeats": args.repeats, "optimizer": args.optimizer, "compress": args.compress,
              "limits": limits,
              "results": []}
    recomputes = {"off": ["off"], "on": ["on"], "both": ["off", "on"]}[args.recompute]
    configs = [(model, system, n, k, rc) for model in models for system in systems for n in ranks
               for k in (accumulate if system.startswith("ngraph") else [1])
               for rc in (recomputes if system.startswith("ngraph") else ["off"])]
    for done, (model, system, n, k, rc) in enumerate(configs, start=1):
        gflop = model_gflop_per_sample(model)
        label = (f" accumulate_steps {k}" if k > 1 else "") + (" recompute" if rc == "on" else "")
        # One line per configuration: what runs now, completed with its outcome when it is done.
        print(f"[{done}/{len(configs)}] {model} {system} {n} rank(s){label}...", end=" ", file=sys.stderr, flush=True)
        started = time.monotonic()
        result = run_config(system, model, n, args, k, rc)
        print(f"{outcome(result)} ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
        if result["status"] == "ok" and gflop:
            # Each rank computes its own batch on its share of the cores.
            cores = max(1, (os.cpu_count() or 1) // n)
            result["flop_bound_ms"] = 1e3 * gflop * args.batch * k / (limits["sgemm_gflops"] * cores /
                                                                        (os.cpu_count() or 1))
        report["results"].append({"model": model, "system": system, "ranks": n, "accumulate_steps": k,
                                  "recompute": rc, "result": result})
    for row in report["results"]:
        base = next((r["result"] for r in report["results"] if r["model"] == row["model"] and r["ranks"] == 1
                     and r.get("accumulate_steps", 1) == row.get("accumulate_steps", 1)
                     and r.get("recompute", "off") == row.get("recompute", "off")
                     and r["system"] == row["system"].replace("ngraph-ccl", "ngraph-cpu")
                     and r["result"]["status"] == "ok"), None)
        if base and row["result"]["status"] == "ok":
            row["result"]["scaling"] = row["result"]["samples_per_s"] / (row["ranks"] * base["samples_per_s"])
    if not args.no_allreduce:
        print("allreduce micro-benchmark (2 ranks)...", file=sys.stderr, flush=True)
        report["allreduce"] = run_allreduce_bench(args)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    stem = os.path.splitext(args.out)[0]
    write_markdown(report, stem + ".md")
    written = [args.out, stem + ".md"] + plot(report, stem)
    print_table(report)
    print(f"\nwritten: {', '.join(written)}")
    return 0




def small_mode(parser, args) -> int:
    cases = [c for c in (args.cases or ",".join(SMALL_CASES)).split(",") if c]
    for case in cases:
        if case not in SMALL_CASES:
            parser.error(f"unknown case '{case}'; valid: {', '.join(SMALL_CASES)}")
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    if args.smoke:
        args.rounds, args.small_steps = 1, 5
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    report = {"small": run_small(cases, args), "machine": machine()}
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    return write_small(report, args.out)


def mp_mode(parser, args) -> int:
    """--mp: tensor parallelism against data parallelism and one process (tools/bench_mp.py)."""
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    if args.smoke:
        args.rounds, args.steps, args.warmup = 1, 2, 1
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(),
              "mp": run_mp(args, launch_command, quiet_env, interleaved_rounds)}
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    return write_mode_table(mp_header(report["mp"], report["machine"], report["date"]), mp_lines(report["mp"]),
                            args.out)


def write_small(report: dict, out: str) -> int:
    return write_mode_table(small_header(report["small"], report["machine"]), small_lines(report["small"]), out)


def write_scaling(report: dict, out: str) -> int:
    limits = report["limits"]
    header = (f"Run {report['date']} on {report['machine']}; sgemm {limits['sgemm_gflops']:.0f} GFLOP/s, memcpy "
              f"{limits['memcpy_gbs']:.1f} GB/s (measured in the same run); per-rank batch {report['batch']}, "
              f"{report['optimizer']}, median step of {report['steps']} steps per job.")
    return write_mode_table(header, scaling_lines(report["scaling"]), out)


def write_precision(report: dict, out: str) -> int:
    header = (f"Run {report['date']} on {report['machine']}; per-rank batch {report['batch']}, {report['optimizer']}, "
              f"median step of {report['steps']} steps per job.")
    return write_mode_table(header, precision_lines(report["precision"]), out)


def write_mode_table(header: str, table: list[str], out: str) -> int:
    """A mode's report (--scaling, --precision) as Markdown next to its JSON ``out``, and on stdout."""
    lines = [header, ""] + table
    stem = os.path.splitext(out)[0]
    with open(stem + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nwritten: {out}, {stem}.md")
    return 0


def machine() -> str:
    from paddle_ngraph.backends.cpu.precision import cpu_info

    model, _ = cpu_info()
    return f"{os.cpu_count()} cores, {model if model != 'unknown' else platform.processor() or model}"


if __name__ == "__main__":
    sys.exit(main())
