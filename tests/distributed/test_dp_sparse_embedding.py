"""Sparse embeddings (is_sparse=True) on 2 ranks under mpirun train like Paddle's one process on
the concatenated batch (parameters within 1e-5, ranks bitwise equal): legacy programs, whose
selected-rows gradient the engine computes dense, averages and applies (SGD, with L2Decay and
padding_idx); PIR programs, whose gradient Paddle already makes dense (SGD, Momentum, Adam). Where
the dense form would differ from Paddle's sparse kernel (legacy Momentum, Adam), transpile raises a
ConfigError on every rank.
Plain Paddle's sparse training is the reference. Dygraph's Embedding(sparse=True):
test_dygraph_dp.py."""
import os
import sys

import numpy as np
import pytest

from harness import ir_guard
from ranks import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "transpiler"))
import sparse_models as sm  # noqa: E402

# Every test here starts ranks (tests/ranks.py).
pytestmark = pytest.mark.distributed

STEPS, BATCH, NRANKS = 4, 8, 2
# (ir, optimizer, padding_idx, vocabulary): ids come from [0, 12) of a vocabulary of 30, or from all of
# dist_word2vec's 2074 words (many distinct rows in a batch)
CASES = [
    ("legacy", "sgd", None, 30),
    ("legacy", "sgd", None, 2074),
    ("legacy", "sgd_l2", None, 30),
    ("legacy", "sgd", 3, 30),        # Paddle's sparse gradient keeps the padding row's rows
    ("pir", "sgd", None, 30),
    ("pir", "momentum", None, 30),
    ("pir", "adam", None, 30),
]
# Paddle's sparse kernels of these differ from their dense forms (transpiler/sparse_gradients.py).
REFUSED = [("legacy", "momentum", None, 30), ("legacy", "adam", None, 30), ("legacy", "adam_lazy", None, 30)]


def vocabulary(size: int):
    """The model's vocabulary and the range of its ids: [0, IDS_USED) of 30, or all of a larger one."""
    sm.VOCAB, sm.IDS_USED = size, (12 if size == 30 else size)


def train_on_this_rank(cases, refused):
    """On every rank: each case on its share of every batch on the engine ({case: (losses,
    parameters)}), and for each refused case the error transpile raised ({case: (type, message)})."""
    import paddle

    paddle.enable_static()
    rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    trained, errors = {}, {}
    for ir, opt, padding_idx, vocab in cases:
        vocabulary(vocab)
        with ir_guard(ir):
            # Each rank initializes differently: the start-up broadcast makes them rank 0's (seed 1).
            trained[ir, opt, padding_idx, vocab] = sm.train(opt, sm.data(STEPS, BATCH), padding_idx=padding_idx,
                                                            transpile={}, seed=1 + rank, rank=rank, nranks=size)
    for ir, opt, padding_idx, vocab in refused:
        vocabulary(vocab)
        with ir_guard(ir):
            try:
                sm.train(opt, sm.data(STEPS, BATCH), padding_idx=padding_idx, transpile={}, rank=rank, nranks=size)
                errors[ir, opt, padding_idx, vocab] = None
            except Exception as error:  # noqa: BLE001  (brought back to the test, which checks it)
                errors[ir, opt, padding_idx, vocab] = (type(error).__name__, str(error))
    return trained, errors


@pytest.fixture(scope="module")
def by_rank():
    return run_ranks(train_on_this_rank, NRANKS, CASES, REFUSED).results


@pytest.mark.parametrize("ir, opt, padding_idx, vocab", CASES)
def test_ranks_equal_one_process(by_rank, ir, opt, padding_idx, vocab, monkeypatch):
    monkeypatch.setattr(sm, "VOCAB", sm.VOCAB)
    monkeypatch.setattr(sm, "IDS_USED", sm.IDS_USED)
    vocabulary(vocab)
    feeds = sm.data(STEPS, BATCH)
    if padding_idx is not None:
        assert any((f[f"w{k}"] == padding_idx).any() for f in feeds for k in range(sm.CONTEXT))
    with ir_guard(ir):
        ref_losses, ref = sm.train(opt, feeds, padding_idx=padding_idx)
    ranks = [trained[ir, opt, padding_idx, vocab] for trained, _ in by_rank]
    np.testing.assert_allclose(np.mean([losses for losses, _ in ranks], axis=0), ref_losses, rtol=1e-5)
    assert sorted(ranks[0][1]) == sorted(ref) and sm.TABLE in ref
    for name, value in ref.items():
        for _, params in ranks[1:]:
            assert np.array_equal(params[name], ranks[0][1][name]), f"{name}: ranks differ"
        np.testing.assert_allclose(ranks[0][1][name], value, rtol=0, atol=1e-5, err_msg=name)
    # Rows no id reaches: moved only by what every row gets (weight decay, PIR momentum's velocity).
    if sm.IDS_USED < sm.VOCAB:
        unused = slice(sm.IDS_USED, None)
        np.testing.assert_allclose(ranks[0][1][sm.TABLE][unused], ref[sm.TABLE][unused], rtol=0, atol=1e-6)


@pytest.mark.parametrize("ir, opt, padding_idx, vocab", REFUSED)
def test_refused_on_every_rank(by_rank, ir, opt, padding_idx, vocab):
    for _, errors in by_rank:
        kind, message = errors[ir, opt, padding_idx, vocab]
        assert kind == "ConfigError", message
        assert f"gradient '{sm.TABLE}@GRAD' of the sparse embedding table '{sm.TABLE}'" in message
        assert f"op '{opt.split('_')[0]}'" in message and f"on {NRANKS} ranks" in message
