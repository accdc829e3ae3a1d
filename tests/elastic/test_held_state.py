"""A static commit holds the memory of the state the engines update instead of copying it: the
commit's arrays are the scope's memory when it is made, the next step writes the new values
elsewhere, and the commit stays whole while training goes on; restoring it (into the same program
or a new transpiled copy) repeats the steps after it bit for bit, in both IRs and on both
backends, also for commits with no step between them and a restore before any step."""
import numpy as np
import paddle
import pytest

from harness import IRS, ir_guard
from paddle_ngraph import elastic
from static_models import batch, build, persistables


def _same(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and np.array_equal(a[name], b[name]), name


def _scope_address(name):
    return paddle.static.global_scope().find_var(name).get_tensor()._ptr()


class _Run:
    def __init__(self, ir, backend, tmp_path):
        paddle.seed(0)
        self.main, startup, self.loss = build()
        self.exe = paddle.static.Executor(paddle.CPUPlace())
        self.exe.run(startup)
        self.state = elastic.State(program=self.main, checkpoint_dir=str(tmp_path), step=0)
        self.config = {"backend": backend}
        self.transpile()

    def transpile(self):
        self.program, (self.fetch,) = self.state.transpile([self.loss], **self.config)

    def steps(self, n):
        losses = []
        for _ in range(n):
            losses.append(self.exe.run(self.program, feed=batch(self.state.step, 0, 1), fetch_list=[self.fetch])[0])
            self.state.step += 1
        return losses, persistables(self.state)


@pytest.mark.parametrize("ir", IRS)
def test_a_commit_holds_the_updated_state_and_stays_whole(ir, backend, tmp_path):
    with ir_guard(ir):
        run = _Run(ir, backend, tmp_path)
        run.steps(2)
        run.state.commit()
        part = run.state._part
        held = part._held.names
        # Adam's parameters, moments and beta powers: everything but the learning rate.
        assert held == set(part.parameters + part.others) - set(part.learning_rates), sorted(held)
        assert len(held) == 5 * len(part.parameters)
        committed = run.state._snapshot["state"]["scope"]
        for name in held:  # no copy: the commit's array is the scope's memory
            assert committed[name].ctypes.data == _scope_address(name), name
        frozen = {n: v.copy() for n, v in committed.items()}
        want = run.steps(3)
        for name in held:  # the steps wrote elsewhere
            assert committed[name].ctypes.data != _scope_address(name), name
        _same(dict(committed), frozen)

        run.state.restore()  # into the same program: no copy again
        for name in held:
            assert committed[name].ctypes.data == _scope_address(name), name
        got = run.steps(3)
        np.testing.assert_array_equal(got[0], want[0])
        _same(got[1], want[1])
        _same(dict(committed), frozen)

        run.state.restore()  # into a new transpiled copy, as the survivors of a lost rank do
        run.transpile()
        got = run.steps(3)
        np.testing.assert_array_equal(got[0], want[0])
        _same(got[1], want[1])
        _same(dict(committed), frozen)


@pytest.mark.parametrize("ir", IRS)
def test_commits_every_step_twice_in_a_row_and_on_disk(ir, backend, tmp_path):
    with ir_guard(ir):
        run = _Run(ir, backend, tmp_path)
        for _ in range(3):  # two buffers take turns
            run.steps(1)
            run.state.commit()
        run.state.commit(save=True)  # no step since the last commit: the same memory, held again
        committed = run.state._snapshot["state"]["scope"]
        frozen = {n: v.copy() for n, v in committed.items()}
        _same(frozen, persistables(run.state))
        want = run.steps(2)
        run.state.commit()
        after = {n: v.copy() for n, v in run.state._snapshot["state"]["scope"].items()}
        _same(after, want[1])
        more = run.steps(2)

        run.state.restore()  # the last commit, after two more steps
        _same(persistables(run.state), after)
        got = run.steps(2)
        np.testing.assert_array_equal(got[0], more[0])
        _same(got[1], more[1])

        assert run.state.load() == 4  # the saved commit, read from disk into the held state
        _same(persistables(run.state), frozen)
        got = run.steps(2)
        np.testing.assert_array_equal(got[0], want[0])
        _same(got[1], want[1])
        run.state.commit()  # and held again after the load
        again = run.steps(2)
        run.state.restore()
        got = run.steps(2)
        np.testing.assert_array_equal(got[0], again[0])


@pytest.mark.parametrize("ir", IRS)
def test_state_written_from_outside_after_a_commit_leaves_the_commit_whole(ir, tmp_path):
    """on_resize='scale_lr' multiplies learning-rate variables with tensor.set, which writes into
    the variable's memory; a held variable gets memory of its own first."""
    with ir_guard(ir):
        run = _Run(ir, "CPU", tmp_path)
        run.steps(1)
        run.state.commit()
        part = run.state._part
        name = sorted(part._held.names)[0]
        committed = run.state._snapshot["state"]["scope"][name]
        before = committed.copy()
        part._held.detach(name)
        assert committed.ctypes.data != _scope_address(name)
        tensor = paddle.static.global_scope().find_var(name).get_tensor()
        np.testing.assert_array_equal(np.array(tensor), before)
        tensor.set(np.zeros_like(before), paddle.CPUPlace())
        np.testing.assert_array_equal(committed, before)
        run.steps(1)  # nothing is written elsewhere for it any more; the others still are
        np.testing.assert_array_equal(committed, before)
