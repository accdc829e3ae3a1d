"""Local SGD at run time (distributed/local_sgd_schedule.py): Paddle's schedule of the averaging steps
and its adaptive rule for k. The variants the steps run: tests/passes/test_local_sgd.py."""
import math

import numpy as np

from paddle_ngraph.distributed.local_sgd_schedule import initial_last_step, next_k_steps, synchronizes


def schedule(k, begin, adaptive=False, steps=20):
    """The steps that average, by Paddle's conditions with a fixed k."""
    last, out = initial_last_step(begin, adaptive), []
    for step in range(1, steps + 1):
        if synchronizes(step, begin, last, k):
            out.append(step)
            last = step
    return out


def test_the_schedule_is_paddles_every_step_to_begin_step_then_every_k():
    assert schedule(3, 2) == [1, 2, 5, 8, 11, 14, 17, 20]
    assert schedule(4, 1) == [1, 5, 9, 13, 17]           # Paddle's default begin_step 1
    assert schedule(1, 1) == list(range(1, 21))          # Paddle's defaults: k 1 averages every step
    assert schedule(4, 0) == [4, 8, 12, 16, 20]          # no synchronous start
    # Adaptive starts last_step at 0, localsgd at begin_step; steps 1..begin_step all set it, so
    # (begin_step >= 0) the schedules agree.
    assert schedule(4, 6, adaptive=True) == schedule(4, 6) == [1, 2, 3, 4, 5, 6, 10, 14, 18]
    assert schedule(4, 0, adaptive=True) == schedule(4, 0)


def test_the_adaptive_rule_is_paddles_formula_in_float32_clipped_to_1_16():
    f = np.float32
    # ceil(sqrt(lr_0 * loss / (lr * loss_0) * init_k))
    assert next_k_steps(4, 0.1, 2.0, 0.1, 2.0) == 2
    assert next_k_steps(4, 0.1, 2.0, 0.05, 2.0) == math.ceil(math.sqrt(8))
    assert next_k_steps(1, 0.1, 2.0, 0.1, 0.5) == 1
    assert next_k_steps(8, 0.1, 1.0, 0.001, 1.0) == 16   # clipped
    assert next_k_steps(2, 0.1, 1.0, 0.1, 1e-9) == 1
    # Computed in float32, operation by operation as Paddle's ops.
    lr_0, loss_0, lr, loss = f(0.03), f(2.3), f(0.015), f(1.7)
    expected = int(np.ceil(np.sqrt((lr_0 * loss) / (lr * loss_0) * f(3.0))))
    assert next_k_steps(3, lr_0, loss_0, lr, loss) == expected
    # Non-finite (a zero initial loss, a NaN): Paddle's int64 cast gives INT64_MIN on x86, clipped to 1.
    assert next_k_steps(4, 0.1, 0.0, 0.1, 1.0) == 1
    assert next_k_steps(4, 0.1, 1.0, 0.1, float("nan")) == 1
