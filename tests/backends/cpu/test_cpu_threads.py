"""The CPU backend's threads: where steps and collectives run, and the per-thread CPU time helper."""
import threading

import numpy as np
import pytest

from paddle_ngraph.backends.cpu.executable import CPUExecutable
from paddle_ngraph.backends.cpu.thread_times import cpu_by_name, parse_stat, thread_times
from paddle_ngraph.distributed.transport import NullTransport
from paddle_ngraph.ir import Function, ops


def test_parse_stat_reads_names_with_spaces_and_parentheses():
    # proc(5): pid (comm) state ppid ... utime (14th) stime (15th) ...
    fields = ["S"] + [str(i) for i in range(4, 14)] + ["250", "50"] + ["0"] * 10
    name, seconds = parse_stat("4242 (a (b) c) " + " ".join(fields))
    assert name == "a (b) c"
    assert seconds == pytest.approx(300 / __import__("os").sysconf("SC_CLK_TCK"))


def test_thread_times_name_every_thread_and_count_new_ones_from_zero():
    started, stop = threading.Event(), threading.Event()

    def idle():
        started.set()
        stop.wait()

    before = thread_times()
    worker = threading.Thread(target=idle, name="pdng-test-idle")
    worker.start()
    started.wait()
    try:
        after = thread_times()
        assert threading.get_native_id() in after
        used = cpu_by_name(before, after)
        assert all(seconds >= 0 for seconds in used.values())
        assert worker.native_id in after and worker.native_id not in before
        assert used[after[worker.native_id][0]] >= 0  # counted from zero: it did not exist before
    finally:
        stop.set()
        worker.join()


def _two_buckets():
    """Bucket b starts first and its Wait comes after the Relu (the communication thread can run it
    meanwhile); bucket a reduces the Relu's output, and its Wait follows its Start with nothing to
    compute in between (the thread that waits runs it)."""
    x = ops.Parameter(dtype="float32", shape=(8,), name="x")
    y = ops.Parameter(dtype="float32", shape=(8,), name="y")
    b = ops.AllReduce(y.output(), reduction="avg", bucket="b")
    r = ops.Relu(x.output())
    a = ops.AllReduce(r.output(), reduction="sum", bucket="a")
    gathered = ops.AllGather(r.output(), world_size=1)  # the Python fallback, on whichever thread runs it
    return Function([x, y], {"a": a.output(0), "b": b.output(0), "r": r.output(0), "g": gathered.output(0)})


@pytest.mark.parametrize("threads", [1, 2])
def test_collectives_run_in_order_on_either_thread(threads):
    """threads=1 runs steps on the caller, 2 on the compute thread; a collective runs on the
    communication thread or, at its Wait, on the thread that waits. Either way every collective
    completes, in order, with the same results."""
    executable = CPUExecutable(_two_buckets(), threads=threads)
    xv = np.linspace(-1, 1, 8, dtype="float32")
    yv = np.arange(8, dtype="float32")
    transport = NullTransport()
    for _ in range(3):
        a, b, r, g = executable.call([xv, yv], transport)
        np.testing.assert_array_equal(a, np.maximum(xv, 0))
        np.testing.assert_array_equal(b, yv)
        np.testing.assert_array_equal(r, np.maximum(xv, 0))
        np.testing.assert_array_equal(g, np.maximum(xv, 0))
    submitted, completed = executable.last.native.collective_progress()
    assert submitted == completed == 9
    names = {name for name, _ in thread_times().values()}
    assert "pdng-comm" in names
    if threads > 1:
        assert "pdng-compute" in names
