"""Two wrapped Layers, both forwards before both backwards, as Paddle's own gradient-check tests of
paddle.DataParallel do (parallel_dygraph_gradient_check*.py), whose ranks reach different
parameters, the second Layer's gradients accumulating over the steps without being cleared: every
gradient must be the mean over the ranks of each rank's own, as
paddle.DataParallel(find_unused_parameters=True) makes it.

- Run eagerly (Paddle's test branches on ``.item()``): each Layer's gradients are averaged after
  the backward that reaches it, not after the first backward that follows its forward (which is
  the other Layer's).
- Captured (the branch on the rank alone, Python): each rank captures a program with gradients
  for other parameters; the bucketed AllReduce would add one rank's gradient of w1 to another's of
  w2, so their backward runs without it and the gradients are averaged after it."""
import numpy as np
import pytest

from ranks import run_ranks

# Every test here starts ranks (tests/ranks.py).
pytestmark = pytest.mark.distributed

STEPS, BATCH, IN, OUT = 4, 5, 10, 20


def _net(trainer_id, eager=True):
    import paddle

    class Routed(paddle.nn.Layer):
        """w1 on rank 1 for an all-ones batch, else w2 (``.item()`` makes it run eagerly); without
        ``eager``, w1 on rank 1 for every batch (captured)."""

        def __init__(self, trainer_id):
            super().__init__()
            self.w1 = self.create_parameter(shape=[IN, OUT], dtype="float32")
            self.w2 = self.create_parameter(shape=[IN, OUT], dtype="float32")
            self.share = paddle.nn.Linear(OUT, 3)
            self.unused = self.create_parameter(shape=[OUT, IN], dtype="float32")
            self.trainer_id = trainer_id

        def forward(self, x):
            ones = bool(paddle.equal_all(x, paddle.ones([BATCH, IN])).item())
            return self.share(paddle.matmul(x, self.w1 if ones and self.trainer_id == 1 else self.w2))

    class ByRank(Routed):
        def forward(self, x):  # no .item() in its source: captured
            return self.share(paddle.matmul(x, self.w1 if self.trainer_id == 1 else self.w2))

    return Routed(trainer_id) if eager else ByRank(trainer_id)


def _inputs():
    rng = np.random.default_rng(3)
    return [rng.random((BATCH, IN), dtype=np.float32) if step % 2 == 0 else np.ones((BATCH, IN), np.float32)
            for step in range(STEPS)]


def _grads(layer):
    return {n: (None if p.grad is None else p.grad.numpy().copy()) for n, p in layer.named_parameters()}


def _interleaved_on_this_rank(eager):
    import paddle
    import paddle_ngraph

    rank = paddle.distributed.get_rank()
    paddle.seed(5 + rank)  # DataParallel gives every rank rank 0's parameters
    first, second = _net(rank, eager), _net(rank, eager)
    second.set_state_dict(first.state_dict())
    a, b = paddle_ngraph.DataParallel(first), paddle_ngraph.DataParallel(second)
    initial = {n: p.numpy().copy() for n, p in first.named_parameters()}
    seen = []
    for x in _inputs():
        x = paddle.to_tensor(x)
        out_a, out_b = a(x), b(x)
        out_a.sum().backward()
        out_b.sum().backward()
        seen.append((_grads(first), _grads(second)))
        a.clear_gradients()  # only the first: the second's accumulate
    engines = [(e.steps, e.eager_steps, e.updates) for e in (a.engine, b.engine)]
    return initial, seen, engines


def _expected(initial, eager):
    """Per step, the first Layer's gradients (the mean over the ranks of each rank's own, zeros for a
    rank that does not reach a parameter, None where no rank does) and the second's (their sum so far)."""
    import paddle

    per_rank = []
    for rank in range(2):
        net = _net(rank, eager)
        net.set_state_dict({n: paddle.to_tensor(v) for n, v in initial.items()})
        steps = []
        for x in _inputs():
            net(paddle.to_tensor(x)).sum().backward()
            steps.append(_grads(net))
            net.clear_gradients()
        per_rank.append(steps)
    firsts, seconds, total = [], [], {}
    for step in range(STEPS):
        mean = {}
        for name in initial:
            got = [per_rank[r][step][name] for r in range(2)]
            if all(g is None for g in got):
                mean[name] = None
                continue
            mean[name] = np.mean([g if g is not None else np.zeros_like(initial[name]) for g in got], axis=0)
            total[name] = total.get(name, 0) + mean[name]
        firsts.append(mean)
        seconds.append({n: total.get(n) for n in initial})
    return firsts, seconds


@pytest.mark.parametrize("eager", [True, False], ids=["eager", "captured"])
def test_two_layers_forwards_interleaved_ranks_reaching_different_parameters(dynamic_mode, eager):
    results = run_ranks(_interleaved_on_this_rank, 2, eager, timeout=180).results
    initial, _, _ = results[0]
    firsts, seconds = _expected(initial, eager)
    for rank, (_, seen, engines) in enumerate(results):
        # One average per backward, eagerly or after the engine's backward.
        assert engines == [(0, STEPS, STEPS) if eager else (STEPS, 0, STEPS)] * 2, engines
        for step, (got_first, got_second) in enumerate(seen):
            for layer, got, want in (("first", got_first, firsts[step]), ("second", got_second, seconds[step])):
                for name, value in want.items():
                    where = f"rank {rank} step {step} {layer} Layer {name}"
                    if value is None:
                        assert got[name] is None, where
                    else:
                        assert got[name] is not None, where
                        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=where)


def _mlp():
    import paddle

    return paddle.nn.Sequential(paddle.nn.Linear(IN, OUT), paddle.nn.Tanh(), paddle.nn.Linear(OUT, 3))


