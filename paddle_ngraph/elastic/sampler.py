"""``ElasticBatchSampler``: the data position of an elastic job, kept across group changes.

Paddle's ``DistributedBatchSampler`` deals an epoch's indices to a fixed number of ranks. Here the
epoch's order is one list (shuffled by the epoch's seed, as Paddle does) and the group walks it:
each step of the group takes the next ``batch_size * size`` indices, rank ``r`` the ``r``-th
``batch_size`` of them. The position is global (samples of the epoch the group has trained on), so
a group of another size goes on from the same place, each sample of the epoch trained on once.
As Horovod's ``ElasticSampler``, the training loop says when a batch is done (``record_batch``):
a data loader may have drawn batches ahead of the step. ``State(..., sampler=s)`` puts the
position in each commit, restores it with the commit, and the next ``iter`` deals from there to
the group of that moment.
"""
from __future__ import annotations

import numpy as np
import paddle

from ..errors import ConfigError


class ElasticBatchSampler(paddle.io.BatchSampler):
    """Batches of ``batch_size`` indices of ``dataset`` for this rank of the current elastic group.

    ``shuffle``: each epoch's order is ``RandomState(seed + epoch)``'s permutation; ``drop_last``:
    the epoch's last step is dropped where the remaining samples do not fill ``batch_size`` for
    every rank (else it is filled from the epoch's start, as Paddle pads). ``set_epoch(e)`` starts
    epoch ``e`` from its beginning."""

    def __init__(self, dataset, batch_size: int, shuffle: bool = False, drop_last: bool = False, seed: int = 0):
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ConfigError(f"ElasticBatchSampler: batch_size must be a positive integer, not {batch_size!r}")
        self.dataset, self.batch_size, self.shuffle, self.drop_last, self.seed = (
            dataset, batch_size, shuffle, drop_last, seed)
        self.epoch = 0
        self.processed = 0  # samples of this epoch the group has trained on (record_batch)

    # --- position -------------------------------------------------------------------------------
    def set_epoch(self, epoch: int):
        self.epoch, self.processed = int(epoch), 0

    def record_batch(self):
        """One step of the group is done: the position moves past its ``batch_size * size`` samples."""
        from .group import current_size

        self.processed += self.batch_size * current_size()

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "processed": self.processed}

    def set_state_dict(self, state: dict):
        self.epoch, self.processed = int(state["epoch"]), int(state["processed"])

    # --- batches --------------------------------------------------------------------------------
    def order(self) -> list[int]:
        """This epoch's indices in the order the group takes them."""
        indices = np.arange(len(self.dataset))
        if self.shuffle:
            np.random.RandomState(self.seed + self.epoch).shuffle(indices)
        return indices.tolist()

    def batches(self, rank: int, size: int) -> list[list[int]]:
        """``rank``'s batches of ``size`` ranks, from the position to the epoch's end."""
        order = self.order()
        step = self.batch_size * size
        batches = []
        for start in range(self.processed, len(order), step):
            taken = order[start:start + step]
            if len(taken) < step:
                if self.drop_last or not order:
                    break
                taken = taken + (order * (step // len(order) + 1))[:step - len(taken)]  # filled as Paddle pads
            batches.append(taken[rank * self.batch_size:(rank + 1) * self.batch_size])
        return batches

    def __iter__(self):
        from .group import current_rank, current_size

        yield from self.batches(current_rank(), current_size())

    def __len__(self) -> int:
        from .group import current_size

        step = self.batch_size * current_size()
        remaining = max(0, len(self.dataset) - self.processed)
        return remaining // step if self.drop_last else -(-remaining // step)
