"""Local SGD on 2 ranks (real mpirun, and paddle.distributed.launch) equals Paddle's definition
(LocalSGDOptimizer / AdaptiveLocalSGDOptimizer) computed by hand in NumPy from the same data.

The reference below re-derives everything: the MLP's gradients, SGD and Momentum (each rank with
its own gradients and its own velocity), Paddle's schedule (every step up to begin_step, then when
step - last_step == k), its averaging through snapshots (param = snapshot - sum_r(snapshot -
param_r) * float32(1/N), snapshot = param) and the adaptive rule's k. Ranks start from different
seeds: rank 0's initial parameters are the reference's, so the start-up broadcast is checked too.
"""
import math
import os

import numpy as np
import pytest

from ranks import run_ranks
from paddle_ngraph.distributed.ccl import available as ccl_available

# Every test here starts ranks (tests/ranks.py).
pytestmark = pytest.mark.distributed

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "localsgd_worker.py")
PARAMS = ["fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0"]
BATCH = 8
f32 = np.float32


def grads(p, x, y):
    """Loss mean((relu(x W0 + b0) W1 + b1 - y)^2) and its gradients, by hand."""
    pre = x @ p["fc_0.w_0"] + p["fc_0.b_0"]
    h = np.maximum(pre, 0)
    d = h @ p["fc_1.w_0"] + p["fc_1.b_0"] - y
    loss = np.mean(d * d)
    dout = (f32(2) * d / f32(d.size)).astype(f32)
    dh = (dout @ p["fc_1.w_0"].T) * (pre > 0)
    return loss, {"fc_1.w_0": h.T @ dout, "fc_1.b_0": dout.sum(0), "fc_0.w_0": x.T @ dh, "fc_0.b_0": dh.sum(0)}


