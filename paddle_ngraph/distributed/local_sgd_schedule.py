"""Local SGD at run time: which training steps average the parameters, and the adaptive rule's k.

The functions a step chooses between are built by ``passes/local_sgd.py``; the Engine
(``transpiler/engine.py``) holds the step counter, ``last_step`` and ``k_steps`` and asks this
module which function each step runs. As Paddle's ``LocalSGDOptimizer`` and
``AdaptiveLocalSGDOptimizer`` (``paddle/distributed/fleet/meta_optimizers/localsgd_optimizer.py``)
define it, with a step counter that is 1 at the first run (``autoincreased_step_counter``):

- ``step <= begin_step``: communicate (so the first steps average the parameters after every update);
- ``step > begin_step``: communicate when ``step - last_step == k_steps``; communicate sets
  ``last_step = step``. ``last_step`` starts at ``begin_step`` (localsgd) or 0 (adaptive).

Adaptive: at step 1, ``loss_0`` = the loss averaged over the ranks and ``lr_0`` = the learning
rate; at every communicate after ``begin_step``, with ``avg_loss`` the step's loss averaged so,
``k_steps = clip(ceil(sqrt(lr_0 * avg_loss / (lr * loss_0) * init_k_steps)), 1, 16)`` in float32
(int64 after the ceil).
"""
from __future__ import annotations

import numpy as np

# Paddle's adaptive bounds on k_steps (``min_local_steps``, ``max_local_steps``).
MIN_K_STEPS, MAX_K_STEPS = 1, 16


def synchronizes(step: int, begin_step: int, last_step: int, k_steps: int) -> bool:
    """Whether 1-based ``step`` averages the parameters: Paddle's two nested conditions."""
    return step <= begin_step or step - last_step == k_steps


def initial_last_step(begin_step: int, adaptive: bool) -> int:
    """Paddle's initial ``last_step`` variable: ``begin_step`` for localsgd, 0 for adaptive. (Steps
    1..begin_step all set it, so for begin_step >= 0 the two schedules agree.)"""
    return 0 if adaptive else begin_step


def next_k_steps(init_k_steps: int, lr_0, loss_0, lr, avg_loss) -> int:
    """Adaptive local SGD's next k, in float32 as Paddle's ops compute it:
    ``ceil(sqrt(lr_0 * avg_loss / (lr * loss_0) * init_k_steps))``, cast to int64, clipped to [1, 16]."""
    f32 = np.float32
    with np.errstate(all="ignore"):
        ratio = (f32(lr_0) * f32(avg_loss)) / (f32(lr) * f32(loss_0))
        value = np.ceil(np.sqrt(ratio * f32(float(init_k_steps))))
    # Paddle casts with static_cast<int64_t>; on x86 a NaN, an infinity or a value beyond int64
    # gives INT64_MIN, which the clip turns into 1: averaging at every step, the safe side.
    if not np.isfinite(value) or value >= 2.0 ** 63:
        return MIN_K_STEPS
    return int(min(max(int(value), MIN_K_STEPS), MAX_K_STEPS))
