"""tools/bench.py --mp (tools/bench_mp.py) end to end at tiny sizes (--smoke): one process, dp=2 and
mp=2 on the tensor-parallel transformer example's model, and what the report says of each."""
import json
import os
import subprocess
import sys

import pytest

from paddle_ngraph.quiet import quiet_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.distributed
def test_mp_mode_smoke_reports_step_time_memory_and_communication(tmp_path):
    out = tmp_path / "mp.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench.py"), "--mp", "--smoke",
                           "--out", str(out)], capture_output=True, text=True, timeout=600, env=quiet_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    section = json.loads(out.read_text())["mp"]
    rows = {r["setup"]: r for r in section["rows"]}
    assert list(rows) == ["one process", "dp=2", "mp=2"]
    assert all(r["status"] == "ok" and r["ms_per_step"] > 0 and r["arena_bytes"] > 0 for r in rows.values())
    single, dp, mp = rows["one process"], rows["dp=2"], rows["mp=2"]
    assert single["vs_one_process"] == 1.0
    assert mp["vs_one_process"] == pytest.approx(mp["ms_per_step"] / single["ms_per_step"])  # one round
    # The same model on the same global batch from the same weights: the same loss, up to rounding.
    assert dp["loss"] == pytest.approx(single["loss"], rel=1e-4)
    assert mp["loss"] == pytest.approx(single["loss"], rel=1e-4)
    # Data parallelism keeps the whole model on each rank; tensor parallelism about half of it (the
    # layer norms and the row-parallel biases stay whole), and half of Adam's moments.
    assert dp["param_bytes"] == single["param_bytes"] and dp["state_bytes"] == single["state_bytes"]
    assert 0.45 * single["param_bytes"] < mp["param_bytes"] < 0.6 * single["param_bytes"]
    assert mp["state_bytes"] < 0.6 * single["state_bytes"]
    # The timeline: one process communicates nothing; the 2-rank setups a share of each step.
    assert single["comm_share"] == 0
    assert 0 < dp["comm_share"] and 0 < mp["comm_share"]
    table = (tmp_path / "mp.md").read_text()
    assert "| mp=2 | 2 |" in table and "comm share" in table
