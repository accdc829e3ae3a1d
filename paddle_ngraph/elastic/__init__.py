"""Elastic training, after Horovod's: keep training on the survivors after a rank dies.

``State`` holds what a step needs to be repeated exactly and its last commit; ``run`` wraps the
training function and, when a rank is lost, shrinks the group, restores the commit and calls the
function again; with ``max_ranks`` and a host ``discovery``, new ranks join at a commit.
``rank()`` and ``size()`` are this process's place in the current group.
Needs ``mpirun --with-ft ulfm`` (docs/elastic.md).
"""
from ..errors import RankLostError, TooFewRanksError
from .group import current_rank as rank
from .group import current_size as size
from .resize import accumulate_steps
from .run import run
from .sampler import ElasticBatchSampler
from .state import State

__all__ = ["State", "ElasticBatchSampler", "run", "rank", "size", "accumulate_steps", "RankLostError", "TooFewRanksError"]
