"""Ranks given different programs fail fast, every one of them, naming the ranks and the first differing op."""
import os
import time

import pytest

from ranks import run_ranks

# Every test here starts ranks (tests/ranks.py).
pytestmark = pytest.mark.distributed

HERE = os.path.dirname(os.path.abspath(__file__))


def test_mismatched_programs_fail_on_every_rank_within_30s():
    start = time.monotonic()
    proc = run_ranks(os.path.join(HERE, "mismatch_worker.py"), 3, timeout=120, check=False)
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    assert elapsed < 30 + 15  # 30 s for the check itself; process start-up of 3 Paddle ranks on 2 cores on top
    out = proc.stdout
    for rank in range(3):
        line = next((l for l in out.splitlines() if l.startswith(f"[rank {rank}] ERROR")), None)
        assert line is not None, out[-3000:] + proc.stderr[-2000:]
        assert "differ between ranks" in line and "rank(s) [1]" in line and "first difference at op" in line, line
        assert "500" in line and "600" in line, line


def test_ranks_accumulating_over_different_numbers_of_micro_steps_fail_on_every_rank():
    """Rank 1 would update (and AllReduce) on every call, the others on every second: caught at start-up."""
    proc = run_ranks(os.path.join(HERE, "mismatch_worker.py"), 3, "accumulate", timeout=120, check=False)
    assert proc.returncode != 0
    for rank in range(3):
        line = next((l for l in proc.stdout.splitlines() if l.startswith(f"[rank {rank}] ERROR")), None)
        assert line is not None, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert "rank(s) [1]" in line and "accumulate_steps=2" in line and "accumulate_steps=1" in line, line
