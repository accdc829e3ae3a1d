"""examples/fleet_mnist_demo.py, what `make demo` runs, on 2 ranks under paddle.distributed.launch with
the Makefile's launcher flags, for a few epochs:

- it completes, the held-out accuracy it prints is reached, and it ends with the summary giving both
  throughputs (the engine's and Paddle's executor's);
- neither what the user sees (the launcher's output, which replays rank 0's log) nor rank 1's log
  holds a warning or a log line;
- the DistributedBatchSampler gave the ranks disjoint shards of every epoch.

Also: the README's quick start shows the command the Makefile's `demo` target runs.
"""
import json
import os
import re
import subprocess
import sys

import pytest

from paddle_ngraph.distributed.ccl import available as ccl_available

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "examples", "fleet_mnist_demo.py")
EPOCHS, COMPARE_STEPS, MIN_ACCURACY = 4, 20, 85.0  # the full run (15 epochs) reaches 93-95%
LAUNCHER_FLAGS = ["--log_level", "WARNING", "--nproc_per_node", "2"]  # as the Makefile's demo target

NOISE = re.compile(r"warn|^[IWEF]\d{4} |\bINFO\b|^\[\d{4}-\d\d-\d\d ", re.IGNORECASE)

pytestmark = pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(launcher output, {rank: worker log}, {rank: trained sample indices per epoch})."""
    tmp = tmp_path_factory.mktemp("demo")
    cmd = [sys.executable, "-m", "paddle.distributed.launch", *LAUNCHER_FLAGS, "--log_dir", str(tmp / "log"),
           DEMO, "--epochs", str(EPOCHS), "--compare-steps", str(COMPARE_STEPS),
           "--record-indices", str(tmp / "indices")]
    # As the Makefile; PYTHONPATH: the script's own directory comes first on sys.path, not the checkout.
    env = dict(os.environ, GLOG_minloglevel="2", PYTHONWARNINGS="ignore:No ccache found:UserWarning",
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    logs = {}
    for rank in range(2):
        path = tmp / "log" / f"workerlog.{rank}"
        logs[rank] = path.read_text(errors="replace") if path.exists() else ""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + logs[1][-2000:]
    indices = {rank: json.loads((tmp / "indices" / f"rank{rank}.json").read_text()) for rank in range(2)}
    return proc.stdout + proc.stderr, logs, indices


def noise(output: str) -> list:
    return [line for line in output.splitlines() if NOISE.search(line)]


@pytest.mark.distributed  # the module's job: 2 ranks under paddle.distributed.launch
def test_the_demo_reaches_the_accuracy_and_prints_one_summary_with_both_throughputs(run):
    shown, _, _ = run
    epochs = re.findall(r"\[rank 0\] epoch +(\d+)/(\d+) .* held-out accuracy ([\d.]+)%", shown)
    assert [int(e) for e, _, _ in epochs] == list(range(1, EPOCHS + 1)), shown[-3000:]
    summaries = re.findall(r"\[rank 0\] summary: held-out accuracy ([\d.]+)% \((\d+)/(\d+)\) after (\d+) epochs", shown)
    assert len(summaries) == 1, shown[-3000:]
    accuracy, correct, total, epochs_done = summaries[0]
    assert float(accuracy) == float(epochs[-1][2]) >= MIN_ACCURACY, shown[-3000:]
    assert abs(100 * int(correct) / int(total) - float(accuracy)) < 0.06 and int(epochs_done) == EPOCHS
    engine = re.search(r"\[rank 0\]   paddle_ngraph engine, 2 ranks x batch 64: +(\d+) samples/s \((\d+) per rank\)", shown)
    paddle = re.search(r"\[rank 0\]   Paddle's executor, not transpiled, 1 process, same model, batch 64: +(\d+) samples/s",
                       shown)
    assert engine and paddle, shown[-3000:]
    assert int(engine.group(1)) > 0 and int(paddle.group(1)) > 0


@pytest.mark.distributed  # the module's job: 2 ranks under paddle.distributed.launch
def test_no_warning_or_log_line_from_the_demo(run):
    shown, logs, _ = run
    assert noise(shown) == [], shown[-4000:]  # the launcher's own and rank 0's (which it replays)
    assert noise(logs[1]) == [], logs[1][-4000:]


@pytest.mark.distributed  # the module's job: 2 ranks under paddle.distributed.launch
def test_the_ranks_trained_on_disjoint_shards_of_every_epoch(run):
    _, _, indices = run
    assert len(indices[0]) == len(indices[1]) == EPOCHS
    steps_per_epoch, batch, train_size = 11, 64, 1500  # 1797 digits - 297 held out; drop_last
    for epoch, (mine, theirs) in enumerate(zip(indices[0], indices[1])):
        assert len(mine) == len(set(mine)) == len(theirs) == len(set(theirs)) == steps_per_epoch * batch
        assert not set(mine) & set(theirs), f"epoch {epoch}: the ranks share samples"
        assert set(mine) | set(theirs) <= set(range(train_size)), f"epoch {epoch}: a held-out sample was trained on"
    assert indices[0][0] != indices[0][1], "the sampler did not reshuffle between epochs"


def test_the_readme_quick_start_shows_what_make_demo_runs():
    makefile = open(os.path.join(ROOT, "Makefile")).read()
    recipe = re.search(r"^demo: build\n((?:\t.*\n)+)", makefile, re.MULTILINE).group(1)
    command = [line.strip() for line in recipe.splitlines() if "fleet_mnist_demo.py" in line]
    assert len(command) == 1, recipe
    assert all(flag in command[0] for flag in LAUNCHER_FLAGS), command[0]
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert command[0].replace("$(PY)", ".venv/bin/python") in readme, command[0]
