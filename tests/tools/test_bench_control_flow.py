"""tools/bench_control_flow.py: its programs put the work where the report says, and it runs end to end."""
import json
import os
import subprocess
import sys

import numpy as np
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph.quiet import quiet_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "bench_control_flow.py")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import bench_control_flow as bench  # noqa: E402


def left_to_paddle(program, hide=()):
    from paddle_ngraph.frontend import OP_TABLE

    saved = {name: OP_TABLE.pop(name) for name in hide}
    try:
        return sorted((o["op_type"], o["count"]) for o in paddle_ngraph.unsupported_ops(program))
    finally:
        OP_TABLE.update(saved)


def test_bench_control_flow_help():
    proc = subprocess.run([sys.executable, TOOL, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "unrolled_borders" in proc.stdout and "gm_mlp_sgd_k2" in proc.stdout


def test_the_loop_stays_in_paddle_and_the_unrolled_body_runs_on_the_engine_one_segment_per_iteration():
    paddle.enable_static()
    try:
        with paddle.pir_utils.OldIrGuard():
            loop = bench.while_program(8, 3, "loop")[0]
            assert left_to_paddle(loop) == [("while", 1), ("while_grad", 1)]
            assert left_to_paddle(bench.while_program(8, 3, "unrolled")[0]) == []
            # An assign after each of the 3 iterations, forward and backward.
            assert left_to_paddle(bench.while_program(8, 3, "borders")[0], hide=("assign",)) == [("assign", 6)]
        with paddle.pir_utils.IrGuard():
            assert ("pd_op.if", 2) in left_to_paddle(bench.cond_program(8, 2, False)[0])
            assert left_to_paddle(bench.cond_program(8, 2, True)[0]) == []
    finally:
        paddle.disable_static()


def test_the_loop_and_its_unrolled_copies_compute_the_same_loss_and_cell_gradients():
    """Forward and the loop body's parameter gradients equal. The gradient into the loop's initial value
    (here the first Linear's) is not compared: Paddle 3.3.1's legacy while_grad gives one that differs
    from the unrolled program's, which agrees with finite differences."""
    paddle.enable_static()
    try:
        with paddle.pir_utils.OldIrGuard():
            exe = paddle.static.Executor(paddle.CPUPlace())
            results = []
            for mode in ("loop", "unrolled", "borders"):
                paddle.seed(3)
                main, startup, loss, feed = bench.while_program(8, 3, mode)
                grads = [main.global_block().var(p.name + "@GRAD") for p in main.all_parameters()]
                with paddle.static.scope_guard(paddle.static.Scope()):
                    exe.run(startup)
                    results.append(exe.run(main, feed=feed, fetch_list=[loss] + grads))
            loop, unrolled, borders = results
            for got in (unrolled, borders):
                np.testing.assert_allclose(got[0], loop[0], rtol=1e-6)  # the loss
                for i in (3, 4):  # the cell's weight and bias
                    np.testing.assert_allclose(got[i], loop[i], rtol=1e-5, atol=1e-7)
            for got, want in zip(borders, unrolled):
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    finally:
        paddle.disable_static()


def test_the_gradient_merge_body_copied_out_updates_the_same_on_paddle_and_on_the_engine():
    paddle.enable_static()
    try:
        with paddle.pir_utils.OldIrGuard():
            exe = paddle.static.Executor(paddle.CPUPlace())
            main = bench.gm_program("mlp", "momentum", 2)
            step, scope = bench.make_system(exe, main, engine=False)
            step()  # accumulates a gradient; the sub-block has not run
            body, names = bench.body_program(main[0])
            assert [op.type for op in body.global_block().ops] == [op.type for op in main[0].block(1).ops]
            assert left_to_paddle(body) == []
            params = [p.name for p in main[0].all_parameters()]
            after = []
            for engine in (False, True):
                body_step, body_scope = bench.body_system(exe, main[0], scope, engine)
                body_step()
                after.append({n: np.array(body_scope.find_var(n).get_tensor()) for n in names})
            before = {n: np.array(scope.find_var(n).get_tensor()) for n in params}
            assert all(not np.array_equal(after[0][n], before[n]) for n in params)  # the update ran
            for n in names:
                np.testing.assert_allclose(after[1][n], after[0][n], rtol=1e-5, atol=1e-7, err_msg=n)
    finally:
        paddle.disable_static()


@pytest.mark.slow
def test_bench_control_flow_times_every_system_every_round(tmp_path):
    out = tmp_path / "cf.json"
    proc = subprocess.run([sys.executable, TOOL, "--cases", "gm_mlp_sgd_k2,while_h64_n4,cond_h256_d4", "--rounds", "2",
                           "--steps", "2", "--json", str(out)], capture_output=True, text=True, timeout=600,
                          env=quiet_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    cases = json.loads(out.read_text())["cases"]
    assert sorted(cases["gm_mlp_sgd_k2"]) == ["body_engine", "body_paddle", "engine", "paddle"]
    assert sorted(cases["while_h64_n4"]) == ["engine", "paddle", "unrolled_assign_paddle", "unrolled_borders",
                                             "unrolled_engine", "unrolled_paddle"]
    assert len(cases["cond_h256_d4"]) == 8
    for case in cases.values():
        assert all(len(rounds) == 2 and min(r["ms"] for r in rounds) > 0 for rounds in case.values())
    assert all("block" in r for r in cases["gm_mlp_sgd_k2"]["paddle"])
    assert "| `while_h64_n4` |" in proc.stdout and "load average" in proc.stdout
