#!/usr/bin/env python
"""Generates docs/COVERAGE.md: what of Paddle's API surface the engine runs, measured on programs.

  python tools/coverage.py                  # (re)writes docs/COVERAGE.md
  python tools/coverage.py --check          # exit 1 if docs/COVERAGE.md is not up to date
  python tools/coverage.py --train          # also trains every vision model 3 steps against Paddle
  python tools/coverage.py --only resnet18  # a subset of rows (implies printing, no writing)
  python tools/coverage.py --check --models resnet18 vgg11
                                            # check every layer, loss and optimizer row and these
                                            # vision models only (what make test does: building all
                                            # 37 models in both IRs takes Paddle minutes)

Each row is a real training program built with Paddle's own API in both IRs: every model
constructor of ``paddle.vision.models``, the trainable layers and losses of ``paddle.nn`` (their
forward, a mean as loss, SGD), every optimizer of ``paddle.optimizer`` with regularizers and
gradient clipping, the learning-rate schedulers and the metric ops. Its status per IR:

- ``native``: every op converts; the whole program runs on the engine;
- ``falls back: ops``: these ops stay Paddle ops between engine segments (docs/fallback.md, "Fallback to
  Paddle"); the program trains all the same;
- ``Paddle cannot build it``: Paddle 3.3.1's own Python API fails to build it in that IR (the
  first line of its error), so there is nothing to run.

Progress goes to stderr, one line per row.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

from paddle_ngraph.quiet import quiet_this_process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUTPUT = os.path.join(ROOT, "docs", "COVERAGE.md")
IRS = ("pir", "legacy")


# --- the rows ------------------------------------------------------------------------------------
def _layer_rows():
    """(section, label, feeds {name: (shape, dtype)}, build(**vars) -> output to minimize)."""
    import paddle
    import paddle.nn as nn
    import paddle.nn.functional as F

    def layer(make, shape=(4, 8)):
        return lambda x: make()(x)

    img, seq, vol = (2, 4, 8, 8), (2, 4, 16), (2, 2, 4, 6, 6)
    rows = [
        ("Linear", layer(lambda: nn.Linear(8, 6))),
        ("Bilinear", lambda x: nn.Bilinear(8, 8, 4)(x, x)),
        ("Embedding", None), ("Embedding(padding_idx)", None),
        ("Conv1D", layer(lambda: nn.Conv1D(4, 6, 3, padding=1), seq)),
        ("Conv2D", layer(lambda: nn.Conv2D(4, 6, 3, padding=1), img)),
        ("Conv2D(groups=2)", layer(lambda: nn.Conv2D(4, 6, 3, groups=2), img)),
        ("Conv2D(depthwise)", layer(lambda: nn.Conv2D(4, 8, 3, groups=4), img)),
        ("Conv2D(NHWC)", layer(lambda: nn.Conv2D(8, 4, 3, data_format="NHWC"), img)),
        ("Conv3D", layer(lambda: nn.Conv3D(2, 3, 3), vol)),
        ("Conv1DTranspose", layer(lambda: nn.Conv1DTranspose(4, 3, 3), seq)),
        ("Conv2DTranspose", layer(lambda: nn.Conv2DTranspose(4, 3, 3, stride=2), img)),
        ("Conv3DTranspose", layer(lambda: nn.Conv3DTranspose(2, 3, 3), vol)),
        ("MaxPool1D", layer(lambda: nn.MaxPool1D(2), seq)),
        ("AvgPool1D", layer(lambda: nn.AvgPool1D(2), seq)),
        ("MaxPool2D", layer(lambda: nn.MaxPool2D(2), img)),
        ("AvgPool2D", layer(lambda: nn.AvgPool2D(3, stride=2, padding=1), img)),
        ("MaxPool3D", layer(lambda: nn.MaxPool3D(2), vol)),
        ("AvgPool3D", layer(lambda: nn.AvgPool3D(2), vol)),
        ("AdaptiveAvgPool1D", layer(lambda: nn.AdaptiveAvgPool1D(4), seq)),
        ("AdaptiveMaxPool1D", layer(lambda: nn.AdaptiveMaxPool1D(4), seq)),
        ("AdaptiveAvgPool2D", layer(lambda: nn.AdaptiveAvgPool2D(2), img)),
        ("AdaptiveMaxPool2D", layer(lambda: nn.AdaptiveMaxPool2D(2), img)),
        ("AdaptiveAvgPool3D", layer(lambda: nn.AdaptiveAvgPool3D(2), vol)),
        ("BatchNorm1D", layer(lambda: nn.BatchNorm1D(8))),
        ("BatchNorm2D", layer(lambda: nn.BatchNorm2D(4), img)),
        ("BatchNorm3D", layer(lambda: nn.BatchNorm3D(2), vol)),
        ("LayerNorm", layer(lambda: nn.LayerNorm(8))),
        ("GroupNorm", layer(lambda: nn.GroupNorm(2, 4), img)),
        ("InstanceNorm1D", layer(lambda: nn.InstanceNorm1D(4), seq)),
        ("InstanceNorm2D", layer(lambda: nn.InstanceNorm2D(4), img)),
        ("InstanceNorm3D", layer(lambda: nn.InstanceNorm3D(2), vol)),
        ("LocalResponseNorm", layer(lambda: nn.LocalResponseNorm(3), img)),
        ("Dropout", layer(lambda: nn.Dropout(0.3))),
        ("Dropout2D", layer(lambda: nn.Dropout2D(0.3), img)),
        ("AlphaDropout", layer(lambda: nn.AlphaDropout(0.3))),
        ("PixelShuffle", layer(lambda: nn.PixelShuffle(2), img)),
        ("Upsample(nearest)", layer(lambda: nn.Upsample(scale_factor=2), img)),
        ("Upsample(bilinear)", layer(lambda: nn.Upsample(scale_factor=2, mode="bilinear"), img)),
        ("Flatten", layer(lambda: nn.Flatten(), img)),
        ("Pad2D", layer(lambda: nn.Pad2D(1), img)),
        ("Pad2D(reflect)", layer(lambda: nn.Pad2D(1, mode="reflect"), img)),
        ("MultiHeadAttention", lambda x: nn.MultiHeadAttention(16, 2)(x, x, x)),
        ("TransformerEncoderLayer", lambda x: nn.TransformerEncoderLayer(16, 2, 32)(x)),
        ("TransformerDecoderLayer", lambda x: nn.TransformerDecoderLayer(16, 2, 32)(x, x)),
        ("Transformer(causal mask)", lambda x: (lambda t: t(x, x, tgt_mask=t.generate_square_subsequent_mask(4)))(
            nn.Transformer(16, 2, 1, 1, 32))),
        ("LSTM", lambda x: nn.LSTM(16, 8)(x)[0]),
        ("GRU", lambda x: nn.GRU(16, 8)(x)[0]),
    ]
    shapes = {"Conv1D": seq, "Conv1DTranspose": seq, "MaxPool1D": seq, "AvgPool1D": seq, "AdaptiveAvgPool1D": seq,
              "AdaptiveMaxPool1D": seq, "InstanceNorm1D": seq}
    out = []
    for label, build in rows:
        if label.startswith("Embedding"):
            pad = {"padding_idx": 0} if "padding" in label else {}
            out.append(("layers", label, {"ids": ((4, 5), "int64")},
                        lambda ids, pad=pad: nn.Embedding(10, 6, **pad)(ids)))
            continue
        if label in shapes:
            shape = shapes[label]
        elif label.startswith(("Conv2D", "MaxPool2D", "AvgPool2D", "Adaptive")) and "3D" not in label \
                or label in ("BatchNorm2D", "GroupNorm", "InstanceNorm2D", "LocalResponseNorm", "Dropout2D",
                             "PixelShuffle", "Flatten") or label.startswith(("Upsample", "Pad2D")):
            shape = img
        elif "3D" in label:
            shape = vol
        elif label in ("MultiHeadAttention", "LSTM", "GRU") or label.startswith("Transformer"):
            shape = (2, 4, 16)
        else:
            shape = (4, 8)
        out.append(("layers", label, {"x": (shape, "float32")}, build))
    activations = ["ReLU", "ReLU6", "LeakyReLU", "PReLU", "ELU", "SELU", "CELU", "GELU", "Silu", "Swish", "Mish",
                   "Sigmoid", "Hardsigmoid", "Hardswish", "Hardtanh", "Hardshrink", "Softshrink", "Tanhshrink",
                   "ThresholdedReLU", "Softplus", "Softsign", "LogSigmoid", "Tanh", "Softmax", "LogSoftmax", "Maxout",
                   "GLU", "RReLU"]
    for name in activations:
        shape = (4, 8, 2, 2) if name == "Maxout" else (4, 8)
        kwargs = {"groups": 2} if name == "Maxout" else {}
        out.append(("activations", f"nn.{name}", {"x": (shape, "float32")},
                    lambda x, name=name, kwargs=kwargs: getattr(nn, name)(**kwargs)(x)))
    label = {"y": ((4, 1), "int64")}
    target = {"t": ((4, 8), "float32")}
    prob = lambda x: F.sigmoid(x)  # noqa: E731
    losses = [
        ("CrossEntropyLoss", label, lambda x, y: nn.CrossEntropyLoss()(x, y)),
        ("CrossEntropyLoss(soft label)", target, lambda x, t: nn.CrossEntropyLoss(soft_label=True)(x, F.softmax(t))),
        ("CrossEntropyLoss(label_smoothing)", label, lambda x, y: nn.CrossEntropyLoss(label_smoothing=0.1)(x, y)),
        ("CrossEntropyLoss(weight)", label,
         lambda x, y: nn.CrossEntropyLoss(weight=paddle.ones([8], "float32"))(x, y)),
        ("NLLLoss", {"y": ((4,), "int64")}, lambda x, y: nn.NLLLoss()(F.log_softmax(x), y)),
        ("MSELoss", target, lambda x, t: nn.MSELoss()(x, t)),
        ("L1Loss", target, lambda x, t: nn.L1Loss()(x, t)),
        ("SmoothL1Loss", target, lambda x, t: nn.SmoothL1Loss()(x, t)),
        ("BCELoss", target, lambda x, t: nn.BCELoss()(prob(x), prob(t))),
        ("BCEWithLogitsLoss", target, lambda x, t: nn.BCEWithLogitsLoss()(x, prob(t))),
        ("KLDivLoss", target, lambda x, t: nn.KLDivLoss()(F.log_softmax(x), F.softmax(t))),
        ("MarginRankingLoss", target, lambda x, t: nn.MarginRankingLoss()(x, t, paddle.sign(t))),
        ("HingeEmbeddingLoss", target, lambda x, t: nn.HingeEmbeddingLoss()(x, paddle.sign(t))),
        ("CosineEmbeddingLoss", target,
         lambda x, t: nn.CosineEmbeddingLoss()(x, t, paddle.ones([4], "int64"))),
        ("SoftMarginLoss", target, lambda x, t: nn.SoftMarginLoss()(x, paddle.sign(t))),
        ("MultiLabelSoftMarginLoss", target, lambda x, t: nn.MultiLabelSoftMarginLoss()(x, prob(t))),
        ("TripletMarginLoss", target, lambda x, t: nn.TripletMarginLoss()(x, t, t * 0.5)),
        ("PoissonNLLLoss", target, lambda x, t: nn.PoissonNLLLoss()(x, paddle.abs(t))),
        ("GaussianNLLLoss", target, lambda x, t: nn.GaussianNLLLoss()(x, t, paddle.abs(t) + 0.1)),
    ]
    for name, extra, build in losses:
        out.append(("losses", f"nn.{name}", {"x": ((4, 8), "float32"), **extra}, build))
    out.append(("metrics", "paddle.static.accuracy", label,
                lambda x, y: paddle.nn.functional.cross_entropy(x, y).mean() + 0 * paddle.static.accuracy(x, y, k=1)))
    out.append(("metrics", "paddle.topk", label, lambda x, y: paddle.topk(x, 3)[0]))
    for i, (section, name, feeds, build) in enumerate(out):
        if "x" not in feeds and section != "layers":
            feeds["x"] = ((4, 8), "float32")
    return out


def _optimizer_rows():
    import paddle

    names = ["SGD", "Momentum", "Adam", "AdamW", "Adamax", "Adagrad", "Adadelta", "RMSProp", "Lamb", "NAdam", "RAdam",
             "ASGD", "Rprop"]
    rows = []
    variants = [("", {}), ("L2Decay", {"weight_decay": "l2"}), ("L1Decay", {"weight_decay": "l1"}),
                ("ClipGradByGlobalNorm", {"grad_clip": "global"}), ("ClipGradByNorm", {"grad_clip": "norm"}),
                ("ClipGradByValue", {"grad_clip": "value"})]
    for name in names:
        for suffix, options in variants:
            if name == "Lamb" and "weight_decay" in options:
                continue  # Lamb takes lamb_weight_decay, not a regularizer
            rows.append(("optimizers", f"{name}" + (f" + {suffix}" if suffix else ""), name, options))
    schedulers = ["NoamDecay", "PiecewiseDecay", "NaturalExpDecay", "InverseTimeDecay", "PolynomialDecay",
                  "LinearWarmup", "ExponentialDecay", "MultiStepDecay", "StepDecay", "LambdaDecay",
                  "ReduceOnPlateau", "CosineAnnealingDecay", "MultiplicativeDecay", "OneCycleLR", "CyclicLR",
                  "LinearLR", "CosineAnnealingWarmRestarts"]
    for name in schedulers:
        if hasattr(paddle.optimizer.lr, name):
            rows.append(("lr schedulers", name, "SGD", {"lr": name}))
    return rows


def _scheduler(name):
    import paddle.optimizer.lr as lr

    make = {
        "NoamDecay": lambda: lr.NoamDecay(16, 10), "PiecewiseDecay": lambda: lr.PiecewiseDecay([2], [0.1, 0.01]),
        "NaturalExpDecay": lambda: lr.NaturalExpDecay(0.1, 0.5), "InverseTimeDecay": lambda: lr.InverseTimeDecay(0.1, 0.5),
        "PolynomialDecay": lambda: lr.PolynomialDecay(0.1, 10), "LinearWarmup": lambda: lr.LinearWarmup(0.1, 5, 0.0, 0.1),
        "ExponentialDecay": lambda: lr.ExponentialDecay(0.1, 0.9), "MultiStepDecay": lambda: lr.MultiStepDecay(0.1, [2, 4]),
        "StepDecay": lambda: lr.StepDecay(0.1, 2), "LambdaDecay": lambda: lr.LambdaDecay(0.1, lambda e: 0.9 ** e),
        "ReduceOnPlateau": lambda: lr.ReduceOnPlateau(0.1), "CosineAnnealingDecay": lambda: lr.CosineAnnealingDecay(0.1, 10),
        "MultiplicativeDecay": lambda: lr.MultiplicativeDecay(0.1, lambda e: 0.9),
        "OneCycleLR": lambda: lr.OneCycleLR(0.1, 10), "CyclicLR": lambda: lr.CyclicLR(0.01, 0.1, 2),
        "LinearLR": lambda: lr.LinearLR(0.1, 10), "CosineAnnealingWarmRestarts": lambda: lr.CosineAnnealingWarmRestarts(0.1, 2),
    }
    return make[name]()


def _build_optimizer_program(optimizer: str, options: dict):
    import paddle

    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [4, 8], "float32")
        loss = paddle.mean(paddle.nn.Linear(8, 3)(x) ** 2)
        kwargs = {}
        decay = options.get("weight_decay")
        if decay:
            kwargs["weight_decay"] = {"l2": paddle.regularizer.L2Decay(0.01), "l1": paddle.regularizer.L1Decay(0.01)}[decay]
        clip = options.get("grad_clip")
        if clip:
            kwargs["grad_clip"] = {"global": paddle.nn.ClipGradByGlobalNorm(1.0), "norm": paddle.nn.ClipGradByNorm(1.0),
                                   "value": paddle.nn.ClipGradByValue(0.5)}[clip]
        lr = _scheduler(options["lr"]) if "lr" in options else 0.01
        getattr(paddle.optimizer, optimizer)(learning_rate=lr, **kwargs).minimize(loss)
    return main


def _build_layer_program(feeds: dict, build):
    import paddle

    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        variables = {}
        for name, (shape, dtype) in feeds.items():
            v = paddle.static.data(name, list(shape), dtype)
            v.stop_gradient = dtype != "float32"
            variables[name] = v
        out = build(**variables)
        if isinstance(out, (list, tuple)):
            out = out[0]
        loss = paddle.mean(out) if list(out.shape) else out
        paddle.optimizer.SGD(0.01).minimize(loss)
    return main


# --- status --------------------------------------------------------------------------------------------
def status(build_program, ir: str) -> str:
    """Status of the program ``build_program()`` makes in ``ir``."""
    import paddle

    from paddle_ngraph.frontend import decode
    from paddle_ngraph.transpiler.segments import plan_segments, refused_by_converters

    guard = paddle.pir_utils.OldIrGuard() if ir == "legacy" else paddle.pir_utils.IrGuard()
    with guard, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            program = build_program()
        except Exception as e:  # Paddle's own builders: any error means there is no program
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            first = first.split(" (at /paddle")[0]
            what = type(e).__name__ if first in ("", type(e).__name__) else f"{type(e).__name__}: {first[:90]}"
            return f"Paddle cannot build it: {what}"
        view = decode(program)
        plan = plan_segments(view, refused=refused_by_converters(view))
    if not plan.fallback:
        return "native"
    kinds = sorted({op.type.split(".")[-1] for op in plan.fallback})
    return "falls back: " + ", ".join(f"`{k}`" for k in kinds)


def train_vision(name: str) -> str:
    """Trains ``name`` 3 steps in PIR on the CPU backend against Paddle's executor: the largest
    relative loss difference, in float64 where Paddle's executor runs it, else float32."""
    import numpy as np
    import paddle

    import paddle_ngraph
    from paddle_ngraph.zoo import vision

    for dtype in ("float64", "float32"):
        losses = []
        try:
            with paddle.pir_utils.IrGuard():
                for ours in (False, True):
                    paddle.seed(1)
                    main, startup, loss = vision.build(name, dtype=dtype)
                    scope = paddle.static.Scope()
                    with paddle.static.scope_guard(scope):
                        exe = paddle.static.Executor(paddle.CPUPlace())
                        exe.run(startup)
                        if ours:
                            paddle_ngraph.transpile(main, backend="CPU")
                        losses.append([float(exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss])[0])
                                       for x, y in vision.batches(name, 3, dtype=dtype)])
                    if ours:
                        paddle_ngraph.release(main)  # 37 models' engines would not fit in memory
        except Exception:
            if dtype == "float64":
                continue  # e.g. Paddle's BatchNorm in DenseNet keeps float32 statistics
            raise
        ref, got = np.array(losses[0]), np.array(losses[1])
        return f"{dtype}: {np.max(np.abs(got - ref) / np.abs(ref)):.1e}"
    return "-"


