"""paddle-ngraph-dump (paddle_ngraph.tools.dump): formats, reports, data parallel, exit codes.

The tool runs in-process through ``main(argv)`` with capsys; one subprocess run
checks the ``tools/transpile_and_dump.py`` script.
"""
import json
import os
import shutil
import subprocess
import sys

import paddle
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import paddle_ngraph
from paddle_ngraph.frontend import OP_TABLE
from paddle_ngraph.ir import from_json, load, to_json
from paddle_ngraph.quiet import quiet_env
from paddle_ngraph.tools import dump
from paddle_ngraph.zoo import build_program

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tools", "transpile_and_dump.py")
# mnist_mlp: 784x600 + 600 + 600x10 + 10 float32 parameters
GRAD_BYTES = (784 * 600 + 600 + 600 * 10 + 10) * 4
FUZZ = settings(max_examples=30, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """mnist_mlp (SGD) saved as a legacy ProgramDesc and as a PIR JSON program."""
    paddle.enable_static()
    d = tmp_path_factory.mktemp("saved")
    with paddle.pir_utils.OldIrGuard():
        main, *_ = build_program("mnist_mlp", "sgd")
        (d / "mlp.pdmodel").write_bytes(main.desc.serialize_to_string())
    main, *_ = build_program("mnist_mlp", "sgd")
    paddle.base.core.serialize_pir_program(main, str(d / "mlp.json"), 1, True, False, True)
    return {"legacy": str(d / "mlp.pdmodel"), "pir": str(d / "mlp.json")}


def run_tool(capsys, *argv):
    """Runs main() in-process; returns (exit code, stdout, stderr). Errors must be one line, no traceback."""
    capsys.readouterr()
    rc = dump.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    if rc == 2:
        assert err.endswith("\n") and err.count("\n") == 1, f"expected one stderr line, got {err!r}"
    return rc, out, err


# --- formats ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ir", ["legacy", "pir"])
def test_text_to_stdout(saved, capsys, ir):
    rc, out, err = run_tool(capsys, saved[ir])
    assert rc == 0 and err == ""
    assert out.startswith("function main(") and "SGDUpdate" in out and "AllReduce" not in out


@pytest.mark.parametrize("ir", ["legacy", "pir"])
def test_json_reads_back_to_an_equal_function(saved, capsys, tmp_path, ir):
    out_path = tmp_path / "f.json"
    rc, out, err = run_tool(capsys, saved[ir], "--format", "json", "-o", out_path, "--nranks", "2", "--min-buckets", "1")
    assert rc == 0 and out == "" and err == ""
    text = out_path.read_text()
    function = from_json(text)
    assert to_json(function) == text.rstrip("\n")
    assert sum(n.op_type == "AllReduce" for n in function.ordered_nodes()) == 1
    assert to_json(load(str(out_path))) == text.rstrip("\n")


@pytest.mark.parametrize("ir", ["legacy", "pir"])
def test_dot_has_clusters_and_labels(saved, capsys, ir):
    rc, out, _ = run_tool(capsys, saved[ir], "--format", "dot", "--nranks", "2")
    assert rc == 0 and out.startswith("digraph")
    for cluster in ("input", "forward", "backward", "collective", "update", "results"):
        assert f"subgraph cluster_{cluster} {{" in out
    assert "AllReduce\\nallreduce_bucket_0" in out and "bucket=grad_bucket_0" in out
    assert "SGDUpdate\\n" in out and "float32[784x600]" in out
    # every node goes to exactly one cluster
    function = paddle_ngraph.convert(saved[ir])
    kinds = dump.classify(function)
    by_name = {n.name: kinds[n.id] for n in function.ordered_nodes()}
    assert by_name[next(n for n in by_name if n.startswith("SoftmaxCrossEntropyBackprop"))] == "backward"
    assert by_name[next(n for n in by_name if n.startswith("Relu_"))] == "forward"
    assert by_name["x"] == "input"
    assert {k for k in by_name.values()} == {"input", "forward", "backward", "update"}


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' not installed")
def test_svg_with_graphviz(saved, capsys, tmp_path):
    svg = tmp_path / "g.svg"
    rc, out, err = run_tool(capsys, saved["pir"], "--format", "svg", "-o", svg, "--nranks", "2")
    assert rc == 0 and err == ""
    text = svg.read_text()
    assert "<svg" in text and "allreduce_bucket_0" in text


def test_svg_without_graphviz_is_a_clear_exit_2(saved, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(dump.shutil, "which", lambda name: None)
    rc, _, err = run_tool(capsys, saved["legacy"], "--format", "svg", "-o", tmp_path / "g.svg")
    assert rc == 2
    assert "Graphviz 'dot' not found; install graphviz (apt-get install graphviz) or use --format dot" in err


def test_svg_needs_output(saved, capsys):
    rc, _, err = run_tool(capsys, saved["legacy"], "--format", "svg")
    assert rc == 2 and "-o" in err


# --- report, data parallel, passes ---------------------------------------------------------------------------
@pytest.mark.parametrize("ir,ops", [("legacy", ["matmul_v2", "softmax_with_cross_entropy_grad", "sgd"]),
                                    ("pir", ["pd_op.matmul", "pd_op.cross_entropy_with_softmax_grad", "pd_op.sgd_"])])
def test_report_lists_op_types_and_parameters(saved, capsys, ir, ops):
    rc, out, _ = run_tool(capsys, saved[ir], "--report")
    assert rc == 0
    assert "all converted" in out
    lines = out.splitlines()
    for op in ops:
        row = next(line for line in lines if line.split()[:1] == [op])
        assert " yes " in row
    assert any(line.split()[0] == ops[0] and "MatMul" in line for line in lines if line.strip())
    assert f"{GRAD_BYTES:,} bytes" in out and "linear_0.w_0" in out and "470,400" in out
    assert "1 rank, no AllReduce" in out
    assert not out.lstrip().startswith("function")  # the report replaces the graph on stdout


def test_nranks_2_text_and_report(saved, capsys, tmp_path):
    text = tmp_path / "f.txt"
    rc, out, _ = run_tool(capsys, saved["legacy"], "--nranks", "2", "--min-buckets", "1", "--report", "-o", text)
    assert rc == 0
    graph = text.read_text()
    assert "AllReduce(" in graph and "bucket='grad_bucket_0'" in graph and "reduction='avg'" in graph
    assert "Data parallel: 2 ranks" in out and "grad_bucket_0: allreduce_bucket_0, 4 gradient(s)" in out
    assert "parameters: " in out and "before: SGDUpdate" in out
    # ring allreduce with 2 ranks: 2*(2-1)/2 = 1x the gradient bytes
    assert f"bytes sent per rank per step (ring allreduce, 2*(N-1)/N x bucket bytes): {GRAD_BYTES:,}" in out


def test_one_bucket_per_gradient_and_ring_bound(saved, capsys):
    rc, out, _ = run_tool(capsys, saved["pir"], "--nranks", "4", "--bucket-mb", "0", "--bandwidth", "10", "--report")
    assert rc == 0
    assert "inserted 4 AllReduce node(s)" in out
    for i in range(4):
        assert f"grad_bucket_{i}: allreduce_bucket_{i}, 1 gradient(s)" in out
    per_rank = 2 * 3 / 4 * GRAD_BYTES
    assert f"{per_rank:,.0f}" in out
    assert f"ring lower bound at 10 GB/s: {per_rank / 10e9 * 1e6:.1f} us per step" in out


def test_passes_dumped_after_each_pass(saved, capsys, tmp_path):
    d = tmp_path / "passes"
    rc, _, _ = run_tool(capsys, saved["legacy"], "--nranks", "2", "--passes", d)
    assert rc == 0
    assert sorted(os.listdir(d)) == ["00_input.json", "00_input.txt", "01_insert_allreduce.json",
                                     "01_insert_allreduce.txt"]
    before, after = load(str(d / "00_input.json")), load(str(d / "01_insert_allreduce.json"))
    assert not any(n.op_type == "AllReduce" for n in before.ordered_nodes())
    assert any(n.op_type == "AllReduce" for n in after.ordered_nodes())


def test_module_function_input(capsys):
    rc, out, err = run_tool(capsys, "paddle_ngraph.zoo:build_program", "--ir", "legacy", "--nranks", "2")
    assert rc == 0 and err == "" and "AllReduce(" in out


@pytest.mark.parametrize("spec,message", [
    ("no_such_module_xyz:build", "cannot import module 'no_such_module_xyz'"),
    ("paddle_ngraph.zoo:no_such_function", "has no attribute 'no_such_function'"),
    ("os:getcwd", "not a Paddle Program"),
])
def test_bad_module_function_is_exit_2(capsys, spec, message):
    rc, _, err = run_tool(capsys, spec)
    assert rc == 2 and message in err and spec in err


# --- unsupported ops -------------------------------------------------------------------------------------
def _unsupported_program():
    candidates = {"cumsum": lambda x: paddle.cumsum(x, axis=1), "flip": lambda x: paddle.flip(x, [1]),
                  "roll": lambda x: paddle.roll(x, 1, 1), "cumprod": lambda x: paddle.cumprod(x, 1)}
    op_type = next((t for t in candidates if t not in OP_TABLE), None)
    if op_type is None:
        pytest.skip("every candidate op has a converter now")
    paddle.enable_static()
    with paddle.pir_utils.OldIrGuard():
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [-1, 8], "float32")
            y = paddle.nn.functional.relu(candidates[op_type](x))
            paddle.mean(y)
    assert op_type in [op.type for op in main.global_block().ops]
    return op_type, main


def test_unsupported_op_is_exit_3_with_location(capsys, tmp_path):
    op_type, main = _unsupported_program()
    path = tmp_path / "bad_op.pdmodel"
    path.write_bytes(main.desc.serialize_to_string())
    rc, out, err = run_tool(capsys, path)
    assert rc == 3 and out == ""
    assert str(path) in err and "1 unsupported Paddle op type(s)" in err
    assert f"{op_type} x1, first at block 0 op 0" in err
    rc, out, err = run_tool(capsys, path, "--report")
    assert rc == 3
    row = next(line for line in out.splitlines() if line.split()[:1] == [op_type])
    assert " no " in row


def test_control_flow_is_exit_3_with_its_reason(capsys, tmp_path):
    """The exit code reads the plan transpile executes: a legacy while loop has every op type
    converted, yet its ``while`` op stays with Paddle."""
    paddle.enable_static()
    with paddle.pir_utils.OldIrGuard():
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [-1, 8], "float32")
            i, limit = paddle.full([1], 0, "int64"), paddle.full([1], 3, "int64")
            _, h = paddle.static.nn.while_loop(lambda i, h: i < limit, lambda i, h: [i + 1, h * 0.5], [i, x])
            paddle.mean(paddle.nn.Linear(8, 2)(h))
    path = tmp_path / "loop.pdmodel"
    path.write_bytes(main.desc.serialize_to_string())
    rc, out, err = run_tool(capsys, path)
    assert rc == 3 and out == ""
    assert "while x1" in err and "control flow" in err
    rc, out, _ = run_tool(capsys, path, "--segments")
    assert rc == 0 and "while" in out


