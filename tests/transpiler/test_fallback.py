"""The fallback: ops the engine lacks stay Paddle ops between engine segments, and the program
trains exactly as Paddle's executor trains it, in both IRs and on both backends."""
import numpy as np
import pytest

import paddle_ngraph
from paddle_ngraph.errors import ConfigError, UnsupportedOpsError
from paddle_ngraph.frontend import decode
from paddle_ngraph.transpiler.engine_op import is_engine_op
from paddle_ngraph.transpiler.segments import plan_segments

import fallback_models as fm
from harness import IRS, assert_trained_close, ir_guard

STEPS, BATCH = 3, 8


@pytest.fixture
def hide_converters():
    """Makes the engine lack some op types for a test: ``hide_converters(*op_types)`` removes them from the
    converter table; the whole table is put back after the test, in its order (docs/OPS.md is
    generated from that order, so monkeypatch.delitem, which re-appends, would reorder it)."""
    from paddle_ngraph.frontend import OP_TABLE

    saved = dict(OP_TABLE)

    def hide(*op_types):
        for op_type in op_types:
            del OP_TABLE[op_type]

    yield hide
    OP_TABLE.clear()
    OP_TABLE.update(saved)
MATMUL_OPS = {"pd_op.matmul", "matmul_v2", "mul", "pd_op.matmul_grad", "matmul_v2_grad", "mul_grad"}


def op_types(program) -> list[str]:
    if hasattr(program, "global_block") and hasattr(program.global_block().ops[0], "name"):
        return [op.name() for op in program.global_block().ops]
    return [op.type for op in program.global_block().ops]


def check_equal(middle, optimizer, ir, backend):
    xs, ys = fm.data(STEPS, BATCH)
    with ir_guard(ir):
        _, ref_losses, ref_params = fm.train(middle, optimizer, xs, ys)
        main, losses, params = fm.train(middle, optimizer, xs, ys, transpile={"backend": backend})
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-4, atol=1e-6)
    assert sorted(params) == sorted(ref_params)
    for name in params:
        assert_trained_close(params[name], ref_params[name], optimizer, name, lr=0.1)
    return op_types(main)


@pytest.mark.parametrize("ir", IRS)
def test_custom_operator_between_linear_layers(ir, backend):
    types = check_equal("custom", "sgd", ir, backend)
    # The custom operator and its gradient stay Paddle ops; the Linear layers run on the engine.
    assert any(t.endswith("pdng_signed_square") for t in types)
    assert any(t.endswith("pdng_signed_square_grad") for t in types)
    assert not MATMUL_OPS & set(types), types
    assert sum(map(is_engine_op, types)) == 3


@pytest.mark.parametrize("ir", IRS)
def test_optimizer_update_left_to_paddle(ir, backend):
    types = check_equal("logcumsumexp", "adagrad", ir, backend)
    assert sum(t in ("adagrad", "pd_op.adagrad_") for t in types) == 4


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_parameter_whose_gradient_comes_from_paddle(ir, optimizer, backend):
    check_equal("param_logcumsumexp", optimizer, ir, backend)


@pytest.mark.parametrize("ir", IRS)
def test_cond_sub_block(ir, backend):
    if ir == "legacy":
        pytest.skip("Paddle 3.3.1's static.nn.cond cannot build legacy programs (logical_not refuses a Variable)")
    types = check_equal("cond", "momentum", ir, backend)
    assert types.count("pd_op.if") == 2  # forward and backward


@pytest.mark.parametrize("ir", IRS)
def test_fallback_false_refuses(ir):
    with ir_guard(ir):
        main, _, _ = fm.build("logcumsumexp")
        with pytest.raises(UnsupportedOpsError, match="logcumsumexp"):
            paddle_ngraph.transpile(main, backend="INTERPRETER", fallback=False)
        assert "ngraph_engine" not in " ".join(op_types(main))  # refused before any change


