"""What changes with the group's size: ``elastic.run(..., on_resize=...)``.

Each rank keeps its batch (its data loader is the user's); the global batch moves with the ranks.

- ``None`` (the default): nothing is changed; the user shards a fixed global batch over
  ``elastic.size()`` ranks (as the tests do), or accepts the new global batch as it is.
- ``"scale_lr"``: the learning rate follows the global batch (the linear scaling rule): after each
  group change it is multiplied by the new size over the size at the commit restored. A float
  learning rate is set again; an ``LRScheduler``'s ``base_lr`` and ``last_lr`` are scaled, so that
  its schedule goes on from the scaled values; a static program's learning-rate variables, or its
  ``lr_scheduler``, likewise.
- ``"accumulate"``: the global batch is held: each update accumulates the gradients of
  ``accumulate_steps()`` calls, the job's first size over the current one (rounded up where it does
  not divide: the global batch is then larger, and the log says by how much). A static program's
  ``state.transpile`` multiplies its ``accumulate_steps`` by it; a dygraph loop reads
  ``elastic.accumulate_steps()`` and calls ``backward`` that many times (under ``no_sync`` but the
  last) before its optimizer's step.

Every rank logs the choice once per group change.
"""
from __future__ import annotations

import logging
import math

from ..errors import ConfigError

log = logging.getLogger("paddle_ngraph.elastic")

POLICIES = (None, "scale_lr", "accumulate")


def check_policy(policy):
    if policy not in POLICIES:
        raise ConfigError(f"elastic.run: on_resize={policy!r}; valid: None, 'scale_lr', 'accumulate'")
    return policy


def accumulation_factor(initial_size: int, size: int) -> int:
    """Calls per update that hold the global batch of ``initial_size`` ranks on ``size`` ranks."""
    return max(1, math.ceil(initial_size / size))


def apply(policy, state, committed_size: int, initial_size: int, size: int, rank: int):
    """After the commit is restored on a group of ``size``: the policy's change, logged."""
    if policy is None or committed_size == size:
        return
    if policy == "scale_lr":
        factor = size / committed_size
        before, after = state.scale_learning_rate(factor)
        log.warning("rank %d: on_resize='scale_lr': %d -> %d ranks, the learning rate scaled by %d/%d (%s -> %s); "
                    "each rank keeps its batch", rank, committed_size, size, size, committed_size, before, after)
    elif policy == "accumulate":
        steps = accumulation_factor(initial_size, size)
        held = "held" if steps * size == initial_size else f"{steps * size}/{initial_size} of it"
        log.warning("rank %d: on_resize='accumulate': %d ranks, each update accumulates %d call(s): the global "
                    "batch of the job's first %d ranks is %s", rank, size, steps, initial_size, held)


# The policy of the running ``elastic.run`` and the size of the job's first group.
_CURRENT = {"policy": None, "initial_size": None}


def set_current(policy, initial_size: int | None):
    _CURRENT.update(policy=policy, initial_size=initial_size)


def accumulate_steps() -> int:
    """Calls per update the current group makes to hold the job's first global batch: more than 1
    only under ``elastic.run(on_resize="accumulate")`` on fewer ranks than the job began with."""
    from .group import current_size

    if _CURRENT["policy"] != "accumulate" or not _CURRENT["initial_size"]:
        return 1
    return accumulation_factor(_CURRENT["initial_size"], current_size())
