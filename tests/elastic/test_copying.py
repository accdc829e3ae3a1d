"""The commit's copies over threads: every target ends equal to its source, whatever the batching."""
import numpy as np
import pytest

from paddle_ngraph.elastic.copying import BATCH_BYTES, CopyStream


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_copy_is_done_at_finish(threads):
    rng = np.random.default_rng(0)
    # Sizes around the batch size, so that some batches hold one array and some many.
    sizes = [BATCH_BYTES // 4 + 3, 17, 1, BATCH_BYTES // 8, 5000, BATCH_BYTES // 2, 0, 99]
    sources = [rng.standard_normal(n).astype(np.float32) for n in sizes] + [np.arange(7, dtype=np.int64)]
    targets = [np.zeros_like(s) for s in sources]
    stream = CopyStream(threads)
    for target, source in zip(targets, sources):
        stream.add(target, source)
    stream.finish()
    for target, source in zip(targets, sources):
        assert np.array_equal(target, source)


def test_a_failing_copy_is_raised_at_finish():
    stream = CopyStream(2)
    stream.add(np.zeros(3, np.float32), np.zeros(3, np.float64))  # casting="no": refused
    with pytest.raises(TypeError):
        stream.finish()
