"""tools/bf16_accuracy.py trains both precisions from the same start and reports them honestly."""
import json
import os
import subprocess
import sys

from paddle_ngraph.quiet import quiet_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_bf16_accuracy_reports_both_precisions_with_every_steps_loss(tmp_path):
    out = tmp_path / "acc.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bf16_accuracy.py"), "--model", "mnist_mlp",
                           "--steps", "4", "--held-out", "100", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, env=quiet_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    fp32, bf16 = report["results"]
    assert (fp32["precision"], bf16["precision"]) == ("fp32", "bf16")
    assert len(fp32["losses"]) == len(bf16["losses"]) == 4
    # Same initial weights and first batch: the first losses differ only by bf16's rounding of the matmuls.
    assert abs(fp32["losses"][0] - bf16["losses"][0]) < 0.02 * fp32["losses"][0]
    assert fp32["losses"] != bf16["losses"]  # the bf16 run did round
    assert fp32["bf16_nodes_in_evaluation"] == 0 and bf16["bf16_nodes_in_evaluation"] > 0
    assert abs(report["difference_points"] - 100 * (bf16["accuracy"] - fp32["accuracy"])) < 1e-9
    assert f"{report['difference_points']:+.2f} points" in proc.stdout
