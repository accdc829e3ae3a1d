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


OPTIMIZERS = {
    "sgd": lambda: paddle.optimizer.SGD(0.05),
    "momentum": lambda: paddle.optimizer.Momentum(0.05, momentum=0.9),
    "nesterov_decay": lambda: paddle.optimizer.Momentum(0.05, momentum=0.9, use_nesterov=True, weight_decay=0.01),
    "adamw": lambda: paddle.optimizer.AdamW(0.01, weight_decay=0.02),
    "lamb": lambda: paddle.optimizer.Lamb(0.01),
}


def _build(optimizer: str, dtype: str):
    """Layers of 6 x 333 and 333 x 1: sizes that are no multiple of the kernels' tiles or vectors."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, 6], dtype)
        y = paddle.static.data("y", [-1, 1], dtype)
        hidden = paddle.nn.functional.relu(paddle.nn.Linear(6, 333)(x))
        loss = paddle.nn.functional.mse_loss(paddle.nn.Linear(333, 1)(hidden), y)
        OPTIMIZERS[optimizer]().minimize(loss)
    return main, startup, loss


@pytest.mark.parametrize("accumulate", [1, 2])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_updates_written_elsewhere_equal_updates_in_place(optimizer, dtype, accumulate, backend):
    """Committing at every step (every update written to other memory; with accumulation, a commit
    between the calls of an update leaves the parameters held until the update) trains bit for bit
    as not committing at all (every update in place)."""
    with ir_guard("pir"):
        paddle.set_default_dtype(dtype)
        try:
            paddle.seed(0)
            main, startup, loss = _build(optimizer, dtype)
            exe = paddle.static.Executor(paddle.CPUPlace())
            exe.run(startup)
            scope = paddle.static.global_scope()

            def train(commit: bool):
                state = elastic.State(program=main, step=0)
                initial = persistables(state)
                program, (fetch,) = state.transpile([loss], backend=backend, accumulate_steps=accumulate)
                for step in range(5):
                    feed = {k: v.astype(dtype) for k, v in batch(step, 0, 1).items()}
                    exe.run(program, feed=feed, fetch_list=[fetch])
                    if commit:
                        state.commit()
                if commit:
                    assert state._part._held.names, "nothing was held"
                trained = persistables(state)
                for name, value in initial.items():  # back to the start for the other run
                    scope.find_var(name).get_tensor().set(value, paddle.CPUPlace())
                return trained

            _same(train(commit=True), train(commit=False))
        finally:
            paddle.set_default_dtype("float32")
