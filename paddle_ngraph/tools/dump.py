"""paddle-ngraph-dump: convert a Paddle program and dump the graph IR, optionally data-parallel.

Reads a saved program (legacy ProgramDesc ``.pdmodel`` or a PIR program saved
as ``.json``) or calls ``module:function`` returning a program, and builds what
``transpile`` builds for ``--nranks`` ranks under the configuration given (the
same segment plan, conversion and pass pipeline: ``transpiler/lowering.py``),
then writes the function as JSON, text, Graphviz DOT or SVG. ``--report`` prints
op coverage, parameter sizes, gradient buckets and the communication volume per
step; ``--segments`` the engine segments and the ops left to Paddle.

Exit codes: 0 done; 2 bad usage or unreadable input (one line on stderr);
3 ops left to Paddle (listed on stderr with their locations and why; --segments shows
the segments around them).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import shutil
import subprocess
import sys
import warnings
from collections import Counter, defaultdict

import numpy as np

os.environ.setdefault("GLOG_minloglevel", "2")

PROG = "paddle-ngraph-dump"
EXIT_OK, EXIT_USAGE, EXIT_UNSUPPORTED = 0, 2, 3
FORMATS = ("text", "json", "dot", "svg")
COLLECTIVE_OPS = {"AllReduce", "Broadcast", "AllGather", "ReduceScatter", "Send", "Recv"}
DOT_MISSING = "Graphviz 'dot' not found; install graphviz (apt-get install graphviz) or use --format dot"
_MODULE_FUNCTION = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")

EPILOG = """\
input:
  a saved program: a legacy ProgramDesc (.pdmodel, or any name not ending in .json)
  or a PIR program saved by Paddle (.json); or module:function, a Python function
  returning a Program or a tuple whose first item is one (as build_program does).

output:
  --format text (default), json (paddle_ngraph.ir.from_json reads it back), dot
  (Graphviz, clusters for inputs, forward, backward, collectives, update) or svg
  (needs -o and Graphviz 'dot'). --report prints the report on stdout; the graph
  is then written only if -o is given.

examples:
  paddle-ngraph-dump mnist.pdmodel                        # text form of the function
  paddle-ngraph-dump mnist.json --format json -o f.json   # a PIR program saved by Paddle
  paddle-ngraph-dump paddle_ngraph.zoo:build_program --ir legacy --report
  paddle-ngraph-dump mnist.pdmodel --nranks 4 --bucket-mb 1 --bandwidth 12.5 --report
  paddle-ngraph-dump mnist.pdmodel --nranks 2 --format svg -o mnist.svg
  paddle-ngraph-dump mnist.pdmodel --precision bf16 --report   # which nodes compute in bf16
  paddle-ngraph-dump mnist.pdmodel --nranks 2 --passes dumps/   # dumps/NN_<pass>.json|.txt
  paddle-ngraph-dump mnist.pdmodel --nranks 2 --config my.yaml --set accumulate_steps=4
  paddle-ngraph-dump mp.pdmodel --nranks 4 --mp-degree 2 --rank 2 --report   # tensor parallel: groups

configuration:
  the keys of paddle_ngraph.Config (configs/defaults.yaml), as transpile takes
  them: --config FILE (YAML), then --set KEY=VALUE (repeatable, YAML values),
  then the shortcut flags (--bucket-mb, --min-buckets, --zero-stage, --compress,
  --precision, --mp-degree); keys not given take Config's defaults, as in transpile.

exit codes:
  0  done
  2  bad usage or unreadable input (one line on stderr naming the file)
  3  the program has Paddle ops without a converter (listed on stderr)
