"""Programs that already hold Paddle's own data-parallel communication: what fleet's
RawProgramOptimizer inserts after the backward (``strategy.without_graph_optimization``; Paddle's
test harness inserts the same with ``_insert_comm_op``) when the role maker sees several trainers.

Its default fuses the gradients with ``coalesce_tensor`` (their variables become views of one buffer)
and reduces that buffer with one ``all_reduce``; the engine keeps the gradients apart, so the
reduction would miss them and the ranks would train on their own half of the batch without a word.
Under GradientMergeOptimizer it puts ``c_sync_calc_stream``, ``all_reduce`` and ``c_sync_comm_stream``
into the merge's sub-block, which Paddle runs and cannot run on CPU. Both are refused by ``transpile``
with a ConfigError naming the op. The program is built here the way the harness builds it (without
the communicator start-up that fails on CPU), for two trainers, and transpiled in one process: the
refusal does not depend on the number of ranks."""
import numpy as np
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph.errors import ConfigError

from harness import ir_guard

TWO_TRAINERS = {"PADDLE_TRAINER_ID": "0", "PADDLE_TRAINERS_NUM": "2",
                "PADDLE_TRAINER_ENDPOINTS": "127.0.0.1:6170,127.0.0.1:6171",
                "PADDLE_CURRENT_ENDPOINT": "127.0.0.1:6170"}


def raw_program(gradient_merge: bool):
    """An MLP with Momentum, minimized through RawProgramOptimizer as for two trainers."""
    from paddle.distributed.fleet.base.role_maker import PaddleCloudRoleMaker
    from paddle.distributed.fleet.meta_optimizers import RawProgramOptimizer

    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, 6], "float32")
        y = paddle.static.data("y", [-1, 1], "int64")
        h = paddle.static.nn.fc(x, 8, activation="relu")
        logits = paddle.static.nn.fc(h, 3)
        loss = paddle.mean(paddle.nn.functional.cross_entropy(logits, y))
        opt = paddle.optimizer.Momentum(learning_rate=0.1, momentum=0.9)
        if gradient_merge:
            opt = paddle.incubate.optimizer.GradientMergeOptimizer(opt, 2)
            opt._learning_rate, opt._learning_rate_map = 0.1, {}  # what the meta optimizer base reads
        raw = RawProgramOptimizer(opt)
        role = PaddleCloudRoleMaker(is_collective=True)
        raw._set_basic_info(loss, role, opt, paddle.distributed.fleet.DistributedStrategy())
        raw.endpoints = role._get_trainer_endpoints()
        raw.rank, raw.nranks = role._worker_index(), role._worker_num()
        raw.startup_program = startup
        raw.main_program = main
        raw.inner_opt.minimize(loss, startup)
        raw.main_program = main
        raw._transpile_main_program(loss)
    return main, startup, loss


def built_for_two_trainers(monkeypatch, gradient_merge: bool):
    """The program as two trainers' role maker sees it; this process then runs alone."""
    for key, value in TWO_TRAINERS.items():
        monkeypatch.setenv(key, value)
    built = raw_program(gradient_merge)
    for key in TWO_TRAINERS:
        monkeypatch.delenv(key)
    return built


def op_types(program):
    return [op.type for block in program.blocks for op in block.ops]


def test_fused_gradient_buffer_refused_naming_it(monkeypatch):
    with ir_guard("legacy"):
        main, startup, _ = built_for_two_trainers(monkeypatch, gradient_merge=False)
        assert {"coalesce_tensor", "all_reduce"} <= set(op_types(main))
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        with pytest.raises(ConfigError, match=r"op 'coalesce_tensor' .*into the buffer 'FusedOutput.*op 'all_reduce'"
                                              r".*strategy.ngraph"):
            paddle_ngraph.transpile(main)
        assert "ngraph_engine" not in " ".join(op_types(main))  # refused before any rewrite


def test_communication_in_a_sub_block_refused_naming_it(monkeypatch):
    with ir_guard("legacy"):
        main, startup, loss = built_for_two_trainers(monkeypatch, gradient_merge=True)
        assert "c_sync_calc_stream" in [op.type for op in main.block(1).ops]
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        feed = {"x": np.ones((4, 6), "float32"), "y": np.zeros((4, 1), "int64")}
        # Paddle itself cannot run the program on CPU: the merge's sub-block fails on its stream sync.
        test_main = main.clone()
        for _ in range(2):
            try:
                exe.run(test_main, feed=feed, fetch_list=[loss.name])
            except Exception as e:  # noqa: BLE001 - Paddle's own error, whatever its class
                assert "c_sync_calc_stream" in str(e)
                break
        else:
            pytest.fail("Paddle ran the merge's sub-block with c_sync_calc_stream on CPU")
        with pytest.raises(ConfigError, match=r"op 'c_sync_calc_stream' \(block 1.*sub-block.*strategy.ngraph"):
            paddle_ngraph.transpile(main)

