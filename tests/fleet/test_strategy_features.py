"""Paddle's own DistributedStrategy features with strategy.ngraph (fleet/features.py), on 2 ranks under
the real mpirun and paddle.distributed.launch, against Paddle alone in one process on the
concatenated batch: gradient_merge (avg and sum), sharding stage 1, sync_batch_norm, fp16_allreduce,
lars and lamb; and the features it refuses, each with its reason."""
import os
import sys

import numpy as np
import paddle
import paddle.distributed.fleet as fleet
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import features_data as fd  # noqa: E402
from ranks import run_ranks  # noqa: E402

from paddle_ngraph.distributed.ccl import available as ccl_available  # noqa: E402
from paddle_ngraph.errors import ConfigError  # noqa: E402
from paddle_ngraph.fleet import features  # noqa: E402

WORKER = os.path.join(HERE, "features_worker.py")
# The worker must import this checkout's package (a worker's sys.path starts at its own folder).
ENV = {"PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}


def reference_optimizer(spec):
    inner = spec.get("inner")
    k, avg = spec.get("merge", (1, True))
    lr = fd.LR if avg else fd.LR * k  # the sum of k mean gradients = k times their mean
    opt = fd.optimizer(spec["optimizer"], lr)
    if inner == "lars":
        return features.lars_from(opt, dict(fleet.DistributedStrategy().lars_configs,
                                            **spec["strategy"]["lars_configs"]))
    if inner == "lamb":
        return features.lamb_from(opt, dict(fleet.DistributedStrategy().lamb_configs,
                                            **spec["strategy"]["lamb_configs"]))
    return opt


def reference(name, ir):
    """Paddle alone, one process: every update on the global batch (k global batches when merged)."""
    spec = fd.FEATURES[name]
    k, _ = spec.get("merge", (1, True))
    paddle.enable_static()
    guard = paddle.pir_utils.OldIrGuard() if ir == "legacy" else paddle.pir_utils.IrGuard()
    with guard:
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            paddle.seed(fd.SEED)
            loss = fd.build(spec["batch_norm"])
            reference_optimizer(spec).minimize(loss)
        scope = paddle.static.Scope()
        exe = paddle.static.Executor(paddle.CPUPlace())
        x, y = fd.data()
        with paddle.static.scope_guard(scope):
            exe.run(startup)
            per_update = fd.BATCH * fd.NRANKS * k
            for start in range(0, fd.STEPS * fd.BATCH * fd.NRANKS, per_update):
                exe.run(main, feed={"x": x[start:start + per_update], "y": y[start:start + per_update]},
                        fetch_list=[loss])
            return fd.state(main) if ir == "legacy" else _scope_state(scope, main)


def _scope_state(scope, program):
    with paddle.static.scope_guard(scope):
        return fd.state(program)


def train_on_ranks(cases, root, launcher="mpirun"):
    """{(name, ir): each rank's state} of ``cases``, trained one after the other in one job (the
    worker's --then): the job pays Paddle's import and the launcher's start-up once for them all."""
    argv, dirs = [], {}
    for name, ir in cases:
        dirs[name, ir] = root / f"{name}-{ir}"
        dirs[name, ir].mkdir()
        argv += [*(["--then"] if argv else []), "--feature", name, "--ir", ir, "--out", dirs[name, ir]]
    run_ranks(WORKER, fd.NRANKS, *argv, env=ENV, timeout=120 + 60 * len(cases),
              launcher="launch" if launcher == "launch" else "mpirun")
    return {case: [dict(np.load(out / f"rank{r}.npz")) for r in range(fd.NRANKS)] for case, out in dirs.items()}


def check(name, ir, ranks, rtol=1e-5, atol=1e-6):
    ref = reference(name, ir)
    assert sorted(ranks[0]) == sorted(ref) and ref, (sorted(ranks[0]), sorted(ref))
    for key in ref:
        np.testing.assert_array_equal(ranks[1][key], ranks[0][key], err_msg=f"{key} differs between ranks")
        np.testing.assert_allclose(ranks[0][key], ref[key], rtol=rtol, atol=atol, err_msg=key)
    return ranks, ref


MPIRUN_CASES = [("gradient_merge", "pir"), ("gradient_merge_sum", "legacy"), ("sharding", "pir"),
                ("sync_batch_norm", "pir"), ("sync_batch_norm", "legacy"), ("lars", "legacy"), ("lars", "pir"),
                ("lamb", "pir")]
FP16_CASE = ("fp16_allreduce", "pir")
LAUNCH_CASES = [("gradient_merge", "pir"), ("sharding", "pir")]


@pytest.fixture(scope="module")
def under_mpirun(tmp_path_factory):
    """Every case of mpirun (fp16_allreduce's too) trained in one job."""
    return train_on_ranks(MPIRUN_CASES + [FP16_CASE], tmp_path_factory.mktemp("mpirun"))


@pytest.fixture(scope="module")
def under_launch(tmp_path_factory):
    return train_on_ranks(LAUNCH_CASES, tmp_path_factory.mktemp("launch"), launcher="launch")


@pytest.mark.distributed
@pytest.mark.parametrize("name,ir", MPIRUN_CASES)
def test_feature_under_mpirun_equals_paddle_alone_on_the_concatenated_batch(under_mpirun, name, ir):
    check(name, ir, under_mpirun[name, ir])


@pytest.mark.distributed
def test_fp16_allreduce_keeps_ranks_bitwise_identical_and_close(under_mpirun):
    # 16-bit gradients on the wire: equal on every rank, near the float32 reference.
    check(*FP16_CASE, under_mpirun[FP16_CASE], rtol=2e-3, atol=2e-4)


@pytest.mark.distributed
@pytest.mark.skipif(not ccl_available(), reason="the ccl transport is not built")
@pytest.mark.parametrize("name", [name for name, _ in LAUNCH_CASES])
def test_feature_under_paddle_launch(under_launch, name):
    check(name, "pir", under_launch[name, "pir"])


def strategy_with(**attrs):
    strategy = fleet.DistributedStrategy()
    for k, v in attrs.items():
        setattr(strategy, k, v)
    return strategy


def test_mapping_and_precedence():
    strategy = strategy_with(gradient_merge=True, gradient_merge_configs={"k_steps": 4, "avg": False},
                             fp16_allreduce=True, sync_batch_norm=True)
    assert features.config_overrides(strategy) == {"accumulate_steps": 4, "accumulate_avg": False,
                                                  "compress": "fp16", "sync_batch_norm": True}
    strategy.ngraph = True
    strategy.ngraph_configs = {"accumulate_steps": 2}
    merged = features.merged_overrides(strategy)
    assert merged["accumulate_steps"] == 2 and merged["compress"] == "fp16"
    assert features.config_overrides(strategy_with(sharding=True)) == {"zero_stage": 1}


@pytest.mark.parametrize("attrs,message", [
    ({"sharding": True, "sharding_configs": {"stage": 2}}, "stage 1, ZeRO-1"),
    ({"sharding": True, "sharding_configs": {"mp_degree": 2}}, "mp_degree=2"),
])
def test_unmappable_configs_are_refused(attrs, message):
    with pytest.raises(ConfigError, match=message):
        features.config_overrides(strategy_with(**attrs))


def test_tensor_parallel_degree_maps_onto_mp_degree():
    """strategy.tensor_parallel configures paddle.distributed.split (static programs only);
    hybrid_configs' mp_degree serves both static programs and fleet.meta_parallel's dygraph layers."""
    tp = strategy_with(tensor_parallel=True, tensor_parallel_configs={"tensor_parallel_degree": 2})
    assert features.config_overrides(tp) == {"mp_degree": 2}
    hybrid = strategy_with(hybrid_configs={"mp_degree": 2})
    assert features.config_overrides(hybrid) == {"mp_degree": 2}
    assert features.unsupported_features(tp) == [] and features.unsupported_features(hybrid) == []
    assert any("strategy.tensor_parallel (it configures paddle.distributed.split in static programs" in f
               for f in features.unsupported_features(tp, dygraph=True))
    assert features.unsupported_features(hybrid, dygraph=True) == []
    assert features.unsupported_features(strategy_with(hybrid_configs={"mp_degree": 2, "pp_degree": 2}),
                                         dygraph=True) == ["strategy.hybrid_configs['pp_degree']=2"]
    both = strategy_with(tensor_parallel=True, tensor_parallel_configs={"tensor_parallel_degree": 4},
                         hybrid_configs={"mp_degree": 2})
    with pytest.raises(ConfigError, match="disagree"):
        features.config_overrides(both)


def test_mp_configs_that_swap_in_paddles_own_overlap_layers_are_refused_in_dygraph():
    """mp_async_allreduce (and the skip/fuse switches that go with it) make fleet.meta_parallel's
    linears run Paddle's own PyLayer with an asynchronous AllReduce instead of the mp_ops functions
    the engine captures: refused by name before the first forward, not a to_static error."""
    strategy = strategy_with(hybrid_configs={"mp_degree": 2})
    strategy.hybrid_configs["mp_configs"].mp_async_allreduce = True
    strategy.hybrid_configs["mp_configs"].mp_fused_linear_param_grad_add = True
    assert features.unsupported_features(strategy, dygraph=True) == [
        "strategy.hybrid_configs['mp_configs'].mp_async_allreduce=True",
        "strategy.hybrid_configs['mp_configs'].mp_fused_linear_param_grad_add=True"]
    assert features.unsupported_features(strategy) == []  # static programs do not read them
    with pytest.raises(ConfigError, match=r"mp_configs'\]\.mp_async_allreduce=True"):
        features.check_strategy(strategy, dygraph=True)
    plain = strategy_with(hybrid_configs={"mp_degree": 2, "mp_configs": {"sync_param": True}})
    assert features.unsupported_features(plain, dygraph=True) == []


def test_refused_features_name_their_reason():
    found = features.refused(strategy_with(amp=True, dgc=True))
    assert any(f.startswith("strategy.amp (mixed precision") for f in found)
    assert any(f.startswith("strategy.dgc (") for f in found)


def test_lars_needs_momentum_and_lamb_needs_adam():
    with pytest.raises(ConfigError, match="strategy.lars needs a Momentum"):
        features.inner_optimizer(paddle.optimizer.SGD(0.1), strategy_with(lars=True))
    with pytest.raises(ConfigError, match="strategy.lamb needs an Adam"):
        features.inner_optimizer(paddle.optimizer.SGD(0.1), strategy_with(lamb=True))


def test_every_strategy_feature_flag_is_decided():
    """A boolean feature Paddle's DistributedStrategy has that FEATURES does not decide would pass
    silently: the table must cover them all (besides the ones that change nothing computed)."""
    strategy = fleet.DistributedStrategy()
    harmless = {"ngraph",
                # NCCL and cuDNN tuning, fusion hints: the engine fuses and schedules itself
                "without_graph_optimization", "fuse_all_reduce_ops", "sync_nccl_allreduce",
                "use_hierarchical_allreduce", "fuse_grad_merge", "find_unused_parameters", "fuse_grad_size_in_MB",
                "last_comm_group_size_MB", "cudnn_exhaustive_search", "cudnn_batchnorm_spatial_persistent",
                "conv_workspace_size_limit", "calc_comm_same_stream", "fuse_grad_size_in_num",
                # parameter-server mode only (fleet.init(is_collective=True) is required)
                "a_sync", "split_data", "with_coordinator", "is_with_coordinator", "adam_d2sum"}
    flags = []
    for name in dir(type(strategy)):
        if name.startswith("_") or name in harmless or name.endswith("_configs"):
            continue
        try:
            value = getattr(strategy, name)
        except Exception:
            continue
        if isinstance(value, bool):
            flags.append(name)
    undecided = [f for f in flags if f not in features.FEATURES]
    assert not undecided, undecided


def test_amp_in_bf16_maps_onto_precision_bf16_and_amp_in_float16_is_refused():
    bf16 = strategy_with(amp=True, amp_configs={"use_pure_bf16": True})
    assert features.refused(bf16) == []
    assert features.config_overrides(bf16) == {"precision": "bf16"}
    assert "AMPOptimizer" in features.ABSORBED  # Paddle's own AMP rewrite must not run as well
    fp16 = features.refused(strategy_with(amp=True))
    assert fp16 == ["strategy.amp (mixed precision in float16 is not available on the engine; amp_configs"
                    "['use_pure_bf16'] = True trains in bf16 mixed precision, as ngraph_configs precision: bf16)"]
    assert features.config_overrides(strategy_with(amp=False, amp_configs={"use_pure_bf16": True})) == {}
    with pytest.raises(ConfigError, match=r"amp_configs custom_white_list=\['softmax'\]: the engine's bf16 ops are "
                                          r"fixed"):
        features.config_overrides(strategy_with(amp=True, amp_configs={"use_pure_bf16": True,
                                                                       "custom_white_list": ["softmax"]}))
    bf16.ngraph = True
    bf16.ngraph_configs = {"precision": "fp32"}  # ngraph_configs wins, as for every mapped feature
    assert features.merged_overrides(bf16)["precision"] == "fp32"