# --- the document ------------------------------------------------------------------------------------------
def rows(only=None, train=False, models=None, jobs=1):
    from paddle_ngraph.zoo import vision

    table = []

    def progress(text):
        print(text, file=sys.stderr, flush=True)

    names = [name for name in vision.constructors()
             if not (only and name not in only) and not (models is not None and name not in models)]
    # Paddle's building of the models is most of the time (DenseNet-264: 25 s of 29): the vision
    # rows go to worker processes while this one does the layer and optimizer rows.
    pool = _vision_pool(jobs) if jobs > 1 and len(names) > 1 else None
    pending = [pool.submit(vision_row, name, train) for name in names] if pool else None
    table.extend(_layer_and_optimizer_rows(only, progress))
    vision_table = []
    for i, name in enumerate(names):
        cells, seconds = pending[i].result() if pool else vision_row(name, train)
        vision_table.append(("vision models", f"`{name}`", cells))
        trained = f", 3 steps vs Paddle {cells[2]}" if train else ""
        progress(f"[coverage] vision {name}: {cells[0]}{trained} ({seconds:.1f}s)")
    if pool:
        pool.shutdown()
    return vision_table + table


def vision_row(name: str, train: bool):
    """(cells, seconds) of one vision model: its status in each IR, and its training column."""
    from paddle_ngraph.zoo import vision

    start = time.monotonic()
    cells = [status(lambda: vision.build(name)[0], ir) for ir in IRS]
    if train:
        cells.append(train_vision(name))
    return cells, time.monotonic() - start