@pytest.mark.parametrize("option", [dict(zero_stage=1), dict(accumulate_steps=2), dict(localsgd_k_steps=2)])
def test_whole_program_options_refused_with_fallback(option):
    with ir_guard("pir"):
        main, _, _ = fm.build("logcumsumexp")
        with pytest.raises(ConfigError, match=r"pd_op.logcumsumexp, pd_op.logcumsumexp_grad"):
            paddle_ngraph.transpile(main, backend="INTERPRETER", **option)


# --- the plan itself ---------------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
def test_plan_of_custom_operator(ir):
    with ir_guard(ir):
        main, _, _ = fm.build("custom")
        plan = plan_segments(decode(main))
    assert [op.type.split(".")[-1] for op in plan.fallback] == ["pdng_signed_square", "pdng_signed_square_grad"]
    custom, custom_grad = plan.fallback
    first, middle, last = plan.segments
    # The first Linear's output goes to the custom op; the second segment gives Paddle the custom
    # op's output gradient (and the loss's input, for the mean kept for fetching); the values the
    # last segment needs from earlier segments are handed over in memory.
    assert first.outputs == custom.input_names()
    assert set(custom_grad.input_names()) - set(custom.input_names()) - set(custom.output_names()) <= set(middle.outputs)
    assert not last.outputs and set(last.handed_in) <= set(first.handed_out) | set(middle.handed_out)
    assert last.after and not first.after
    assert not any(seg.allreduce for seg in plan.segments)  # the updates are on the engine


def _metric_of_a_parameter_program():
    """x -> Linear -> logcumsumexp (no converter) -> Linear -> loss, and the mean of the head's
    weight as a metric: a forward sink kept in Paddle, next to the second segment, reading the
    parameter the third segment (after logcumsumexp_grad) updates."""
    import paddle

    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        paddle.seed(5)
        x = paddle.static.data("x", [BATCH, fm.FEATURES], "float32")
        y = paddle.static.data("y", [BATCH, 1], "int64")
        head = paddle.nn.Linear(fm.HIDDEN, fm.CLASSES)
        logits = head(paddle.logcumsumexp(paddle.nn.Linear(fm.FEATURES, fm.HIDDEN)(x), axis=1))
        loss = paddle.mean(paddle.nn.functional.cross_entropy(logits, y))
        metric = paddle.mean(head.weight)
        paddle.optimizer.SGD(0.5).minimize(loss)
    return main, startup, loss, metric


@pytest.mark.parametrize("ir", IRS)
def test_a_sink_reading_a_parameter_runs_before_the_segment_updating_it(ir, backend):
    """Paddle's executor orders ops by the variables they read and write; the engine updates the
    parameter in place, so the segment updating it takes the sink's output as an order input, and
    the fetched metric is Paddle's, step after step."""
    import paddle

    xs, ys = fm.data(4, BATCH)
    fetched = []
    for transpiled in (False, True):
        with ir_guard(ir):
            main, startup, loss, metric = _metric_of_a_parameter_program()
            if transpiled:
                view = decode(main)
                plan = plan_segments(view)
                sink = next(op for op in plan.kept if op.type in ("reduce_mean", "pd_op.mean")
                            and any(view.vars[n].persistable for n in op.input_names() if n in view.vars))
                assert len(plan.segments) == 3 and set(sink.output_names()) & set(plan.segments[-1].after)
            exe = paddle.static.Executor(paddle.CPUPlace())
            scope = paddle.static.Scope()
            with paddle.static.scope_guard(scope):
                exe.run(startup)
                if transpiled:
                    paddle_ngraph.transpile(main, backend=backend)
                fetched.append([[float(v) for v in exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss, metric])]
                                for x, y in zip(xs, ys)])
    np.testing.assert_allclose(fetched[1], fetched[0], rtol=1e-5, atol=1e-6)
    assert len({m for _, m in fetched[0]}) > 1  # the metric moves: a stale read would show


