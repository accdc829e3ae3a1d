"""Failures on one rank reach every rank: no hangs."""
import os
import re
import time

import pytest

from launch_util import launch
from mpi_util import mpirun
from paddle_ngraph.distributed.ccl import available as ccl_available

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "bad_feed_worker.py")


def assert_all_stopped_naming_rank_1(output: str, nranks: int):
    for rank in range(nranks):
        match = re.search(rf"\[rank {rank}\] STOPPED at step 2 .*", output)
        assert match, output[-3000:]
        line = match.group(0)
        assert "feeds rejected on rank(s) [1]" in line and "input 'x': shape [8, 700]" in line, line


@pytest.mark.parametrize("nranks", [2, 3])
def test_bad_feed_on_one_rank_stops_every_rank_under_mpirun(nranks):
    start = time.monotonic()
    proc = mpirun(nranks, WORKER, timeout=90)
    assert time.monotonic() - start < 60
    assert proc.returncode != 0
    assert_all_stopped_naming_rank_1(proc.stdout, nranks)


@pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")
def test_bad_feed_on_one_rank_stops_every_rank_under_paddle_launch():
    start = time.monotonic()
    code, logs = launch(2, WORKER, timeout=90)
    assert time.monotonic() - start < 60
    assert code != 0
    assert_all_stopped_naming_rank_1(logs, 2)
