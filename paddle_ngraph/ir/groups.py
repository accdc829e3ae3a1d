"""Groups of ranks: which ranks a collective runs over, in the layout of Paddle's hybrid parallelism.

A collective node's ``group`` attribute is the tuple of the global ranks it runs over, in rank
order; the empty tuple means every rank of the job. Functions of a data-parallel job never name a
group; a tensor-parallel (model-parallel) job has two kinds:

- the model-parallel group of a rank: the ``mp_degree`` consecutive ranks that hold the shards of
  one model (Paddle's ``CommunicateTopology`` puts mp innermost: with mp_degree 2, ranks 0 and 1
  are one model, 2 and 3 the next);
- its data-parallel group: the ranks holding the same shard of every model (``rank % mp_degree``
  equal), over which gradients are averaged.

Paddle's legacy tensor-parallel programs name groups by ring id (``TensorParallelOptimizer``:
0 the model-parallel ring, 1 the global ring, 2 the data-parallel ring); ``RankLayout.ring``
maps them. Without model parallelism (mp_degree 1) ring 0 is the global ring, as in Paddle's
data-parallel programs (``RawProgramOptimizer``). A group of every rank is stated as ``()``, so that one spelling means "the whole job".
Programs traced from dygraph (PIR) name groups by the ids of Paddle's communication groups
(``Group.id`` of the hybrid communicate group's model-parallel group, ...): a layout made with
``rings`` (ring id -> its global ranks) maps those instead.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError

ALL_RANKS: tuple[int, ...] = ()

# Paddle's ring ids of a legacy tensor-parallel program (TensorParallelOptimizer's).
MP_RING, GLOBAL_RING, DP_RING = 0, 1, 2


def group_size(group, nranks: int) -> int:
    """How many ranks ``group`` (a node's ``group`` attribute) has in a job of ``nranks``."""
    return len(group) if group else nranks


def check_group(group, nranks: int | None = None) -> tuple[int, ...]:
    """``group`` as a tuple of distinct ranks in increasing order; a ValueError says what is wrong."""
    ranks = tuple(int(r) for r in group)
    if list(ranks) != sorted(set(ranks)) or any(r < 0 for r in ranks):
        raise ValueError(f"group {ranks} must list distinct ranks >= 0 in increasing order")
    if nranks is not None and any(r >= nranks for r in ranks):
        raise ValueError(f"group {ranks} names a rank beyond the job's {nranks}")
    return ranks


@dataclass(frozen=True)
class RankLayout:
    """The ranks of a job of ``nranks`` as ``nranks // mp_degree`` data-parallel replicas of a model
    sharded over ``mp_degree`` ranks, seen from ``rank``."""

    nranks: int = 1
    rank: int = 0
    mp_degree: int = 1
    rings: tuple = ()  # ((ring id, global ranks), ...): Paddle's groups; () the legacy ring numbering

    def __post_init__(self):
        if self.mp_degree < 1 or self.nranks % self.mp_degree:
            raise ConfigError(f"mp_degree {self.mp_degree} must be >= 1 and divide the number of ranks "
                              f"{self.nranks}")
        if not 0 <= self.rank < self.nranks:
            raise ConfigError(f"rank {self.rank} is not one of the {self.nranks} ranks")

    @property
    def dp_degree(self) -> int:
        return self.nranks // self.mp_degree

    @property
    def mp_rank(self) -> int:
        return self.rank % self.mp_degree

    def _whole(self, ranks: tuple[int, ...]) -> tuple[int, ...]:
        return ALL_RANKS if len(ranks) == self.nranks else ranks

    def mp_group(self) -> tuple[int, ...]:
        first = self.rank - self.mp_rank
        return self._whole(tuple(range(first, first + self.mp_degree)))

    def dp_group(self) -> tuple[int, ...]:
        return self._whole(tuple(range(self.mp_rank, self.nranks, self.mp_degree)))

    def ring(self, ring_id: int) -> tuple[int, ...]:
        """The group of Paddle's ring ``ring_id``; a KeyError for a ring the layout does not have."""
        if self.rings:
            return self._whole(tuple(dict(self.rings)[ring_id]))
        if ring_id == MP_RING:
            return self.mp_group() if self.mp_degree > 1 else ALL_RANKS
        if ring_id == GLOBAL_RING:
            return ALL_RANKS
        if ring_id == DP_RING:
            return self.dp_group()
        raise KeyError(ring_id)

    def ring_names(self) -> str:
        """The rings this layout maps, for messages."""
        if self.rings:
            return ", ".join(f"{ring_id}: ranks {list(ranks)}" for ring_id, ranks in self.rings)
        return "0: model parallel, 1: global, 2: data parallel"