def _start_worker():
    quiet_this_process()
    import logging

    import paddle

    logging.getLogger("paddle_ngraph").setLevel(logging.WARNING)
    paddle.enable_static()


def _vision_pool(jobs: int):
    import concurrent.futures
    import multiprocessing

    # spawn: this process has imported Paddle, whose threads a fork would not carry over.
    return concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=_start_worker)


def _layer_and_optimizer_rows(only, progress):
    table = []
    for section, label, feeds, build in _layer_rows():
        if only and label not in only:
            continue
        cells = [status(lambda feeds=feeds, build=build: _build_layer_program(feeds, build), ir) for ir in IRS]
        table.append((section, f"`{label}`", cells))
        progress(f"[coverage] {section} {label}: {cells[0]}")
    for section, label, optimizer, options in _optimizer_rows():
        if only and label not in only:
            continue
        cells = [status(lambda o=optimizer, opts=options: _build_optimizer_program(o, opts), ir) for ir in IRS]
        table.append((section, f"`{label}`", cells))
        progress(f"[coverage] {section} {label}: {cells[0]}")
    return table


HEADER = """# Coverage of Paddle's API surface, measured

Generated by `python tools/coverage.py` (drift-tested: `tests/tools/test_coverage_doc.py`); do not edit.

Each row is a real training program built with Paddle 3.3.1's own API (the forward of the layer
or model, a mean as loss where the output is not one, SGD or Momentum, backward), decoded and
planned as `paddle_ngraph.transpile` would, in both IRs:

- **native**: every op converts; the whole program runs on the engine.
- **falls back: ops**: these op types stay Paddle ops between engine segments ([fallback.md](fallback.md#fallback-to-paddle),
  "Fallback to Paddle"); the program trains all the same, with those ops in Paddle.
- **Paddle cannot build it**: Paddle's own Python API fails to build this program in that IR
  (its first error line): there is nothing to run.

Op by op, forward and every gradient are tested against Paddle's executor (`tests/frontend/`);
every vision model trains equal to Paddle in `tests/zoo/test_vision.py` and in
`python tools/coverage.py --train` (the last column when generated with `--train`: largest
relative loss difference over 3 steps on the CPU backend, in float64 where Paddle's executor runs
the model in float64). The op table is [OPS.md](OPS.md).
"""