"""


class ToolError(Exception):
    """A failure reported as one line on stderr with exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ToolError(f"{message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description=__doc__.split("\n\n")[0], epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("program", help="saved program (.pdmodel or PIR .json) or module:function returning a program")
    p.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    p.add_argument("-o", "--output", help="output file (default: stdout; required for svg)")
    p.add_argument("--report", action="store_true",
                   help="print op coverage, parameter sizes, buckets and communication volume on stdout")
    p.add_argument("--nranks", type=int, default=1, help="data-parallel ranks; > 1 inserts AllReduce (default: 1)")
    p.add_argument("--mp-degree", type=int,
                   help="tensor-parallel degree of a program built with paddle.distributed.split: the ranks "
                        "holding the shards of one model (the mp_degree key; default: 1)")
    p.add_argument("--rank", type=int, default=0,
                   help="the rank whose program this is, which decides the groups its collectives run over "
                        "(model parallelism; default: 0)")
    p.add_argument("--config", metavar="FILE", help="YAML file of configuration keys (as PADDLE_NGRAPH_CONFIG)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="one configuration key (repeatable; the value is read as YAML), over --config")
    p.add_argument("--bucket-mb", type=float,
                   help="gradient bucket size in MiB for AllReduce fusion; 0: one AllReduce per gradient "
                        "(the bucket_mb key; default: Config's, 32)")
    p.add_argument("--min-buckets", type=int,
                   help="at least this many gradient buckets (the min_buckets key; default: Config's, 4)")
    p.add_argument("--zero-stage", type=int, choices=(0, 1),
                   help="1: shard the optimizer state (ZeRO-1: ReduceScatter, update of a slice, AllGather) "
                        "(the zero_stage key; default: 0)")
    p.add_argument("--compress", choices=("none", "bf16", "fp16"),
                   help="wire format of float32 gradient AllReduce (the compress key; default: none)")
    p.add_argument("--precision", choices=("fp32", "bf16"),
                   help="bf16: run the mixed-precision pass (the precision key): matmuls and "
                        "convolutions compute in bf16; the report lists them (default: fp32)")
    p.add_argument("--bandwidth", type=float, default=10.0,
                   help="link bandwidth in GB/s (1e9 bytes/s) for the ring lower bound (default: 10)")
    p.add_argument("--passes", metavar="DIR", help="dump the function after each pass into DIR (NN_<pass>.json/.txt)")
    p.add_argument("--ir", choices=("pir", "legacy"),
                   help="for module:function only: build the program under this Paddle IR (default: Paddle's)")
    p.add_argument("--segments", action="store_true",
                   help="print how transpile splits the program: its engine segments and the ops left to Paddle "
                        "between them (the fallback), then exit")
    p.add_argument("--segment", type=int, metavar="I",
                   help="the engine segment to write when the program has several (default: all, in text; "
                        "json, dot, svg and --report need one)")
    p.add_argument("--debug", action="store_true", help="show Python tracebacks instead of one-line errors")
    return p


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    line = text.splitlines()[0].strip() if text else ""
    return f"{type(e).__name__}: {line}" if line else type(e).__name__


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).strip().splitlines() if part.strip())


# --- input ---------------------------------------------------------------------------------------
def _is_program(obj) -> bool:
    import paddle

    return isinstance(obj, (paddle.base.framework.Program, paddle.pir.Program))


