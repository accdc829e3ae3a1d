"""tools/bench.py runs end to end (smoke mode: a few steps, one process) and reports honestly."""
import json
import os
import subprocess
import sys

from paddle_ngraph.quiet import quiet_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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
