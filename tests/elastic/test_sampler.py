"""ElasticBatchSampler: a global position in the epoch, dealt to groups of any size."""
import numpy as np
import paddle
import pytest

from paddle_ngraph import elastic
from paddle_ngraph.errors import ConfigError


class Numbers(paddle.io.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.array([i], dtype=np.int64)


def _steps(sampler, size):
    """The group's steps from the sampler's position: per step, each rank's batch."""
    return list(zip(*[sampler.batches(rank, size) for rank in range(size)]))


def test_a_group_walks_the_epoch_in_order_each_rank_its_slice():
    sampler = elastic.ElasticBatchSampler(Numbers(12), batch_size=2)
    assert _steps(sampler, 3) == [([0, 1], [2, 3], [4, 5]), ([6, 7], [8, 9], [10, 11])]


def test_after_a_resize_the_rest_of_the_epoch_is_dealt_once_to_the_new_group():
    sampler = elastic.ElasticBatchSampler(Numbers(40), batch_size=2, shuffle=True, seed=5)
    order = sampler.order()
    assert sorted(order) == list(range(40)) and order != list(range(40))
    first = _steps(sampler, 4)[:3]
    for _ in first:
        sampler.processed += 2 * 4  # what record_batch() adds on a group of 4
    rest = _steps(sampler, 3)
    seen = [i for step in first + rest for batch in step for i in batch]
    # 24 samples on 4 ranks, then 16 left on 3 ranks: 2 full steps of 6 and one of 4 filled from the start.
    assert seen[:40] == order
    assert seen[40:] == order[:2]
    assert len(rest) == 3


def test_drop_last_drops_a_step_the_rest_does_not_fill():
    sampler = elastic.ElasticBatchSampler(Numbers(10), batch_size=2, drop_last=True)
    assert _steps(sampler, 2) == [([0, 1], [2, 3]), ([4, 5], [6, 7])]
    assert len(sampler) == 5  # one process here: batches of 2, no step left unfilled


def test_epochs_reshuffle_and_set_epoch_starts_over():
    sampler = elastic.ElasticBatchSampler(Numbers(16), batch_size=4, shuffle=True)
    first = sampler.order()
    sampler.processed = 8
    sampler.set_epoch(1)
    assert sampler.processed == 0 and sampler.order() != first


@pytest.mark.usefixtures("dynamic_mode")
def test_the_position_is_committed_and_restored_with_the_state(tmp_path):
    model = paddle.nn.Linear(1, 1)
    sampler = elastic.ElasticBatchSampler(Numbers(20), batch_size=5)
    state = elastic.State(model, paddle.optimizer.SGD(0.1, parameters=model.parameters()),
                          checkpoint_dir=str(tmp_path), sampler=sampler, epoch=0)
    loader = paddle.io.DataLoader(Numbers(20), batch_sampler=sampler)
    batches = iter(loader)
    next(batches)
    sampler.record_batch()  # one process: 5 samples
    state.commit(save=True)
    next(batches)
    sampler.record_batch()
    assert sampler.processed == 10
    state.restore()
    assert sampler.processed == 5
    assert [b.numpy().ravel().tolist() for b in loader] == [[5, 6, 7, 8, 9], [10, 11, 12, 13, 14],
                                                             [15, 16, 17, 18, 19]]
    other = elastic.ElasticBatchSampler(Numbers(20), batch_size=5)
    fresh = elastic.State(model, None, sampler=other, epoch=0)
    fresh.load(str(tmp_path))
    assert other.state_dict() == {"epoch": 0, "processed": 5}


def test_a_sampler_without_a_position_is_refused():
    with pytest.raises(ConfigError, match="sampler must keep a position"):
        elastic.State(paddle.nn.Linear(1, 1), None, sampler=paddle.io.BatchSampler(Numbers(4), batch_size=2))