# --- unreadable input --------------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".pdmodel", ".json"])
def test_empty_file_is_one_line(capsys, tmp_path, suffix):
    path = tmp_path / f"empty{suffix}"
    path.write_bytes(b"")
    rc, _, err = run_tool(capsys, path)
    assert rc == 2 and str(path) in err


def test_missing_file_and_directory(capsys, tmp_path):
    rc, _, err = run_tool(capsys, tmp_path / "missing.pdmodel")
    assert rc == 2 and "missing.pdmodel: no such file" in err
    rc, _, err = run_tool(capsys, tmp_path)
    assert rc == 2 and str(tmp_path) in err


@pytest.mark.parametrize("argv", [["--nranks", "0", "x.pdmodel"], ["--format", "png", "x.pdmodel"], [],
                                  ["x.pdmodel", "--bandwidth", "-1"]])
def test_bad_usage_is_one_line(capsys, argv):
    rc, _, err = run_tool(capsys, *argv)
    assert rc == 2 and err.startswith("paddle-ngraph-dump: ")


def _check_bad_file(capsys, path, data):
    path.write_bytes(data)
    rc, out, err = run_tool(capsys, path)
    if rc == 0 and path.suffix == ".pdmodel":
        # A truncation exactly at a field boundary after the last block is a complete
        # ProgramDesc (version / op_version_map are optional): nothing to detect.
        from paddle.base.proto import framework_pb2

        desc = framework_pb2.ProgramDesc()
        desc.ParseFromString(data)
        assert desc.blocks and desc.blocks[0].ops
        return
    assert rc == 2, (rc, err)
    assert str(path) in err and err.startswith("paddle-ngraph-dump: ")


