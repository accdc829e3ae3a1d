"""Local SGD: the two functions a training step chooses between, as Paddle defines local SGD.

Paddle's ``LocalSGDOptimizer`` and ``AdaptiveLocalSGDOptimizer``
(``paddle/distributed/fleet/meta_optimizers/localsgd_optimizer.py``) append to the program, after
the inner optimizer's updates (SGD or Momentum, each rank with its own gradients: no gradient
AllReduce at all), a ``communicate`` block run under a condition on a step counter: which steps
communicate, and the adaptive rule's k, are run-time decisions (``distributed/local_sgd_schedule.py``).

``communicate``, for every parameter, with a snapshot the startup program set to the initial
parameter: ``param = snapshot - param``; ``all_reduce(param, sum)``; ``param = param * (1/N)``
(``scale``); ``param = snapshot - param``; ``snapshot = param``. Every parameter of the block
(``iter_parameters``): the trained ones and the non-trainable ones such as batch norm's running
mean and variance; not optimizer state (Momentum's velocity stays each rank's own).

Adaptive: the rule reads the loss (averaged over the ranks: all_reduce sum, scale 1/N) and the
learning rate of the steps, which both variants return (``with_adaptive_results``).

From the training function this builds, on copies:

- ``local`` (``build_local``): the function as it is: forward, backward, the updates, no collective;
- ``sync`` (``build_sync``): the same, then the averaging above on each updated parameter's new
  value, with the snapshots as extra parameters (after the function's own, ``SNAPSHOT_PREFIX +
  parameter``). The differences ``snapshot - param`` travel in buckets of one
  ``AllReduce(sum)`` each (``allreduce_buckets``); the scale is a multiplication by float32(1/N), as
  Paddle's ``scale`` op.

The Engine holds the step counter, ``last_step``, ``k_steps`` and the snapshots (NumPy arrays it
sets to the parameters at the first step, after the start-up broadcast, and after every sync step:
Paddle's ``snapshot = param``); it averages the loss for the adaptive rule with one AllReduce of
one value (``LOSS_RESULT``, ``LR_RESULT`` are results of both variants). Parameters the function
does not change are left out: for them Paddle's arithmetic gives ``snapshot - 0``, the parameter
itself.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, ValidationError
from ..ir.roles import STATE_PREFIX
from ..ir import Function, Output, clone_function
from ..ir.ops import Constant, Multiply, Parameter, Subtract
from ..ir.ops.optimizer import MomentumUpdate, OptimizerUpdate, SGDUpdate
from .allreduce_buckets import allreduce_in_buckets

SNAPSHOT_PREFIX = "@SNAPSHOT@"
LOSS_RESULT = "localsgd:loss"
LR_RESULT = "localsgd:lr"
# As Paddle's _can_apply: LocalSGDOptimizer wraps paddle.optimizer.SGD or Momentum only.
SUPPORTED_UPDATES = (SGDUpdate, MomentumUpdate)


@dataclass
class LocalSGD:
    """What the Engine needs besides the sync variant (which it runs as its main function)."""

    k_steps: int                 # localsgd_k_steps: k, or the adaptive rule's init_k_steps
    begin_step: int
    adaptive: bool
    local: Function
    params: list[str]            # the averaged parameters, in the order of ``snapshots``
    snapshots: list[Parameter]   # of the sync variant, its last parameters

    @property
    def settings(self) -> dict:
        """Compared across ranks at start-up (the functions' fingerprints leave them out)."""
        return {"localsgd_k_steps": self.k_steps, "localsgd_begin_step": self.begin_step,
                "localsgd_adaptive": self.adaptive}


def supported_updates(function: Function) -> list[OptimizerUpdate]:
    """The function's optimizer updates; refuses what Paddle's local SGD does not cover."""
    updates = [n for n in function.ordered_nodes() if isinstance(n, OptimizerUpdate)]
    if not updates:
        raise ConfigError(f"localsgd_k_steps: function '{function.name}' has no optimizer update (local SGD "
                          f"averages what the updates change: only training programs, after optimizer.minimize)")
    other = [u for u in updates if not isinstance(u, SUPPORTED_UPDATES)]
    if other:
        names = ", ".join(f"{u.op_type} of '{u.inputs[u.param_input].node.name}'" for u in other[:3])
        raise ConfigError(f"localsgd_k_steps: local SGD applies to SGD and Momentum (as Paddle's LocalSGDOptimizer "
                          f"and AdaptiveLocalSGDOptimizer); function '{function.name}' has {names}"
                          + (f" and {len(other) - 3} more" if len(other) > 3 else ""))
    params = [u.inputs[u.param_input].node.name for u in updates]
    if len(set(params)) != len(params):
        duplicate = next(n for n in params if params.count(n) > 1)
        raise ValidationError(f"localsgd_k_steps: parameter '{duplicate}' has more than one optimizer update")
    return updates


def with_adaptive_results(function: Function, loss: Output) -> Function:
    """The function returning, besides its own results, the loss (``LOSS_RESULT``) and the learning
    rate (``LR_RESULT``) the adaptive rule reads. The learning rate is the one an update reads
    directly from a Paddle variable (Paddle's ``_global_learning_rate()``), else the first update's."""
    if loss.type.num_elements() != 1 or not loss.dtype.is_float:
        raise ConfigError(f"localsgd_adaptive: the loss '{loss.node.name}' must be one floating-point value, got "
                          f"{loss.type}")
    updates = supported_updates(function)
    rates = [u.inputs[u.lr_input] for u in updates]
    lr = next((r for r in rates if isinstance(r.node, Parameter)), rates[0])
    return Function(function.parameters, {**function.results, LOSS_RESULT: loss, LR_RESULT: lr}, name=function.name)


def build_local(function: Function) -> Function:
    """The variant of the steps that do not average: forward, backward and the updates, no collective."""
    copy = clone_function(function)
    return Function(copy.parameters, copy.results, name=f"{function.name}_local")


def build_sync(function: Function, nranks: int, bucket_bytes: int = 0, min_buckets: int = 1,
               skip=()) -> tuple[Function, list[str], list[Parameter]]:
    """The variant of the averaging steps; returns it, the averaged parameters and their snapshots:
    the Paddle parameters (role ``parameter``) the function changes, updated by the optimizer or
    not (batch norm's running statistics). ``skip``: parameters left alone (Paddle's
    ``is_distributed`` ones)."""
    copy = clone_function(function)
    supported_updates(copy)
    results = dict(copy.results)
    entries = []  # (parameter name, new value, snapshot)
    for param in copy.parameters:
        value = results.get(STATE_PREFIX + param.name)
        if param.attrs["role"] != "parameter" or value is None or param.name in set(skip):
            continue
        name = param.name
        snapshot = Parameter(name=SNAPSHOT_PREFIX + name, dtype=value.dtype.value, shape=tuple(value.shape),
                             role="snapshot")
        entries.append((name, value, snapshot))
    # Ready order, as the gradient buckets: the new values' creation order.
    entries.sort(key=lambda e: (e[1].node.id, e[0]))
    deltas = [Subtract(snap.output(), value, name=f"localsgd_delta_{name}").output()
              for name, value, snap in entries]
    sums, _, _ = allreduce_in_buckets(deltas, "sum", bucket_bytes=bucket_bytes, min_buckets=min_buckets,
                                      names=lambda i: (f"localsgd_bucket_{i}", f"localsgd_allreduce_{i}"))
    for (name, value, snap), total in zip(entries, sums):
        # Paddle's scale op multiplies by the float32 attribute 1/N (not a division by N).
        scale = Constant(np.float32(1.0 / nranks), dtype=value.dtype.value, name=f"localsgd_scale_{name}")
        mean = Multiply(total, scale.output(), name=f"localsgd_mean_delta_{name}").output()
        results[STATE_PREFIX + name] = Subtract(snap.output(), mean, name=f"localsgd_average_{name}").output()
    snapshots = [snap for _, _, snap in entries]
    sync = Function(copy.parameters + snapshots, results, name=f"{function.name}_sync")
    return sync, [name for name, _, _ in entries], snapshots