def reference(run, optimizer, k, begin, adaptive=False, lr=0.05, lr_step=0, nranks=2):
    """Per step: every rank's parameters, whether it averaged, k afterwards."""
    x, y = run["x"], run["y"]
    start = {n: run[f"initial/{n}"].astype(f32) for n in PARAMS}
    ranks = [{n: v.copy() for n, v in start.items()} for _ in range(nranks)]
    velocity = [{n: np.zeros_like(v) for n, v in start.items()} for _ in range(nranks)]
    snapshot = {n: v.copy() for n, v in start.items()}
    last, k_now, loss_0, lr_0 = (0 if adaptive else begin), k, None, None
    history = {"params": [], "synced": [], "ks": []}
    for step in range(1, len(x) + 1):
        # The learning-rate variable holds float32(StepDecay's Python float).
        rate = f32(lr * 0.5 ** ((step - 1) // lr_step)) if lr_step else f32(lr)
        losses = []
        for r in range(nranks):
            rows = slice(r * BATCH, (r + 1) * BATCH)
            loss, g = grads(ranks[r], x[step - 1, rows], y[step - 1, rows])
            losses.append(f32(loss))
            for n in PARAMS:
                if optimizer == "momentum":  # Paddle's momentum: v = mu v + g; p -= lr v
                    velocity[r][n] = f32(0.9) * velocity[r][n] + g[n]
                    ranks[r][n] = ranks[r][n] - rate * velocity[r][n]
                else:
                    ranks[r][n] = ranks[r][n] - rate * g[n]
        synced = step <= begin or step - last == k_now
        if synced:
            for n in PARAMS:
                total = snapshot[n] - ranks[0][n]
                for r in range(1, nranks):
                    total = total + (snapshot[n] - ranks[r][n])
                averaged = snapshot[n] - total * f32(1.0 / nranks)
                for r in range(nranks):
                    ranks[r][n] = averaged.copy()
                snapshot[n] = averaged.copy()
        if adaptive and (step == 1 or (synced and step > begin)):
            avg_loss = f32(sum(losses[1:], losses[0])) * f32(1.0 / nranks)
            if step == 1:
                loss_0, lr_0 = avg_loss, rate
            if synced and step > begin:
                k_now = min(max(math.ceil(math.sqrt(f32(f32(lr_0 * avg_loss) / f32(rate * loss_0))
                                                    * f32(k))), 1), 16)
        if synced:
            last = step
        history["params"].append([{n: v.copy() for n, v in p.items()} for p in ranks])
        history["synced"].append(synced)
        history["ks"].append(k_now)
    return history


def check(out, optimizer, k, begin, adaptive=False, lr_step=0, nranks=2):
    runs = [np.load(os.path.join(out, f"rank{r}.npz")) for r in range(nranks)]
    ref = reference(runs[0], optimizer, k, begin, adaptive, lr_step=lr_step, nranks=nranks)
    steps = len(ref["synced"])
    for r, run in enumerate(runs):
        np.testing.assert_array_equal(run["synced"], ref["synced"], err_msg=f"rank {r}: averaging steps")
        np.testing.assert_array_equal(run["ks"], ref["ks"], err_msg=f"rank {r}: k after each step")
    for step in range(steps):
        for n in PARAMS:
            for r, run in enumerate(runs):
                np.testing.assert_allclose(run[f"steps/{n}"][step], ref["params"][step][r][n], rtol=1e-5, atol=1e-6,
                                           err_msg=f"rank {r}, step {step + 1}, {n}")
            got = [run[f"steps/{n}"][step].tobytes() for run in runs]
            if ref["synced"][step]:
                assert len(set(got)) == 1, f"step {step + 1} averaged, but ranks' {n} differ"
        if not ref["synced"][step] and step + 1 > begin:  # a local step: each rank its own
            assert any(runs[0][f"steps/{n}"][step].tobytes() != runs[1][f"steps/{n}"][step].tobytes() for n in PARAMS)
    return ref


BY_HAND = [("sgd", "pir", "CPU"), ("momentum", "legacy", "CPU"), ("momentum", "pir", "INTERPRETER")]
ADAPTIVE = ["--optimizer", "momentum", "--adaptive", "--steps", 20, "--k", 2, "--begin", 1, "--lr-step", 3]


@pytest.fixture(scope="module")
def outs(tmp_path_factory):
    """The runs under mpirun, each in its own directory, in one job: {case: directory}; the cases
    "adaptive" and "fleet" besides those of BY_HAND. The fleet run is last: it leaves fleet
    initialized in the process."""
    cases = {case: ["--optimizer", case[0], "--ir", case[1], "--backend", case[2], "--steps", 14, "--k", 3,
                    "--begin", 2] for case in BY_HAND}
    cases["adaptive"] = ADAPTIVE
    cases["fleet"] = ["--optimizer", "momentum", "--fleet", "--steps", 10, "--k", 4, "--begin", 1]
    dirs, argv = {}, []
    for case, args in cases.items():
        dirs[case] = tmp_path_factory.mktemp("localsgd")
        argv += [*(["--then"] if argv else []), "--out", dirs[case], *args]
    run_ranks(WORKER, 2, *argv)
    return dirs


@pytest.mark.parametrize("optimizer,ir,backend", BY_HAND)
def test_two_ranks_equal_paddles_local_sgd_by_hand(outs, optimizer, ir, backend):
    ref = check(outs[optimizer, ir, backend], optimizer, 3, 2)
    assert [s + 1 for s, synced in enumerate(ref["synced"]) if synced] == [1, 2, 5, 8, 11, 14]


def test_adaptive_k_follows_paddles_rule_from_the_global_loss_and_learning_rate(outs):
    """Momentum with a learning rate halved every 3 steps: k grows as lr_0 / lr does."""
    ref = check(outs["adaptive"], "momentum", 2, 1, adaptive=True, lr_step=3)
    assert len(set(ref["ks"])) >= 3, f"k did not change enough to test the rule: {ref['ks']}"


def test_fleet_strategy_localsgd_maps_onto_the_engine(outs):
    check(outs["fleet"], "momentum", 4, 1)


@pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built (oneCCL not installed)")
def test_under_paddle_launch(tmp_path):
    run_ranks(WORKER, 2, "--out", tmp_path, "--optimizer", "sgd", "--steps", 12, "--k", 4, "--begin", 0,
              launcher="launch")
    ref = check(tmp_path, "sgd", 4, 0)
    assert [s + 1 for s, synced in enumerate(ref["synced"]) if synced] == [4, 8, 12]