def render(table) -> str:
    lines = [HEADER]
    trained = any(len(cells) > 2 for _, _, cells in table)
    section = None
    for sec, label, cells in table:
        if sec != section:
            section = sec
            head = ["what", "PIR", "legacy"] + (["3 steps vs Paddle (CPU, PIR)"] if trained and sec == "vision models" else [])
            lines += ["", f"## {sec.capitalize()}", "", "| " + " | ".join(head) + " |",
                      "| " + " | ".join("---" for _ in head) + " |"]
        shown = cells if sec == "vision models" and trained else cells[:2]
        lines.append("| " + " | ".join([label] + shown) + " |")
    counts = {}
    for _, _, cells in table:
        key = "native" if cells[0] == "native" else "falls back" if cells[0].startswith("falls") else "not built"
        counts[key] = counts.get(key, 0) + 1
    lines += ["", "In PIR: " + ", ".join(f"{v} {k}" for k, v in counts.items()) + f" of {len(table)} programs.", ""]
    return "\n".join(lines)


def _without_training_column(text: str) -> str:
    """The document as generated without --train: table rows of four cells lose the last."""
    lines = []
    for line in text.splitlines():
        if line.startswith("| ") and line.count(" | ") == 3:
            line = line.rsplit(" | ", 1)[0] + " |"
        lines.append(line)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--out", default=DEFAULT_OUTPUT, help="where to write (default: docs/COVERAGE.md)")
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs from what would be written")
    parser.add_argument("--train", action="store_true", help="also train every vision model against Paddle (slow)")
    parser.add_argument("--only", nargs="*", help="rows to compute (labels or model names); prints, writes nothing")
    parser.add_argument("--models", nargs="*", help="with --check: the vision models to check (default: all)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes building the vision models beside this one (default: %(default)s)")
    args = parser.parse_args(argv)
    quiet_this_process()
    sys.path.insert(0, ROOT)
    import logging

    import paddle

    logging.getLogger("paddle_ngraph").setLevel(logging.WARNING)
    paddle.enable_static()
    models = set(args.models) if args.models is not None else None
    table = rows(set(args.only) if args.only else None, train=args.train, models=models, jobs=args.jobs)
    text = render(table)
    if args.only:
        print(text)
        return 0
    if args.check:
        with open(args.out) as f:
            current = f.read()
        # A document made with --train keeps its measured column; the statuses must match.
        current = _without_training_column(current)
        if models is not None:
            # Only the rows computed: each must be in the document as it is now.
            lines = set(current.splitlines())
            stale = [line for line in text.splitlines() if line.startswith("| `") and line not in lines]
            if stale:
                print(f"{args.out} is out of date: run python tools/coverage.py --train; differing rows:\n  "
                      + "\n  ".join(stale), file=sys.stderr)
                return 1
            return 0
        if current != text:
            print(f"{args.out} is out of date: run python tools/coverage.py --train", file=sys.stderr)
            return 1
        return 0
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out} ({len(table)} programs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
