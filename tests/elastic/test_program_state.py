"""elastic.State(program=...) in one process, in both IRs and on both backends: a commit taken
between the calls of an accumulated update, restored into the same transpiled program or into a
new transpiled copy (what the survivors of a lost rank run), repeats the steps after it bit for
bit; so does the same commit read back from disk, whose files paddle.static.load reads too."""
import os

import numpy as np
import paddle
import pytest

from harness import IRS, ir_guard
from paddle_ngraph import elastic
from paddle_ngraph.checkpoint import latest_checkpoint
from paddle_ngraph.errors import ConfigError
from static_models import batch, build, fleet_optimizer, persistables

ACCUMULATE = 2


def _same(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and np.array_equal(a[name], b[name]), name


@pytest.mark.parametrize("ir", IRS)
def test_a_commit_mid_accumulation_repeats_bitwise_in_a_new_transpiled_copy(ir, backend, tmp_path):
    with ir_guard(ir):
        paddle.seed(0)
        main, startup, loss = build()
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        state = elastic.State(program=main, checkpoint_dir=str(tmp_path), step=0)
        config = {"backend": backend, "accumulate_steps": ACCUMULATE}

        def steps(program, fetch, n):
            losses = []
            for _ in range(n):
                losses.append(exe.run(program, feed=batch(state.step, 0, 1), fetch_list=[fetch])[0])
                state.step += 1
            return losses, persistables(state)

        program, (fetch,) = state.transpile([loss], **config)
        steps(program, fetch, 3)  # the third call accumulates: one gradient pending in the engine
        state.commit(save=True)
        want = steps(program, fetch, 3)
        assert not np.array_equal(want[0][0], want[0][1])

        state.restore()  # into the same program
        assert state.step == 3
        got = steps(program, fetch, 3)
        np.testing.assert_array_equal(got[0], want[0])
        _same(got[1], want[1])

        state.restore()  # into a new copy, as after a lost rank: the accumulated gradient goes with it
        program, (fetch,) = state.transpile([loss], **config)
        got = steps(program, fetch, 3)
        np.testing.assert_array_equal(got[0], want[0])
        _same(got[1], want[1])

        assert state.load() == 1 and state.step == 3  # the commit on disk
        program, (fetch,) = state.transpile([loss], **config)
        got = steps(program, fetch, 3)
        np.testing.assert_array_equal(got[0], want[0])
        _same(got[1], want[1])

        # The parameter and optimizer files are paddle.static.save's: paddle.static.load reads them.
        state.load()
        committed = persistables(state)
        exe.run(startup)
        paddle.static.load(main, os.path.join(latest_checkpoint(str(tmp_path)), "model"))
        _same(persistables(state), committed)


def test_static_state_refusals():
    with ir_guard("pir"):
        main, startup, loss = build()
        paddle.static.Executor(paddle.CPUPlace()).run(startup)
        with pytest.raises(ConfigError, match="not both"):
            elastic.State(paddle.nn.Linear(2, 2), program=main)
        state = elastic.State(program=main, step=0)
        with pytest.raises(ConfigError, match="local SGD"):
            state.transpile([loss], localsgd_k_steps=2)



@pytest.mark.parametrize("ir", IRS)
def test_a_program_fleet_transpiled_is_transpiled_again_with_its_strategy(ir):
    """strategy.ngraph transpiles inside minimize: State takes the program as it was before, and
    state.transpile() applies fleet's configuration; training is bitwise that of fleet's program."""
    from paddle_ngraph.transpiler import engines_of

    configs = {"backend": "INTERPRETER", "accumulate_steps": 2}

    def train(through_state: bool):
        with ir_guard(ir):
            paddle.seed(3)
            main, startup, loss = build(distributed_optimizer=fleet_optimizer(configs))
            exe = paddle.static.Executor(paddle.CPUPlace())
            exe.run(startup)
            state = elastic.State(program=main, step=0)  # takes nothing over until state.transpile
            program, fetch = main, loss
            if through_state:
                program, (fetch,) = state.transpile([loss])
                assert program is not main and engines_of(program)[0].accumulate_steps == 2
            losses = [exe.run(program, feed=batch(step, 0, 1), fetch_list=[fetch])[0] for step in range(4)]
            return losses, persistables(state)

    want = train(False)
    got = train(True)
    np.testing.assert_array_equal(got[0], want[0])
    _same(got[1], want[1])
    assert any("moment1" in n for n in got[1])
