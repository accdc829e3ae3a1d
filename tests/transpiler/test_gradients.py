"""transpiler/gradients.py: each update's raw gradient, found through Paddle's clipping and
regularization ops, so that N ranks average what one process on the whole batch clips."""
import pytest

from paddle_ngraph.frontend import decode
from paddle_ngraph.transpiler.gradients import clipped_updates, raw_gradients

import clip_models
from harness import ir_guard


@pytest.mark.parametrize("clip", sorted(clip_models.CLIPS))
@pytest.mark.parametrize("decay", ["l1", "l2"])
def test_raw_gradient_is_what_backward_made(clip, decay):
    with ir_guard(clip_models.IR_OF[clip]):
        main, _, _ = clip_models.build(clip, decay)
        view = decode(main)
    updates = [op for op in view.ops if "param" in op.inputs and "grad" in op.inputs and op.role == "optimize"]
    found = raw_gradients(view, view.ops)
    assert len(updates) == 4 and set(found) == {id(u) for u in updates}
    for update in updates:
        producer, name = found[id(update)]
        assert name != update.inputs["grad"][0]
        # The raw gradient comes out of backward: a *_grad op, never a clipping or decay op.
        assert producer.type.split(".")[-1].endswith("_grad"), (producer.type, name)
        assert name in producer.output_names()
    assert clipped_updates(view, view.ops) == set(found)  # ZeRO-1 leaves these unsharded


def test_weight_decay_alone_is_walked_but_not_clipping():
    """Adam adds L2 decay as ops of its own: a raw gradient to average, but linear in it (ZeRO-1 slices it)."""
    import paddle

    with ir_guard("pir"):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [4, 3], "float32")
            loss = paddle.nn.Linear(3, 1)(x).mean()
            paddle.optimizer.Adam(0.1, weight_decay=paddle.regularizer.L2Decay(0.01)).minimize(loss)
        view = decode(main)
    assert len(raw_gradients(view, view.ops)) == 2 and clipped_updates(view, view.ops) == set()


def test_no_clipping_no_walk():
    """Without clipping, momentum applies its own L2 decay: the update reads the raw gradient."""
    import paddle

    with ir_guard("pir"):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [4, 3], "float32")
            paddle.optimizer.Momentum(0.1).minimize(paddle.nn.Linear(3, 1)(x).mean())
        view = decode(main)
    assert raw_gradients(view, view.ops) == {}