@FUZZ
@given(data=st.binary(max_size=300), suffix=st.sampled_from([".pdmodel", ".json"]))
def test_random_bytes_are_one_line_exit_2(saved, capsys, tmp_path_factory, data, suffix):
    path = tmp_path_factory.getbasetemp() / f"random{suffix}"
    _check_bad_file(capsys, path, data)


@FUZZ
@given(ir=st.sampled_from(["legacy", "pir"]), fraction=st.floats(0, 1, exclude_max=True), flip=st.booleans())
def test_truncated_and_corrupted_files_are_one_line_exit_2(saved, capsys, tmp_path_factory, ir, fraction, flip):
    data = open(saved[ir], "rb").read()
    cut = int(fraction * len(data))
    bad = data[:cut]
    if flip and cut:  # also corrupt one byte of the kept part
        bad = bad[:-1] + bytes([bad[-1] ^ 0xFF])
    path = tmp_path_factory.getbasetemp() / ("truncated" + os.path.splitext(saved[ir])[1])
    _check_bad_file(capsys, path, bad)


def test_pir_json_that_is_not_a_program(capsys, tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"format": "something else"}))
    rc, _, err = run_tool(capsys, path)
    assert rc == 2 and "not a serialized PIR program" in err


# --- the script ----------------------------------------------------------------------------------------------
def test_script_help():
    proc = subprocess.run([sys.executable, SCRIPT, "--help"], capture_output=True, text=True, timeout=60,
                          env=quiet_env())
    assert proc.returncode == 0, proc.stderr
    assert "usage: paddle-ngraph-dump" in proc.stdout
    assert "examples:" in proc.stdout and "exit codes:" in proc.stdout and "--nranks" in proc.stdout