@pytest.mark.parametrize("ir", IRS)
def test_plan_averages_gradients_of_updates_left_to_paddle(ir):
    with ir_guard(ir):
        main, _, _ = fm.build("param_logcumsumexp", "adagrad")
        view = decode(main)
        plan = plan_segments(view)
    updates = [op for op in plan.fallback if "adagrad" in op.type]
    grads = {op.inputs["grad"][0] for op in updates}
    averaged = [n for seg in plan.segments for n in seg.allreduce]
    assert sorted(averaged) == sorted(grads) and len(averaged) == len(set(averaged)) == 5  # exactly once each
    # The parameter whose gradient a Paddle op (logcumsumexp_grad) makes has a segment of its own,
    # just before its update.
    alone = [seg for seg in plan.segments if seg.before_op is not None]
    assert len(alone) == 1 and not alone[0].ops and "adagrad" in alone[0].before_op.type


def test_release_frees_the_engines():
    import paddle

    with ir_guard("pir"):
        main, startup, _ = fm.build("custom")
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            paddle.static.Executor(paddle.CPUPlace()).run(startup)
            paddle_ngraph.transpile(main, backend="INTERPRETER")
            ids = [op.attrs()["engine_id"] for op in main.global_block().ops if is_engine_op(op.name())]
            assert len(ids) == 3 and {e.id for e in paddle_ngraph.engines()} >= set(ids)
            assert paddle_ngraph.release(main) == 3
            xs, ys = fm.data(1, BATCH)
            with pytest.raises(Exception, match="not known in this process"):
                paddle.static.Executor(paddle.CPUPlace()).run(main, feed={"x": xs[0], "y": ys[0]})


@pytest.mark.parametrize("name, hidden", [
    ("squeezenet1_1", ["pd_op.squeeze", "pd_op.squeeze_grad"]),            # the classifier head
    pytest.param("mobilenet_v3_small", ["pd_op.hardswish", "pd_op.hardswish_grad"],  # dozens of segments
                 marks=pytest.mark.slow),
])
def test_zoo_model_with_ops_left_to_paddle(name, hidden, hide_converters):
    """A model whose op types the engine is made to lack (hidden from the converter table) trains
    as Paddle trains it, with those ops in Paddle between engine segments (float64, as the zoo
    tests)."""
    import paddle

    from paddle_ngraph.zoo import vision

    hide_converters(*hidden)
    results = []
    with ir_guard("pir"):
        for ours in (False, True):
            paddle.seed(1)
            main, startup, loss = vision.build(name, dtype="float64")
            scope = paddle.static.Scope()
            with paddle.static.scope_guard(scope):
                exe = paddle.static.Executor(paddle.CPUPlace())
                exe.run(startup)
                if ours:
                    paddle_ngraph.transpile(main, backend="CPU")
                    types = op_types(main)
                    assert sum(map(is_engine_op, types)) >= 3
                    assert set(hidden) <= set(types)
                results.append([float(exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss])[0])
                                for x, y in vision.batches(name, 3, dtype="float64")])
            if ours:
                paddle_ngraph.release(main)
    np.testing.assert_allclose(results[1], results[0], rtol=1e-9)


