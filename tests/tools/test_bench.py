"""tools/bench.py runs end to end (smoke mode: a few steps, one process) and reports honestly."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from paddle_ngraph.quiet import quiet_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.distributed
def test_bench_smoke_runs_ours_and_paddle_and_reports_what_cannot_run(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench.py"), "--smoke", "--no-allreduce",
                           "--models", "mnist_mlp", "--systems", "ngraph-cpu,paddle", "--ranks", "1,2",
                           "--out", str(out)], capture_output=True, text=True, timeout=600,
                          env=quiet_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    results = {(r["system"], r["ranks"]): r["result"] for r in report["results"]}
    assert results[("ngraph-cpu", 1)]["status"] == "ok" and results[("ngraph-cpu", 1)]["samples_per_s"] > 0
    assert results[("ngraph-cpu", 2)]["status"] == "ok"  # under mpirun
    assert results[("paddle", 1)]["status"] == "ok"
    assert results[("paddle", 2)]["status"] == "not run" and "does not run on CPU" in results[("paddle", 2)]["reason"]
    assert report["limits"]["sgemm_gflops"] > 0 and report["limits"]["memcpy_gbs"] > 0
    assert (tmp_path / "bench.md").read_text().count("| mnist_mlp |") == 4
    assert "ms/step" in proc.stdout


def test_bench_help():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench.py"), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "torch-ddp" in proc.stdout


@pytest.mark.slow
def test_bench_accumulate_steps_runs_each_k_and_counts_k_micro_batches_per_step(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench.py"), "--smoke", "--no-allreduce",
                           "--models", "mnist_mlp", "--systems", "ngraph-cpu,paddle", "--ranks", "1",
                           "--accumulate-steps", "1,2", "--out", str(out)], capture_output=True, text=True,
                          timeout=600, env=quiet_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = {(r["system"], r["accumulate_steps"]): r["result"] for r in report["results"]}
    assert set(rows) == {("ngraph-cpu", 1), ("ngraph-cpu", 2), ("paddle", 1)}  # the peers run k=1 only
    for k in (1, 2):
        r = rows[("ngraph-cpu", k)]
        assert r["status"] == "ok"
        assert abs(r["samples_per_s"] - report["batch"] * k * 1e3 / r["ms_per_step"]) < 1e-6 * r["samples_per_s"]
    assert "| mnist_mlp | ngraph-cpu k=2 | 1 |" in (tmp_path / "bench.md").read_text()


def test_bench_accumulate_tool_reports_every_k():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench_accumulate.py"), "--ks", "1,2",
                           "--rounds", "2", "--steps", "1", "--batch-size", "8"], capture_output=True, text=True,
                          timeout=300, env=quiet_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    rows = [l.split() for l in lines[lines.index(next(l for l in lines if l.lstrip().startswith("k "))) + 1:]]
    assert [r[0] for r in rows] == ["1", "2"] and rows[0][-1] == "1.00" and all(float(r[2]) > 0 for r in rows)


@pytest.mark.distributed
def test_bench_compress_option_reaches_the_ngraph_systems(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench.py"), "--smoke", "--no-allreduce",
                           "--models", "mnist_mlp", "--systems", "ngraph-cpu", "--ranks", "2", "--compress", "bf16",
                           "--out", str(out)], capture_output=True, text=True, timeout=600,
                          env=quiet_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["compress"] == "bf16"
    assert report["results"][0]["result"]["status"] == "ok"


@pytest.mark.slow
def test_bench_recompute_both_reports_the_smaller_arena(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench.py"), "--smoke", "--no-allreduce",
                           "--models", "transformer_layer", "--systems", "ngraph-cpu,paddle", "--ranks", "1",
                           "--recompute", "both", "--out", str(out)], capture_output=True, text=True, timeout=600,
                          env=quiet_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {(r["system"], r["recompute"]): r["result"] for r in json.loads(out.read_text())["results"]}
    assert set(rows) == {("ngraph-cpu", "off"), ("ngraph-cpu", "on"), ("paddle", "off")}
    assert rows[("ngraph-cpu", "on")]["arena_mb"] < rows[("ngraph-cpu", "off")]["arena_mb"]
    assert "| transformer_layer | ngraph-cpu rc | 1 |" in (tmp_path / "bench.md").read_text()


@pytest.mark.distributed
def test_bench_scaling_pairs_each_n_rank_run_with_its_one_rank_reference_in_every_round(tmp_path):
    out = tmp_path / "scaling.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench.py"), "--scaling", "--smoke",
                           "--models", "mnist_mlp", "--systems", "ngraph-cpu,ngraph-ccl", "--ranks", "2",
                           "--rounds", "2", "--out", str(out)], capture_output=True, text=True, timeout=600,
                          env=quiet_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = {r["system"]: r for r in report["scaling"]["rows"]}
    assert report["scaling"]["threads_per_rank"] == 1 and report["scaling"]["rounds"] == 2
    for system in ("ngraph-cpu", "ngraph-ccl"):
        row = rows[system]
        assert row["status"] == "ok" and row["rounds_ok"] == 2, row
        # samples/s of 2 ranks over twice the one-rank reference's, per round, then the median: with
        # two rounds that median lies between the two rounds' efficiencies.
        low, high = row["efficiency_spread"]
        assert 0 < low <= row["efficiency"] <= high
        assert row["samples_per_s"] == 2 * report["batch"] * 1e3 / row["ms_per_step"]
    # ngraph-ccl's one-rank reference is the same engine in one process: ngraph-cpu's single run, so both
    # rows share it.
    assert rows["ngraph-cpu"]["base_ms_per_step"] == rows["ngraph-ccl"]["base_ms_per_step"]
    # The one-rank job of ngraph-cpu ran once per round (shared), not once per system.
    assert proc.stderr.count("mnist_mlp ngraph-cpu 1 rank(s)") == 2
    assert "| mnist_mlp | ngraph-ccl | 2 |" in (tmp_path / "scaling.md").read_text()


@pytest.mark.slow
def test_bench_precision_pairs_fp32_and_bf16_of_each_system_in_every_round(tmp_path):
    out = tmp_path / "precision.json"
    systems = "ngraph-cpu,paddle" + (",torch-ddp" if importlib.util.find_spec("torch") else "")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench.py"), "--precision", "fp32,bf16", "--smoke",
                           "--models", "mnist_mlp_wide", "--systems", systems, "--rounds", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env=quiet_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = {r["system"]: r for r in report["precision"]["rows"]}
    for system in systems.split(","):
        if system == "paddle":
            continue
        row = rows[system]
        assert row["status"] == "ok" and row["rounds_ok"] == 2 and row["ranks"] == 1, row
        low, high = row["speedup_spread"]
        assert 0 < low <= row["speedup"] <= high
        for precision in ("fp32", "bf16"):  # each precision of each system ran once per round
            assert proc.stderr.count(f"mnist_mlp_wide {system} 1 rank(s) {precision}...") == 2
    # The engine says what it did with bf16: kernels, or why it ran float32 (this CPU's flags).
    from paddle_ngraph.backends.cpu.precision import float32_reason

    assert rows["ngraph-cpu"]["note"] == (float32_reason() or "bf16 as marked")
    assert rows["paddle"]["status"] == "not run" and "AVX512" in rows["paddle"]["reason"]
    assert "| mnist_mlp_wide | ngraph-cpu | 1 |" in (tmp_path / "precision.md").read_text()


def test_bench_precision_refuses_what_it_cannot_compare():
    for argv, message in ((["--precision", "bf16"], "fp32 or fp32,bf16"),
                          (["--precision", "fp32,bf16", "--scaling"], "separate modes"),
                          (["--models", "vgg"], "unknown model 'vgg'")):
        proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench.py"), *argv],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and message in proc.stderr, (argv, proc.stderr[-500:])


@pytest.mark.slow
def test_bench_threads_compares_the_default_with_one_thread():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench_threads.py"), "--models", "mnist_mlp",
                           "--rounds", "1", "--steps", "2", "--warmup", "1", "--batch", "8"],
                          capture_output=True, text=True, timeout=600, env=quiet_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| mnist_mlp |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    default_ms, one_ms, ratio = (float(c.split()[0]) for c in cells[1:4])
    # The table rounds to hundredths: the ratio agrees with the printed times within that rounding.
    assert default_ms > 0 and one_ms > 0
    assert abs(ratio - default_ms / one_ms) <= ratio * (0.005 / default_ms + 0.005 / one_ms) + 0.005


@pytest.mark.slow
def test_bench_dygraph_fallback_tool_reports_every_layer_and_what_runs_where():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench_dygraph_fallback.py"), "--rounds", "2",
                           "--steps", "1", "--batch-size", "4"], capture_output=True, text=True, timeout=300,
                          env=quiet_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "# custom-segments: " in out and "2 ops left to Paddle (custom_op.pdng_signed_square: no converter" in out
    assert "# engine: the whole program on the engine" in out
    rows = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == ["engine", "engine-as-segments", "custom-segments", "custom-eager", "paddle-eager"]


@pytest.mark.slow
def test_bench_small_times_each_system_every_round_and_the_border_of_two_segments(tmp_path):
    out = tmp_path / "small.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench.py"), "--small", "--cases",
                           "dygraph_mlp,static_mlp_2seg", "--rounds", "2", "--small-steps", "3", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env=quiet_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    cases = json.loads(out.read_text())["small"]["cases"]
    assert sorted(cases["dygraph_mlp"]["ms"]) == ["engine", "paddle"]
    assert sorted(cases["static_mlp_2seg"]["ms"]) == ["engine", "engine_2seg", "paddle"]
    for case in cases.values():
        assert all(len(times) == 2 and min(times) > 0 for times in case["ms"].values())
        assert all(len(ratios) == 2 for ratios in case["ratios"].values())
    table = (tmp_path / "small.md").read_text()
    assert "| `static_mlp_2seg` | 4 |" in table and "load average" in table


@pytest.mark.usefixtures("dynamic_mode")
def test_bench_small_dygraph_cases_time_the_layer_on_the_engine():
    """Each dygraph case's engine system runs its Layer on the engine, not eagerly (a Layer falling
    back would time Paddle against itself)."""
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import bench_small

    import paddle_ngraph

    import gc

    for case in bench_small.DYGRAPH_CASES:
        before = {id(e) for e in paddle_ngraph.engines()}
        systems = bench_small.dygraph_systems(case)
        systems["engine"]()
        [engine] = [e for e in paddle_ngraph.engines() if id(e) not in before]
        assert (engine.steps, engine.eager_steps) == (1, 0), case
        del systems, engine
        gc.collect()  # its engine leaves engines() now, not during a later test that counts them


def test_bench_small_an_op_on_the_path_makes_two_segments_one_beside_it_none():
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import bench_small
    import paddle

    import paddle_ngraph

    from paddle_ngraph.frontend import OP_TABLE

    made = {}
    try:
        for case, side in (("_2seg", False), ("_side", True)):
            before = len(paddle_ngraph.engines())
            systems = bench_small.static_systems("mlp", True, side=side)
            for step in systems.values():
                step()
            made[case] = len(paddle_ngraph.engines()) - before
    finally:
        paddle.disable_static()
    # One engine for the whole program; with abs left to Paddle, two around it on the path, one
    # beside the path (the plan runs abs of the feed first).
    assert made == {"_2seg": 1 + 2, "_side": 1 + 1}
    assert bench_small.PADDLE_OP in OP_TABLE  # put back after transpiling


@pytest.mark.distributed
def test_bench_dygraph_tensor_parallel_times_the_sharded_block_and_the_dense_ones():
    from ranks import run_ranks

    tool = os.path.join(ROOT, "tools", "bench_dygraph_tensor_parallel.py")
    sharded = run_ranks(tool, 2, "--mode", "mp", "--width", "64", "--steps", "3", timeout=240)
    lines = [line for line in sharded.stdout.splitlines() if line.startswith("mp rank")]
    # Each rank holds half of the block's weights and the whole row-parallel bias:
    # 64 x 128 + 128 + 128 x 64 + 64 floats.
    assert sorted(line.split(":")[0] for line in lines) == ["mp rank 0", "mp rank 1"], sharded.stdout
    assert all("over 2 steps; parameters 66,304 bytes here" in line for line in lines), lines
    for mode in ("engine", "paddle"):
        proc = subprocess.run([sys.executable, tool, "--mode", mode, "--width", "64", "--steps", "3"],
                              capture_output=True, text=True, timeout=240, env=quiet_env())
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"{mode} rank 0: first step" in proc.stdout and "parameters 132,352 bytes here" in proc.stdout