def _uneven_batches(rank, plan):
    """``diff``: Paddle's test_dist_base with diff_batch (the sparse_embedding_diff_length tests): of
    each batch of 4, rank 0 takes the first sample, rank 1 the other three. ``last``: two samples
    each, but at the third step rank 0 has one left (a new signature on rank 0 only), then two again."""
    rng = np.random.default_rng(11)
    if plan == "diff":
        batches = [rng.standard_normal((4, IN)).astype(np.float32) for _ in range(2)]
        return [b[:1] if rank == 0 else b[1:] for b in batches]
    batches = [rng.standard_normal((4, IN)).astype(np.float32) for _ in range(4)]
    return [b[2 * rank:2 * rank + (1 if step == 2 and rank == 0 else 2)] for step, b in enumerate(batches)]


def _uneven_on_this_rank(plan):
    import paddle
    import paddle_ngraph

    rank = paddle.distributed.get_rank()
    paddle.seed(9)
    layer = _mlp()
    model = paddle_ngraph.DataParallel(layer)
    initial = {n: p.numpy().copy() for n, p in layer.named_parameters()}
    seen = []
    for x in _uneven_batches(rank, plan):
        model(paddle.to_tensor(x)).mean().backward()
        seen.append(_grads(layer))
        model.clear_gradients()
    return initial, seen, (model.engine.steps, model.engine.eager_steps, model.engine.updates)


@pytest.mark.parametrize("plan", ["diff", "last"])
def test_ranks_with_batches_of_different_sizes_average_like_paddle(dynamic_mode, plan):
    """Each rank captures a function of its own batch size: their bucketed AllReduce cannot pair up
    (before, the consistency check ended the job, and a rank meeting a new signature alone waited
    forever in it), so each rank's backward runs without it and the gradients are averaged after
    it; paddle.DataParallel averages them so too (not weighted by the batch sizes)."""
    import paddle

    results = run_ranks(_uneven_on_this_rank, 2, plan, timeout=120).results
    initial = results[0][0]
    own = []
    for rank in range(2):
        net = _mlp()
        net.set_state_dict({n: paddle.to_tensor(v) for n, v in initial.items()})
        steps = []
        for x in _uneven_batches(rank, plan):
            net(paddle.to_tensor(x)).mean().backward()
            steps.append(_grads(net))
            net.clear_gradients()
        own.append(steps)
    for rank, (_, seen, engine) in enumerate(results):
        steps = len(own[0])
        assert engine == (steps, 0, steps), engine  # on the engine, one average per backward
        for step, got in enumerate(seen):
            for name in initial:
                want = (own[0][step][name] + own[1][step][name]) / 2
                np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6,
                                           err_msg=f"rank {rank} step {step} {name}")


def _counting_mlp(rank, segmented):
    """The MLP, whose forward on rank 1 counts its calls in a Python attribute: that rank runs it
    eagerly (a captured program would freeze the count), rank 0 on the engine; ``segmented``: with
    an op the engine lacks in the middle (logcumsumexp), which rank 0 runs in Paddle between two
    engine segments."""
    import paddle

    class CountingOnRank1(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.first, self.second = paddle.nn.Linear(IN, OUT), paddle.nn.Linear(OUT, 3)
            self.calls = 0

        def forward(self, x):
            if rank == 1:
                self.calls += 1
            h = paddle.tanh(self.first(x))
            if segmented:
                h = paddle.logcumsumexp(h, axis=1)
            return self.second(h)

    return CountingOnRank1()


def _mixed_on_this_rank(segmented):
    import paddle
    import paddle_ngraph

    rank = paddle.distributed.get_rank()
    paddle.seed(9)
    layer = _counting_mlp(rank, segmented)
    model = paddle_ngraph.DataParallel(layer)
    initial = {n: p.numpy().copy() for n, p in layer.named_parameters()}
    seen = []
    for x in _uneven_batches(rank, "last"):
        model(paddle.to_tensor(x)).mean().backward()
        seen.append(_grads(layer))
        model.clear_gradients()
    segments = [c.segmented for c in model.engine.compiled.values() if c is not None]
    return initial, seen, (model.engine.steps, model.engine.eager_steps, model.engine.updates), segments


@pytest.mark.parametrize("segmented", [False, True], ids=["whole", "segmented"])
def test_a_rank_running_the_layer_eagerly_beside_one_on_the_engine_averages_like_paddle(dynamic_mode, segmented):
    """One rank's forward cannot be captured (Python state changed on that rank only), the other's
    is, whole or in segments around an op left to Paddle: the eager rank's averaging after backward
    and the engine rank's bucketed AllReduce would not pair up. The ranks find out at the backward's
    agreement, and the engine rank averages after its backward too, as the eager rank does."""
    import paddle

    results = run_ranks(_mixed_on_this_rank, 2, segmented, timeout=120).results
    initial = results[0][0]
    own = []
    for rank in range(2):
        net = _counting_mlp(rank, segmented)
        net.set_state_dict({n: paddle.to_tensor(v) for n, v in initial.items()})
        steps = []
        for x in _uneven_batches(rank, "last"):
            net(paddle.to_tensor(x)).mean().backward()
            steps.append(_grads(net))
            net.clear_gradients()
        own.append(steps)
    steps = len(own[0])
    assert [engine for _, _, engine, _ in results] == [(steps, 0, steps), (0, steps, steps)]
    assert results[0][3] and set(results[0][3]) == {segmented}  # rank 0's captures: whole or segmented
    for rank, (_, seen, _, _) in enumerate(results):
        for step, got in enumerate(seen):
            for name in initial:
                want = (own[0][step][name] + own[1][step][name]) / 2
                np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6,
                                           err_msg=f"rank {rank} step {step} {name}")