@pytest.mark.parametrize("backend_name", ["INTERPRETER", "CPU"])
def test_shape_grads_whose_forward_ops_paddle_runs(backend_name, hide_converters):
    """Legacy reshape2, unsqueeze2 and flatten left to Paddle (hidden from the converter table), their
    grads on the engine: each grad reads X's dims from Paddle's XShape variable, declared [0] + X's
    dims (Paddle's AMP leaves the forward ops of bf16 values to Paddle this way). Trains as Paddle."""
    import paddle

    hide_converters("reshape2", "unsqueeze2", "flatten_contiguous_range")
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal([8, 12]).astype(np.float32), rng.integers(0, 3, [8, 1])
    runs = []
    with ir_guard("legacy"):
        for ours in (False, True):
            main, startup = paddle.static.Program(), paddle.static.Program()
            with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
                h = paddle.static.nn.fc(paddle.static.data("x", [None, 12], "float32"), 16)
                h = paddle.flatten(paddle.unsqueeze(paddle.reshape(h, [-1, 4, 4]), [1]), 1)  # [N, 16] again
                logits = paddle.static.nn.fc(h, 3)
                loss = paddle.nn.functional.cross_entropy(logits, paddle.static.data("y", [None, 1], "int64")).mean()
                paddle.optimizer.SGD(0.1).minimize(loss)
            with paddle.static.scope_guard(paddle.static.Scope()):
                exe = paddle.static.Executor(paddle.CPUPlace())
                paddle.seed(2)
                exe.run(startup)
                if ours:
                    paddle_ngraph.transpile(main, backend=backend_name)
                    types = op_types(main)
                    assert {"reshape2", "unsqueeze2", "flatten_contiguous_range"} <= set(types), types
                    assert not {"reshape2_grad", "unsqueeze2_grad", "flatten_contiguous_range_grad"} & set(types)
                runs.append([float(exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss])[0]) for _ in range(STEPS)])
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-5)


@pytest.mark.parametrize("backend_name", ["INTERPRETER", "CPU"])
def test_shape_ops_whose_grads_paddle_runs(backend_name, hide_converters):
    """The other way round: legacy reshape2 and unsqueeze2 convertible, their grads left to Paddle
    (hidden here; a transformer's grads with two dynamic dims are refused). Paddle's grad kernels
    take X's dims from XShape, which the engine cannot make, so the forward ops stay with Paddle
    too; X's gradients keep their [batch, steps, features] shape and the program trains as Paddle."""
    import paddle

    hide_converters("reshape2_grad", "unsqueeze2_grad")
    rng = np.random.default_rng(5)
    x = rng.standard_normal([2, 3, 4]).astype(np.float32)
    runs = []
    with ir_guard("legacy"):
        for ours in (False, True):
            main, startup = paddle.static.Program(), paddle.static.Program()
            with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
                h = paddle.static.data("x", [None, None, 4], "float32")
                w = paddle.create_parameter([4], "float32", default_initializer=paddle.nn.initializer.Constant(0.5))
                h = paddle.unsqueeze(paddle.reshape(h * w, [-1, 4]), [1])  # [N * T, 1, 4]
                loss = paddle.mean(paddle.static.nn.fc(h, 1, num_flatten_dims=2))
                paddle.optimizer.SGD(0.1).minimize(loss)
            with paddle.static.scope_guard(paddle.static.Scope()):
                exe = paddle.static.Executor(paddle.CPUPlace())
                paddle.seed(2)
                exe.run(startup)
                if ours:
                    plan = plan_segments(decode(main))
                    paddle_ngraph.transpile(main, backend=backend_name)
                    left = {op.type: plan.reason(op) for op in plan.fallback}
                    assert left["reshape2"][0] == "refused" and "XShape" in left["reshape2"][1], left
                    assert left["unsqueeze2"][0] == "refused" and "XShape" in left["unsqueeze2"][1], left
                runs.append([float(exe.run(main, feed={"x": x}, fetch_list=[loss])[0]) for _ in range(STEPS)])
                runs.append(np.array(paddle.static.global_scope().find_var(w.name).get_tensor()))
    np.testing.assert_allclose(runs[2], runs[0], rtol=1e-5)
    np.testing.assert_allclose(runs[3], runs[1], rtol=1e-5)