def test_zero_stage_1_shows_reduce_scatter_slices_and_state_per_rank(capsys, tmp_path):
    main, *_ = build_program("mnist_mlp", "adam")
    paddle.base.core.serialize_pir_program(main, str(tmp_path / "adam.json"), 1, True, False, True)
    rc, out, _ = run_tool(capsys, tmp_path / "adam.json", "--nranks", "4", "--min-buckets", "1", "--zero-stage", "1", "--report")
    assert rc == 0, out
    assert "inserted 0 AllReduce node(s)" in out and "reduce-scattered instead (ZeRO-1, below)" in out
    assert "ZeRO-1: 1 bucket(s) reduce-scattered" in out
    elements = GRAD_BYTES // 4
    assert f"{elements:,} elements, {-(-elements // 4):,} per rank" in out
    full = 2 * GRAD_BYTES  # Adam: two moments per parameter
    assert f"instead of {full:,}" in out and f"optimizer state per rank: {2 * 4 * -(-elements // 4):,} bytes" in out


def test_compress_is_shown_and_halves_the_bytes_sent(saved, capsys, tmp_path):
    text = tmp_path / "f.txt"
    rc, out, _ = run_tool(capsys, saved["legacy"], "--nranks", "2", "--compress", "bf16", "--report", "-o", text)
    assert rc == 0
    assert "compress='bf16'" in text.read_text()
    assert "compress=bf16" in out
    assert f"16-bit compressed buckets at half their bytes): {GRAD_BYTES // 2:,}" in out


def test_segments_show_the_fallback(capsys, tmp_path):
    """--segments prints transpile's plan: engine segments, and the ops left to Paddle between them."""
    with paddle.pir_utils.IrGuard():
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [4, 3], "float32")
            h = paddle.logcumsumexp(paddle.nn.Linear(3, 5)(x), axis=1)
            paddle.optimizer.SGD(0.1).minimize(paddle.nn.Linear(5, 1)(h).mean())
        paddle.base.core.serialize_pir_program(main, str(tmp_path / "fallback.json"), 1, True, False, True)
    rc, out, err = run_tool(capsys, tmp_path / "fallback.json", "--segments")
    assert rc == 0, err
    assert "3 engine segment(s), 2 op(s) left to Paddle" in out
    assert "paddle   op" in out and "pd_op.logcumsumexp  (no converter)" in out and "pd_op.logcumsumexp_grad" in out
    assert out.count("  engine ") == 3 and "pd_op.sgd_ x4" in out
