"""Step schedules: which compiled variant of a segment's function each step runs, what the
schedule adds to its inputs, and what it keeps between steps.

- ``Schedule``: every step runs the one function (forward, backward, collectives, update).
- ``AccumulationSchedule`` (passes/accumulate_gradients.py): micro-steps that are not the k-th
  run the accumulate variant (no collective, no update), the k-th runs the apply variant
  (AllReduce and update). The schedule owns the accumulators (zero-initialized NumPy arrays, one
  per gradient, passed after Paddle's inputs) and zeroes them after each apply step.
- ``LocalSGDSchedule`` (passes/local_sgd.py): the sync variant (the updates, then the
  parameters averaged over the ranks) on the steps Paddle's LocalSGDOptimizer averages (every
  step up to ``begin_step``, then every k-th), the local one (no collective) on the others. It
  keeps ``last_step``, k (recomputed by the adaptive rule from the loss averaged over the ranks)
  and the snapshots (one NumPy array per averaged parameter, passed to the sync variant after
  Paddle's inputs, set to the parameters at the first step and after every averaging).

Steps are counted from 0 before a step runs (``steps``, the engine's count of calls); Paddle's
step counter is 1-based.
"""
from __future__ import annotations

import numpy as np

from ..distributed import local_sgd_schedule
from ..backends.base import writeback_positions
from ..ir import Function
from ..ir.roles import FETCH_PREFIX, written_back
from ..passes import local_sgd


class Variant:
    """One compiled function and where its results go: fetches, and state or accumulators written
    back into the input they replace."""

    def __init__(self, function: Function, executable, fetch_names: list[str]):
        self.function = function
        self.executable = executable
        results = list(function.results)
        self.fetch_positions = [results.index(FETCH_PREFIX + n) for n in fetch_names]
        self.state_writeback = writeback_positions(function, written_back(function))


class Schedule:
    """Every step runs the one function."""

    accumulate = local = None  # the other variant of the schedules below

    def __init__(self, apply: Variant):
        self.apply = apply

    @property
    def variants(self) -> list[Variant]:
        return [self.apply]

    @property
    def extra_parameters(self) -> int:
        """The function's parameters the schedule feeds (after Paddle's inputs and handed values)."""
        return 0

    @property
    def settings(self) -> dict:
        """What the start-up sync compares across ranks besides the functions."""
        return {"accumulate_steps": 1}

    def choose(self, steps: int) -> Variant:
        return self.apply

    def extra_inputs(self, variant: Variant, paddle_inputs: list) -> list:
        return []

    def after_step(self, steps: int, variant: Variant, outputs, paddle_inputs, transport) -> bool:
        """Bookkeeping once ``variant`` ran; whether the step updated the parameters."""
        return True

    def reset(self):
        """After parameters were replaced from outside (a checkpoint loaded)."""


class AccumulationSchedule(Schedule):
    def __init__(self, apply: Variant, accumulate: Variant, steps: int, accumulators):
        super().__init__(apply)
        self.accumulate = accumulate
        self.steps = steps
        self.accumulators = [np.zeros(p.output_types[0].shape, p.output_types[0].dtype.numpy) for p in accumulators]

    @property
    def variants(self) -> list[Variant]:
        return [self.apply, self.accumulate]

    @property
    def extra_parameters(self) -> int:
        return len(self.accumulators)

    @property
    def settings(self) -> dict:
        return {"accumulate_steps": self.steps}

    def choose(self, steps: int) -> Variant:
        """The k-th call of every k applies; the others accumulate."""
        return self.apply if (steps + 1) % self.steps == 0 else self.accumulate

    def extra_inputs(self, variant: Variant, paddle_inputs: list) -> list:
        return self.accumulators

    def after_step(self, steps: int, variant: Variant, outputs, paddle_inputs, transport) -> bool:
        if variant is not self.apply:
            return False
        for accumulator in self.accumulators:
            accumulator.fill(0)
        return True


class LocalSGDSchedule(Schedule):
    def __init__(self, sync: Variant, local: Variant, localsgd, input_names: list[str]):
        super().__init__(sync)
        self.local = local
        self.localsgd = localsgd
        # Paddle's step-counter state: the last averaging step and k (the adaptive rule's changes).
        self.last_step = local_sgd_schedule.initial_last_step(localsgd.begin_step, localsgd.adaptive)
        self.k_steps = localsgd.k_steps
        self.loss_0 = self.lr_0 = None  # adaptive: step 1's global loss and learning rate
        self.snapshots: list | None = None  # set at the first step, from the start-up broadcast's values
        self._snapshot_inputs = [input_names.index(n) for n in localsgd.params]

    @property
    def variants(self) -> list[Variant]:
        return [self.apply, self.local]

    @property
    def extra_parameters(self) -> int:
        return len(self.localsgd.snapshots)

    @property
    def settings(self) -> dict:
        return {"accumulate_steps": 1, **self.localsgd.settings}

    def choose(self, steps: int) -> Variant:
        """The sync variant on Paddle's averaging steps, the local one on the others."""
        synced = local_sgd_schedule.synchronizes(steps + 1, self.localsgd.begin_step, self.last_step, self.k_steps)
        return self.apply if synced else self.local

    def extra_inputs(self, variant: Variant, paddle_inputs: list) -> list:
        if self.snapshots is None:
            self.snapshots = [np.array(paddle_inputs[i], copy=True) for i in self._snapshot_inputs]
        return self.snapshots if variant is self.apply else []

    def after_step(self, steps: int, variant: Variant, outputs, paddle_inputs, transport) -> bool:
        """Paddle's ``snapshot = param`` and ``last_step = step`` on an averaging step; the
        adaptive rule's loss_0/lr_0 (step 1) and new k (averaging steps after begin_step), from
        the loss averaged over the ranks, as Paddle's all_reduce and scale."""
        step, config = steps + 1, self.localsgd
        synced = variant is self.apply
        if synced:
            for snapshot, i in zip(self.snapshots, self._snapshot_inputs):
                np.copyto(snapshot, paddle_inputs[i], casting="no")
        if config.adaptive and (step == 1 or (synced and step > config.begin_step)):
            results = list(variant.function.results)
            loss = np.asarray(outputs[results.index(local_sgd.LOSS_RESULT)], dtype=np.float32).reshape(1)
            lr = np.float32(np.asarray(outputs[results.index(local_sgd.LR_RESULT)]).reshape(-1)[0])
            total = transport.allreduce(np.array(loss, copy=True), "sum", name="localsgd_loss")
            avg_loss = np.float32(total[0]) * np.float32(1.0 / transport.size)
            if step == 1:
                self.loss_0, self.lr_0 = avg_loss, lr
            if synced and step > config.begin_step:
                self.k_steps = local_sgd_schedule.next_k_steps(config.k_steps, self.lr_0, self.loss_0, lr, avg_loss)
        if synced:
            self.last_step = step
        return True

    def reset(self):
        """The next step takes its snapshots from the loaded parameters, as Paddle's startup
        program takes them from the initial values."""
        self.snapshots = None