# --- LoD (legacy sequence ops) ------------------------------------------------------------------------
def test_ops_making_lod_tensors_stay_with_paddle(backend):
    """The engine's outputs carry no LoD: a Linear on a LoD input, run by the engine, handed
    sequence_pool a tensor without offsets (Paddle: "does not contain LoD information"). The ops
    that make LoD tensors stay with Paddle; the rest of the program runs on the engine and trains
    as Paddle trains it. Legacy IR only: PIR programs have no LoD levels."""
    with ir_guard("legacy"):
        _, ref_losses, ref_params = fm.lod_train(STEPS)
        main, losses, params = fm.lod_train(STEPS, transpile={"backend": backend})
        plan = plan_segments(decode(fm.lod_program()[0]))
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-7)
    for name in ref_params:
        assert_trained_close(params[name], ref_params[name], "sgd", name, lr=0.1)
    left = {op.type: plan.reason(op) for op in plan.fallback}
    # mul and elementwise_add (fc), tanh and their gradients make LoD tensors; sequence_pool has no converter.
    for op_type in ("mul", "elementwise_add", "tanh", "tanh_grad", "elementwise_add_grad"):
        category, detail = left[op_type]
        assert category == "variable kind" and "LoD tensor" in detail, (op_type, detail)
    assert left["sequence_pool"][0] == "no converter"
    types = op_types(main)
    assert sum(map(is_engine_op, types)) >= 1 and "sgd" not in types  # the second Linear, loss and updates


def test_lod_fed_to_a_variable_declared_without_it(backend):
    """Paddle's dist_text_classification declares its words ``paddle.static.data("words", [-1], "int64")``
    (lod_level 0) and feeds LoD tensors: Paddle's embedding passes the offsets on to sequence_pool.
    The values from the feed to a sequence op are taken as LoD tensors, so the embedding stays with
    Paddle (it ran on the engine, and sequence_pool found no LoD), and the program trains as Paddle's."""
    import paddle
    from paddle.base import core

    lengths = [[2, 3], [1, 4], [3, 3]]
    rng = np.random.default_rng(6)
    runs = []
    with ir_guard("legacy"):
        for ours in (False, True):
            main, startup = paddle.static.Program(), paddle.static.Program()
            main.random_seed = startup.random_seed = 1
            with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
                words = paddle.static.data("words", [-1], "int64")
                emb = paddle.static.nn.embedding(words, size=[50, 8])
                pooled = paddle.static.nn.sequence_lod.sequence_pool(emb, "sum")
                loss = paddle.mean(paddle.static.nn.fc(pooled, 1))
                paddle.optimizer.SGD(0.1).minimize(loss)
            with paddle.static.scope_guard(paddle.static.Scope()):
                exe = paddle.static.Executor(paddle.CPUPlace())
                exe.run(startup)
                if ours:
                    plan = plan_segments(decode(main))
                    left = {op.type: plan.reason(op) for op in plan.fallback}
                    assert left["lookup_table_v2"][0] == "variable kind", left
                    paddle_ngraph.transpile(main, backend=backend)
                    assert any(is_engine_op(t) for t in op_types(main))
                losses = []
                for step, sequence_lengths in enumerate(lengths):
                    feed = core.LoDTensor()
                    feed.set(np.random.default_rng(step).integers(0, 50, sum(sequence_lengths)).astype("int64"),
                             paddle.CPUPlace())
                    feed.set_recursive_sequence_lengths([sequence_lengths])
                    losses.append(float(exe.run(main, feed={"words": feed}, fetch_list=[loss])[0]))
                runs.append(losses)
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-5)


def _time_major_lstm_program():
    """A time-major LSTM: its rnn op (no converter) reads the initial states from fill_constant ops,
    the first ops of the program, which Paddle keeps for it: no engine segment before it."""
    import paddle

    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        paddle.seed(2)
        x = paddle.static.data("x", [5, BATCH, fm.FEATURES], "float32")
        out, _ = paddle.nn.LSTM(fm.FEATURES, fm.HIDDEN, time_major=True)(x)
        loss = paddle.mean(paddle.nn.Linear(fm.HIDDEN, 1)(out))
        paddle.optimizer.SGD(0.5).minimize(loss)
    return main, startup, loss