def _call_module_function(spec: str, ir: str | None):
    module_name, func_name = spec.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # ImportError, or anything the module raises while importing
        raise ToolError(f"{spec}: cannot import module '{module_name}': {_first_line(e)}") from None
    obj = module
    for part in func_name.split("."):
        if not hasattr(obj, part):
            raise ToolError(f"{spec}: module '{module_name}' has no attribute '{func_name}'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ToolError(f"{spec}: '{func_name}' is a {type(obj).__name__}, not a function")
    import paddle

    guard = {"legacy": paddle.pir_utils.OldIrGuard, "pir": paddle.pir_utils.IrGuard}.get(ir, contextlib.nullcontext)
    try:
        with guard():
            result = obj()
    except Exception as e:
        raise ToolError(f"{spec}: calling {func_name}() failed: {_one_line(_first_line(e))}") from e
    program = result[0] if isinstance(result, (tuple, list)) and result else result
    if not _is_program(program):
        raise ToolError(f"{spec}: {func_name}() returned {type(result).__name__}, not a Paddle Program "
                        f"(or a tuple whose first item is one)")
    return program


@contextlib.contextmanager
def _native_stderr_silenced(enabled: bool = True):
    """Sends file descriptor 2 to /dev/null: Paddle's C++ loaders (protobuf, glog) print
    their own lines there on bad input, which our one-line error replaces."""
    if not enabled:
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def load_view(spec: str, ir: str | None, quiet: bool = True):
    """Returns (label, ProgramView); ToolError (one line) on any failure.

    ``quiet``: silence what Paddle's native code prints on stderr while loading a file.
    """
    import paddle

    from ..errors import NgraphError
    from ..frontend import SKIPPED_OPS, decode

    # Paddle's legacy Program.parse_from_string fails in dynamic mode ("`type` to
    # initialized an Operator can not be None"): the tool always works in static mode.
    paddle.enable_static()
    if not os.path.exists(spec) and _MODULE_FUNCTION.match(spec):
        label, source = spec, _call_module_function(spec, ir)
    else:
        if ir is not None:
            raise ToolError(f"{spec}: --ir applies to module:function inputs only; a saved file says its own IR")
        label, source = spec, spec
    try:
        with _native_stderr_silenced(quiet):
            view = decode(source)
    except NgraphError as e:  # ProgramFileError names the file already
        message = _one_line(e)
        raise ToolError(message if label in message else f"{label}: {message}") from None
    except OSError as e:
        raise ToolError(f"{label}: cannot read: {e.strerror or _first_line(e)}") from None
    except Exception as e:  # whatever else Paddle's loaders raise on bad input
        raise ToolError(f"{label}: cannot load this program: {_one_line(_first_line(e))}") from e
    if not any(op.type not in SKIPPED_OPS for op in view.ops if op.block == 0):
        raise ToolError(f"{label}: the program has no ops to convert (empty, truncated or not a program)")
    return label, view


# --- conversion and passes -------------------------------------------------------------------------
def ir_ops_per_paddle_op(session, ops, produced: dict | None = None) -> dict[str, Counter]:
    """Paddle op type -> Counter of the IR op types its converter built, read from the conversion
    ``session`` of a segment before its passes (each node counted for the first op reaching it)."""
    from ..ir.ops import Parameter

    produced = defaultdict(Counter) if produced is None else produced
    seen: set[int] = set()
    for op in ops:
        stack = [value.node for value in session.produced.get(id(op), {}).values()]
        while stack:
            node = stack.pop()
            if node.id in seen or isinstance(node, Parameter):
                continue
            seen.add(node.id)
            produced[op.type][node.op_type] += 1
            stack.extend(i.node for i in node.inputs)
    return produced


# --- graph classification and DOT -------------------------------------------------------------------
def classify(function) -> dict[int, str]:
    """Node id -> input, forward, backward, collective or update.

    update: OptimizerUpdate subclasses; collective: AllReduce, Broadcast, AllGather,
    ReduceScatter, Send, Recv; backward: an op type ending in 'Backprop', or a node
    that transitively consumes one's output (constant-only subgraphs that feed only
    backward nodes go with them); forward: everything else.
    """
    from ..ir.ops import Parameter
    from ..ir.ops.optimizer import OptimizerUpdate

    nodes = function.ordered_nodes()
    kind: dict[int, str] = {}
    tainted: dict[int, bool] = {}
    variable: dict[int, bool] = {}  # depends on a graph input
    for node in nodes:
        tainted[node.id] = node.op_type.endswith("Backprop") or any(tainted[i.node.id] for i in node.inputs)
        variable[node.id] = isinstance(node, Parameter) or any(variable[i.node.id] for i in node.inputs)
        if isinstance(node, Parameter):
            kind[node.id] = "input"
        elif isinstance(node, OptimizerUpdate):
            kind[node.id] = "update"
        elif node.op_type in COLLECTIVE_OPS:
            kind[node.id] = "collective"
        else:
            kind[node.id] = "backward" if tainted[node.id] else "forward"
    users = function.users()
    results = {o.node.id for o in function.results.values()}
    for node in reversed(nodes):
        if kind[node.id] == "forward" and not variable[node.id] and node.id not in results:
            consumers = users.get(node.id, [])
            if consumers and all(kind[u.id] == "backward" for u in consumers):
                kind[node.id] = "backward"
    return kind


def _dot_escape(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


_CLUSTERS = [
    ("input", "inputs: feeds, parameters, state", "lightgrey"),
    ("forward", "forward", "lightblue"),
    ("backward", "backward", "lightsalmon"),
    ("collective", "collectives", "gold"),
    ("update", "optimizer update", "palegreen"),
]


def to_dot(function) -> str:
    from ..ir.ops import Parameter

    kind = classify(function)
    nodes = function.ordered_nodes()
    lines = [f'digraph "{_dot_escape(function.name)}" {{',
             "  rankdir=TB;",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=8, color="#555555"];']
    for key, title, color in _CLUSTERS:
        members = [n for n in nodes if kind[n.id] == key]
        if not members:
            continue
        label = title
        if key == "collective":
            nbytes = sum(i.type.nbytes() for n in members for i in n.inputs)
            label = f"{title}: {len(members)} node(s), {_human_bytes(nbytes)} per step"
        lines.append(f"  subgraph cluster_{key} {{")
        lines.append(f'    label="{_dot_escape(label)}"; style="rounded"; color="#888888"; fontname="Helvetica";')
        for n in members:
            types = ", ".join(str(t) for t in n.output_types)
            head = f"{n.op_type} ({n.attrs['role']})" if isinstance(n, Parameter) else n.op_type
            label = f"{head}\n{n.name}\n{types}"
            if n.op_type in COLLECTIVE_OPS:
                extra = [f"{k}={v}" for k, v in n.attrs.items() if v not in ("", None) and k != "group"]
                group = n.attrs.get("group", ())
                extra.append(f"ranks ({', '.join(map(str, group))})" if group else "every rank")
                extra.append(f"{len(n.inputs)} tensor(s), {_human_bytes(sum(i.type.nbytes() for i in n.inputs))}")
                label += "\n" + ", ".join(extra)
            lines.append(f'    n{n.id} [label="{_dot_escape(label)}", fillcolor="{color}"];')
        lines.append("  }")
    lines.append("  subgraph cluster_results {")
    lines.append('    label="results"; style="rounded"; color="#888888"; fontname="Helvetica";')
    for i, (name, out) in enumerate(function.results.items()):
        lines.append(f'    r{i} [label="{_dot_escape(name)}\\n{_dot_escape(out.type)}", shape=ellipse, fillcolor=white];')
    lines.append("  }")
    for n in nodes:
        for inp in n.inputs:
            attr = f' [label=":{inp.index}"]' if len(inp.node.output_types) > 1 else ""
            lines.append(f"  n{inp.node.id} -> n{n.id}{attr};")
    for i, out in enumerate(function.results.values()):
        attr = f' [label=":{out.index}"]' if len(out.node.output_types) > 1 else ""
        lines.append(f"  n{out.node.id} -> r{i}{attr};")
    lines.append("}")
    return "\n".join(lines)


# --- report ------------------------------------------------------------------------------------------
def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


def _human_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


def coverage_lines(view, produced: dict | None) -> list[str]:
    from ..frontend import OP_TABLE, SKIPPED_OPS

    counts, roles, blocks = Counter(), defaultdict(list), defaultdict(set)
    for op in view.ops:
        counts[op.type] += 1
        if op.role not in roles[op.type]:
            roles[op.type].append(op.role)
        blocks[op.type].add(op.block)
    missing = [t for t in counts if t not in OP_TABLE and t not in SKIPPED_OPS]
    status = "all converted" if not missing else f"{len(missing)} type(s) without a converter"
    lines = [f"Paddle op coverage: {len(view.ops)} ops, {len(counts)} types; {status}",
             f"  {'op type':<40} {'count':>5}  {'role':<18} {'converter':<9}  IR ops"]
    for t in counts:
        conv = "yes" if t in OP_TABLE else "skip" if t in SKIPPED_OPS else "no"
        if conv == "skip":
            ir_ops = "- (no computation)"
        elif produced is not None and t in produced:
            ir_ops = ", ".join(f"{k}" + (f" x{v}" if v > 1 else "") for k, v in sorted(produced[t].items()))
        elif conv == "yes" and blocks[t] != {0}:
            ir_ops = "- (not in block 0: not converted)"
        else:
            ir_ops = "-"
        lines.append(f"  {t:<40} {counts[t]:>5}  {'/'.join(roles[t]):<18} {conv:<9}  {ir_ops}")
    lines.append("  (converter: yes = has a converter, skip = carries no computation, no = unsupported;")
    lines.append("   IR ops: node types the converter built for all ops of that type, including any no result uses)")
    return lines


def report(label, view, function, produced, args, allreduce_pass) -> str:
    from ..ir.ops import Parameter

    nodes = function.ordered_nodes()
    ir_name = {"legacy": "legacy ProgramDesc", "pir": "PIR program"}.get(view.ir, view.ir)
    nblocks = len({op.block for op in view.ops})
    out = [f"{PROG} report: {label}",
           f"program: {ir_name}, {len(view.ops)} ops in {nblocks} block(s)",
           f"function: {function.name}, {len(function.parameters)} parameters, {len(function.results)} results, "
           f"{len(nodes)} nodes",
           ""]
    out += coverage_lines(view, produced)
    hist = Counter(n.op_type for n in nodes)
    out += ["", f"IR op types in the function ({len(hist)}):",
            "  " + ", ".join(f"{k} x{v}" for k, v in sorted(hist.items()))]

    params = [p for p in function.parameters if isinstance(p, Parameter)]
    groups = {role: [p for p in params if p.attrs["role"] == role] for role in ("parameter", "state", "feed")}
    trainable = groups["parameter"]
    total_el = sum(p.output_types[0].num_elements() for p in trainable)
    total_b = sum(p.output_types[0].nbytes() for p in trainable)
    out += ["", f"Parameters: {len(trainable)}, {total_el:,} elements, {total_b:,} bytes ({_human_bytes(total_b)})",
            f"  {'name':<40} {'type':<24} {'elements':>12} {'bytes':>14}"]
    for p in trainable:
        t = p.output_types[0]
        out.append(f"  {p.name:<40} {str(t):<24} {t.num_elements():>12,} {t.nbytes():>14,}")
    state = groups["state"]
    state_b = sum(p.output_types[0].nbytes() for p in state)
    out.append(f"State (optimizer moments, learning rate, ...): {len(state)}, {state_b:,} bytes ({_human_bytes(state_b)})")
    for p in state:
        out.append(f"  {p.name:<40} {str(p.output_types[0]):<24} {p.output_types[0].num_elements():>12,} "
                   f"{p.output_types[0].nbytes():>14,}")
    out.append("Feeds: " + (", ".join(f"{p.name} {p.output_types[0]}" for p in groups["feed"]) or "none"))

    out += [""] + precision_lines(nodes, getattr(args, "precision", "fp32"))
    if getattr(args, "mp_degree", 1) > 1:
        out += [""] + group_lines(view, nodes, args)
    out += [""] + distributed_lines(function, nodes, args, allreduce_pass)
    if getattr(args, "sharding", None) is not None and args.nranks > 1:
        out += sharded_lines(args.sharding, args.nranks)
    return "\n".join(out)


def precision_lines(nodes, precision: str) -> list[str]:
    """The nodes the mixed-precision pass marked, with their input types; the others compute in
    their inputs' dtype."""
    marked = [n for n in nodes if n.attrs.get("compute_precision") == "bf16"]
    if precision == "fp32":
        return ["Precision: fp32, every node computes in its inputs' dtype (use --precision bf16 for mixed precision)"]
    kinds = Counter(n.op_type for n in marked)
    lines = [f"Precision: {precision}: {len(marked)} node(s) round their inputs to bf16 and accumulate in float32"
             + (f" ({', '.join(f'{k} x{v}' for k, v in sorted(kinds.items()))})" if kinds else "")
             + "; every other node computes in float32"]
    for n in marked:
        lines.append(f"  {n.name:<40} {n.op_type:<26} {' x '.join(str(i.type) for i in n.inputs)}")
    return lines


def sharded_lines(sharding, n: int) -> list[str]:
    """ZeRO-1: per bucket, the slice each rank updates, and the optimizer state per rank."""
    lines = [f"ZeRO-1: {len(sharding.buckets)} bucket(s) reduce-scattered, updated by slices, allgathered"]
    full = held = 0
    for b in sharding.buckets:
        width = np.dtype(b.dtype).itemsize
        states = len(b.slices) - 1  # the slices of optimizer state (the first is of the parameters)
        full += states * sum(b.sizes) * width
        held += states * b.shard_size * width
        lines.append(f"  {b.name}: {len(b.params)} parameter(s), {sum(b.sizes):,} elements, {b.shard_size:,} per rank "
                     f"(padded to {b.shard_size * n:,}), {states} optimizer state tensor(s) sliced")
    lines.append(f"  optimizer state per rank: {held:,} bytes ({_human_bytes(held)}) instead of {full:,} "
                 f"({_human_bytes(full)})")
    return lines


def _group_text(group, nranks: int) -> str:
    return f"every rank (0-{nranks - 1})" if not group else ", ".join(str(r) for r in group)


def group_lines(view, nodes, args) -> list[str]:
    """Model parallelism: this rank's groups, each collective with the ranks it runs over, and the
    axis each sharded parameter cuts (what a checkpoint records to reassemble the dense model)."""
    from ..frontend.shard_axes import shard_axes
    from ..ir.groups import RankLayout, group_size

    n = args.nranks
    layout = RankLayout(n, args.rank, args.mp_degree)
    mp, dp = layout.mp_group(), layout.dp_group()
    lines = [f"Groups: rank {args.rank} of {n}, mp_degree {args.mp_degree} (mp rank {layout.mp_rank}); "
             f"model-parallel group: {_group_text(mp, n)}; data-parallel group: {_group_text(dp, n)}",
             f"  {'collective':<44} {'op':<14} {'group (ranks)':<22} {'what':<18} {'bytes':>10}"]
    for x in nodes:
        if x.op_type not in COLLECTIVE_OPS:
            continue
        group = tuple(x.attrs.get("group", ()))
        what = ("gradient bucket" if x.attrs.get("bucket") else
                "model parallel" if group == mp else "data parallel" if group == dp else "")
        nbytes = sum(i.type.nbytes() for i in x.inputs)
        lines.append(f"  {x.name:<44} {x.op_type:<14} {_group_text(group, n):<22} {what:<18} {nbytes:>10,}"
                     + (f"  ({group_size(group, n)} ranks)" if group else ""))
    axes = shard_axes(view)
    params = {name: axis for name, axis in axes.items() if view.vars[name].is_parameter}
    if params:
        lines.append("  sharded parameters (the axis their shards cut; optimizer state follows): "
                     + ", ".join(f"{name} {'?' if axis is None else axis}" for name, axis in params.items()))
    return lines


def distributed_lines(function, nodes, args, allreduce_pass) -> list[str]:
    from ..ir.groups import group_size

    n = args.nranks
    reduces = [x for x in nodes if x.op_type == "AllReduce"]
    mp_degree = getattr(args, "mp_degree", 1)
    if mp_degree > 1:  # the model's own AllReduces are in the groups section; these are the gradients'
        reduces = [x for x in reduces if x.attrs.get("bucket")]
        if n == mp_degree:
            return [f"Data parallel: none: the {n} ranks hold the {mp_degree} shards of one model "
                    f"(mp_degree {mp_degree}), no gradient AllReduce"]
    if n <= 1:
        return ["Data parallel: 1 rank, no AllReduce inserted (use --nranks N to insert them)"]
    if allreduce_pass is None:
        return [f"Data parallel: {n} ranks; no gradient AllReduce (local SGD averages the parameters instead: "
                f"{len(reduces)} AllReduce node(s))"]
    bucket_bytes = int(args.bucket_mb * (1 << 20))
    over = "" if mp_degree == 1 else f" in groups of {n // mp_degree} (mp_degree {mp_degree})"
    lines = [f"Data parallel: {n} ranks{over}; InsertAllReduce(bucket_bytes={bucket_bytes:,} ({args.bucket_mb:g} MiB), "
             f"reduction={allreduce_pass.reduction}, compress={allreduce_pass.compress}) inserted {len(reduces)} AllReduce node(s)"]
    if not reduces:
        lines.append("  every gradient is reduce-scattered instead (ZeRO-1, below)" if getattr(args, "sharding", None)
                     else "  no optimizer update consumes a gradient: nothing to reduce")
        return lines
    position = {x.id: i for i, x in enumerate(nodes)}
    users = function.users()
    # The pass lists each bucket's parameters in the order it made them (grad_bucket_<i>), which
    # need not be the AllReduce nodes' topological order.
    bucket_params = {f"grad_bucket_{i}": params for i, params in enumerate(allreduce_pass.buckets)}
    total = wire = per_rank = 0
    for k, r in enumerate(reduces):
        nbytes = sum(i.type.nbytes() for i in r.inputs)
        total += nbytes
        # A compressed bucket travels as 2-byte values (alltoall + allgather: the ring's 2*(N-1)/N).
        on_wire = nbytes // 2 if r.attrs.get("compress", "none") != "none" else nbytes
        wire += on_wire
        size = group_size(r.attrs.get("group", ()), n)  # under model parallelism: the data-parallel group
        per_rank += 2 * (size - 1) / size * on_wire
        params = bucket_params.get(r.attrs["bucket"], [])
        consumers = users.get(r.id, [])
        lines.append(f"  {r.attrs['bucket'] or '(no bucket)'}: {r.name}, {len(r.inputs)} gradient(s), "
                     f"{nbytes:,} bytes ({_human_bytes(nbytes)}), node {position[r.id] + 1} of {len(nodes)} "
                     f"in topological order")
        lines.append(f"    parameters: {', '.join(params) or '-'}")
        lines.append("    after:  " + ", ".join(f"{i.node.name} ({i.node.op_type})" for i in r.inputs))
        lines.append("    before: " + (", ".join(f"{u.name} ({u.op_type})" for u in consumers) or "-"))
    seconds = per_rank / (args.bandwidth * 1e9)
    lines.append(f"  gradient bytes per step: {total:,} ({_human_bytes(total)}) in {len(reduces)} bucket(s)")
    lines.append(f"  bytes sent per rank per step (ring allreduce, 2*(N-1)/N x bucket bytes"
                 + (", N: the data-parallel group's ranks" if mp_degree > 1 else "")
                 + (", 16-bit compressed buckets at half their bytes" if wire != total else "") + "): "
                 f"{per_rank:,.0f} ({_human_bytes(per_rank)})")
    lines.append(f"  ring lower bound at {args.bandwidth:g} GB/s: {_human_time(seconds)} per step "
                 f"(bandwidth term only; latency and reduction compute not included)")
    return lines


# --- main ---------------------------------------------------------------------------------------------
def _write(path: str | None, text: str):
    if path is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
        return
    try:
        with open(path, "w") as f:
            f.write(text if text.endswith("\n") else text + "\n")
    except OSError as e:
        raise ToolError(f"{path}: cannot write: {e.strerror or _first_line(e)}") from None


def _render_svg(dot_text: str, path: str):
    dot = shutil.which("dot")
    if dot is None:
        raise ToolError(DOT_MISSING)
    try:
        proc = subprocess.run([dot, "-Tsvg", "-o", path], input=dot_text, text=True, capture_output=True)
    except OSError as e:
        raise ToolError(f"{path}: cannot run Graphviz dot: {e.strerror or _first_line(e)}") from None
    if proc.returncode != 0:
        raise ToolError(f"{path}: Graphviz dot failed (exit {proc.returncode}): {_one_line(proc.stderr) or '-'}")


def segment_lines(label: str, plan) -> list[str]:
    """The fallback plan of ``transpile`` (transpiler/segments.py), one block per segment and per
    run of ops left to Paddle, in the order they run (where the plan moved ops off the engine's
    path, the op numbers show the program order), each of those with why (the plan's reason)."""
    from ..transpiler.segments import NO_CONVERTER

    lines = [f"{PROG} segments: {label}: {len(plan.segments)} engine segment(s), {len(plan.fallback)} op(s) "
             f"left to Paddle"]
    events = [(seg.place_at.index, "segment", seg) for seg in plan.segments]
    events += [(op.index, "paddle", op) for op in plan.fallback]
    for _, kind, item in sorted(events, key=lambda e: (e[0], e[1] == "segment")):
        if kind == "paddle":
            category, detail = plan.reason(item)
            why = category if category == NO_CONVERTER else f"{category}: {detail}"
            lines.append(f"  paddle   op {item.index}: {item.type}  ({why})")
            continue
        seg = item
        if seg.before_op is not None:
            lines.append(f"  engine {seg.index}: AllReduce of {', '.join(seg.allreduce)} (its update runs in Paddle)")
            continue
        kinds = Counter(op.type for op in seg.ops)
        top = ", ".join(f"{t} x{n}" if n > 1 else t for t, n in kinds.most_common(6))
        more = f", ... ({len(kinds) - 6} more types)" if len(kinds) > 6 else ""
        lines.append(f"  engine {seg.index}: {len(seg.ops)} ops (ops {seg.ops[0].index}-{seg.ops[-1].index}): {top}{more}")
        lines.append(f"           reads {len(seg.inputs)} from Paddle, {len(seg.handed_in)} handed over; gives Paddle "
                     f"{', '.join(seg.outputs) or '-'}; hands over {len(seg.handed_out)}"
                     + (f"; averages {', '.join(seg.allreduce)}" if seg.allreduce else ""))
    return lines


def configuration(args):
    """The ``Config`` the tool lowers with: --config, then --set, then the shortcut flags."""
    import yaml

    from ..config import Config
    from ..errors import ConfigError
    from ..config_sources import load_yaml

    values = load_yaml(args.config) if args.config else {}
    for item in args.set:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ToolError(f"--set {item!r}: expected KEY=VALUE")
        try:
            values[key.strip()] = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as e:
            raise ToolError(f"--set {item!r}: the value is not valid YAML: {' '.join(str(e).split())}") from None
    flags = {"bucket_mb": args.bucket_mb, "min_buckets": args.min_buckets, "zero_stage": args.zero_stage,
             "compress": args.compress, "precision": args.precision, "mp_degree": args.mp_degree}
    values.update({k: v for k, v in flags.items() if v is not None})
    try:
        return Config.build(values, PROG)
    except ConfigError as e:
        raise ToolError(_one_line(e)) from None


def lower(view, config, nranks: int, dump_dir: str | None, with_table: bool, rank: int = 0):
    """What ``transpile`` builds on ``rank``: the segment plan, then each segment converted and
    through the pass pipeline. Returns (plan, lowered segments, per-op IR table or None)."""
    from ..backends import backend_for
    from ..transpiler.lowering import convert_segment, plan_program, run_passes

    plan, whole = plan_program(view, config, nranks, backend_for(config), rank=rank)
    table = defaultdict(Counter) if with_table else None
    unmade: set[str] = set()
    parts = []
    for seg in plan.segments:
        converted = convert_segment(view, plan, seg, config, nranks, unmade, converted=whole, rank=rank)
        if table is not None:
            ir_ops_per_paddle_op(converted.session, seg.constants + seg.ops, table)
        where = dump_dir if dump_dir is None or len(plan.segments) == 1 else os.path.join(dump_dir, f"segment_{seg.index}")
        parts.append(run_passes(converted, config, nranks, where))
    return plan, parts, table


def run(args) -> int:
    from ..errors import NgraphError, UnsupportedOpsError
    from ..ir import to_json, to_text

    if args.nranks < 1:
        raise ToolError(f"--nranks must be >= 1, got {args.nranks}")
    if args.bucket_mb is not None and args.bucket_mb < 0:
        raise ToolError(f"--bucket-mb must be >= 0, got {args.bucket_mb:g}")
    if not 0 <= args.rank < args.nranks:
        raise ToolError(f"--rank {args.rank} is not one of the --nranks {args.nranks} ranks")
    if args.bandwidth <= 0:
        raise ToolError(f"--bandwidth must be > 0 GB/s, got {args.bandwidth:g}")
    if args.format == "svg" and not args.output:
        raise ToolError("--format svg needs -o/--output FILE")
    if args.format == "svg" and shutil.which("dot") is None:
        raise ToolError(DOT_MISSING)
    config = configuration(args)

    label, view = load_view(args.program, args.ir, quiet=not args.debug)
    try:
        plan, parts, table = lower(view, config, args.nranks, args.passes, with_table=args.report, rank=args.rank)
    except OSError as e:
        where = e.filename or args.passes or os.environ.get("PADDLE_NGRAPH_DUMP_PASSES", "")
        raise ToolError(f"{where}: cannot dump passes: {e.strerror or _first_line(e)}") from None
    except UnsupportedOpsError as e:
        e.label = label
        raise
    except NgraphError as e:
        raise ToolError(f"{label}: {_one_line(e)}") from None
    except Exception as e:  # anything a converter raised
        raise ToolError(f"{label}: conversion failed: {_one_line(_first_line(e))}") from e
    if plan.fallback and not args.segments and args.segment is None:
        # Ops left to Paddle (the plan transpile executes: no converter, refused, a variable kind,
        # control flow): the graph is then a segment's (--segments shows them, --segment I writes one).
        if args.report:
            _write(None, f"{PROG} report: {label}\n" + "\n".join(coverage_lines(view, None)))
        error = UnsupportedOpsError(plan.left_to_paddle())
        error.label = label
        raise error
    if args.segments:
        lines = segment_lines(label, plan)
        for part in parts:
            lines += ["", to_text(part.function)]
        _write(args.output, "\n".join(lines) + "\n")
        return EXIT_OK
    if args.segment is not None and not 0 <= args.segment < len(parts):
        raise ToolError(f"--segment {args.segment}: the program has {len(parts)} engine segment(s)")
    chosen = parts if args.segment is None else [parts[args.segment]]
    if len(chosen) > 1 and (args.format != "text" or args.report):
        raise ToolError(f"{label}: the program runs as {len(chosen)} engine segments (--segments shows them); "
                        f"choose one with --segment I for --format {args.format}"
                        + (" and --report" if args.report else ""))
    if args.output or not args.report:
        if args.format == "json":
            _write(args.output, to_json(chosen[0].function))
        elif args.format == "text":
            _write(args.output, "\n\n".join(to_text(part.function) for part in chosen))
        elif args.format == "dot":
            _write(args.output, to_dot(chosen[0].function))
        else:
            _render_svg(to_dot(chosen[0].function), args.output)
    if args.report:
        lowered = chosen[0].lowered
        shown = argparse.Namespace(nranks=args.nranks, bandwidth=args.bandwidth, bucket_mb=config.bucket_mb,
                                   precision=config.precision, sharding=lowered.sharding, rank=args.rank,
                                   mp_degree=config.mp_degree)
        _write(None, report(label, view, lowered.function, table, shown, lowered.allreduce))
    return EXIT_OK


def main(argv=None) -> int:
    """Entry point of ``paddle-ngraph-dump``; returns the exit code."""
    from ..errors import UnsupportedOpsError

    parser = build_parser()
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                args = parser.parse_args(argv)
            except SystemExit as e:  # --help
                return e.code if isinstance(e.code, int) else EXIT_USAGE
            return run(args)
    except ToolError as e:
        if debug:
            raise
        print(f"{PROG}: {_one_line(e)}", file=sys.stderr)
        return EXIT_USAGE
    except UnsupportedOpsError as e:
        if debug:
            raise
        print(f"{PROG}: {getattr(e, 'label', 'input')}: {e}", file=sys.stderr)
        return EXIT_UNSUPPORTED
    except BrokenPipeError:  # stdout closed early (| head): not an error
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_OK
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug of ours: still one line, --debug shows the traceback
        if debug:
            raise
        print(f"{PROG}: internal error: {_one_line(_first_line(e))} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