@pytest.mark.parametrize("ir", IRS)
def test_constants_kept_for_paddle_ops_make_no_segment_of_their_own(ir, backend):
    import paddle

    rng = np.random.default_rng(0)
    xs = rng.standard_normal((STEPS, 5, BATCH, fm.FEATURES)).astype("float32")
    runs = []
    for transpiled in (False, True):
        with ir_guard(ir):
            main, startup, loss = _time_major_lstm_program()
            if transpiled:
                plan = plan_segments(decode(main))
                assert [op.type.split(".")[-1] for op in plan.fallback if "rnn" in op.type] == ["rnn", "rnn_grad"]
                assert all(seg.inputs or seg.handed_in for seg in plan.segments)
            exe = paddle.static.Executor(paddle.CPUPlace())
            scope = paddle.static.Scope()
            with paddle.static.scope_guard(scope):
                exe.run(startup)
                if transpiled:
                    paddle_ngraph.transpile(main, backend=backend)
                runs.append([float(exe.run(main, feed={"x": x}, fetch_list=[loss])[0]) for x in xs])
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("rows", [0, 3])
def test_engine_outputs_keep_their_shape_with_an_empty_batch(ir, rows):
    """Values an engine hands to Paddle (the input of a Paddle op, a fetched value) have Paddle's
    shape, also when a dimension is 0: a batch of no rows gives (0, 3), not an empty vector."""
    import paddle

    def build():
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [-1, 4], "float32")
            h = paddle.nn.functional.relu(paddle.nn.Linear(4, 3)(x))
            return main, startup, [h, paddle.logcumsumexp(h, axis=1)]  # logcumsumexp: no converter

    feed = {"x": np.arange(rows * 4, dtype="float32").reshape(rows, 4)}
    exe = paddle.static.Executor(paddle.CPUPlace())
    with ir_guard(ir):
        main, startup, fetch = build()
        with paddle.static.scope_guard(paddle.static.Scope()):
            exe.run(startup)
            expected = exe.run(main, feed=feed, fetch_list=fetch)
            paddle_ngraph.transpile(main, fetch_list=fetch)
            got = exe.run(main, feed=feed, fetch_list=fetch)
    assert "logcumsumexp" in " ".join(op_types(main))
    for value, reference in zip(got, expected):
        assert value.shape == reference.shape == (rows, 3)
        np.testing.assert_allclose(value, reference, rtol=1e-6)


@pytest.mark.parametrize("ir", IRS)
def test_einsum_left_to_paddle_between_segments(ir):
    """einsum has no converter. In PIR it also makes an inner cache and an xshape, vectors that
    builtin.split ops unpack and whose elements may hold no memory: the next segment waits for
    einsum's result, not for those (an engine input holding no memory failed the step)."""
    import paddle

    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((4, 6)).astype("float32") for _ in range(STEPS)]
    ys = [rng.integers(0, 3, (4, 1)).astype("int64") for _ in range(STEPS)]
    runs = []
    with ir_guard(ir):
        for ours in (False, True):
            main, startup = paddle.static.Program(), paddle.static.Program()
            with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
                x = paddle.static.data("x", [4, 6], "float32")
                y = paddle.static.data("y", [4, 1], "int64")
                h = paddle.nn.Linear(6, 6)(x)
                outer = paddle.reshape(paddle.einsum("bi,bj->bij", h, h), [4, 36])
                loss = paddle.mean(paddle.nn.functional.cross_entropy(paddle.nn.Linear(36, 3)(outer), y))
                paddle.optimizer.SGD(0.05).minimize(loss)
            exe = paddle.static.Executor(paddle.CPUPlace())
            with paddle.static.scope_guard(paddle.static.Scope()):
                paddle.seed(4)
                exe.run(startup)
                if ours:
                    left = {r["op_type"] for r in paddle_ngraph.unsupported_ops(main)}
                    assert {"einsum", "einsum_grad"} <= left or {"pd_op.einsum", "pd_op.einsum_grad"} <= left, left
                    paddle_ngraph.transpile(main)
                runs.append([float(exe.run(main, feed={"x": x_, "y": y_}, fetch_list=[loss])[0])
                             for x_, y_ in zip(xs, ys)])
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-5, atol=1e-6)
