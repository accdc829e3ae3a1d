"""strategy.ngraph / ngraph_configs: validation, precedence, save/load, the shipped defaults,
the meta optimizer's selection and refusals, and that Paddle is unchanged without the import."""
import copy
import dataclasses
import os
import re
import subprocess
import sys
import textwrap

import paddle
import pytest

import paddle_ngraph
from paddle_ngraph import ConfigError
from paddle_ngraph.config import valid_keys
from paddle_ngraph import config_sources as cfg
from paddle_ngraph.quiet import quiet_env

import paddle.distributed.fleet as fleet  # noqa: E402  (after paddle_ngraph: either order works)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VALID_KEYS = "valid keys: " + valid_keys()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith("PADDLE_NGRAPH_"):
            monkeypatch.delenv(key)


# --- the flag and the configs ------------------------------------------------------------------
def test_flag_defaults_to_false_and_takes_booleans_only():
    s = fleet.DistributedStrategy()
    assert s.ngraph is False and s.ngraph_configs == {}
    s.ngraph = True
    assert s.ngraph is True
    with pytest.raises(ConfigError, match="strategy.ngraph must be True or False, got int 1"):
        s.ngraph = 1
    assert s.ngraph is True
    with pytest.raises(TypeError, match="not a attribute"):  # Paddle's own check still guards typos
        s.ngraf = True


def test_configs_are_validated_normalized_and_merged():
    s = fleet.DistributedStrategy()
    s.ngraph_configs = {"transport": "MPI", "bucket_mb": 8}
    s.ngraph_configs = {"backend": "interpreter", "reduction": "SUM", "threads": 2, "timeout_s": 1.5,
                        "log_level": "info", "compress": "BF16"}
    assert s.ngraph_configs == {"transport": "mpi", "bucket_mb": 8, "backend": "INTERPRETER", "reduction": "sum",
                                "threads": 2, "timeout_s": 1.5, "log_level": "INFO", "compress": "bf16"}


@pytest.mark.parametrize("bad,message", [
    ({"bucket": 1}, "unknown key(s) 'bucket'; " + VALID_KEYS),
    ({"bucket_mb": "8"}, "'bucket_mb' must be a number, got str '8'"),
    ({"bucket_mb": -1}, "'bucket_mb' must be >= 0"),
    ({"threads": 1.5}, "'threads' must be an integer"),
    ({"threads": True}, "'threads' must be an integer, got bool"),
    ({"hierarchical": "yes"}, "unknown hierarchical 'yes'; valid: auto, on, off"),
    ({"timeout_s": 0}, "'timeout_s' must be > 0"),
    ({"zero_stage": 2}, "unknown zero_stage 2; valid: 0, 1"),
    ({"accumulate_steps": 0}, "'accumulate_steps' must be >= 1"),
    ({"accumulate_steps": 2.0}, "'accumulate_steps' must be an integer, got float"),
    ({"zero_stage": "1"}, "'zero_stage' must be an integer, got str '1'"),
    ({"backend": "GPU"}, "unknown backend 'GPU'; valid: CPU, INTERPRETER"),
    ({"transport": "tcp"}, "unknown transport 'tcp'; valid: auto, mpi, ccl, mlsl, null"),
    ({"reduction": "max"}, "unknown reduction 'max'; valid: avg, sum"),
    ({"compress": "int8"}, "unknown compress 'int8'; valid: none, bf16, fp16"),
    ({"log_level": "loud"}, "unknown log_level 'LOUD'; valid: DEBUG, INFO, WARNING, ERROR, CRITICAL"),
    ([("bucket_mb", 8)], "must be a dict of configuration values, got list; " + VALID_KEYS),
])
def test_bad_configs_raise_at_once_and_keep_the_old_value(bad, message):
    s = fleet.DistributedStrategy()
    s.ngraph_configs = {"bucket_mb": 4}
    with pytest.raises(ConfigError) as info:
        s.ngraph_configs = bad
    assert str(info.value).startswith("strategy.ngraph_configs: ")
    assert message in str(info.value)
    assert s.ngraph_configs == {"bucket_mb": 4}


def test_deepcopy_keeps_the_flag_and_configs():  # fleet deep-copies the strategy it is given
    s = fleet.DistributedStrategy()
    s.ngraph, s.ngraph_configs = True, {"bucket_mb": 2}
    c = copy.deepcopy(s)
    assert c.ngraph is True and c.ngraph_configs == {"bucket_mb": 2}
    assert "paddle_ngraph: ngraph=True" in repr(s)


# --- save / load -------------------------------------------------------------------------------
def test_save_and_load_with_the_strategy(tmp_path):
    s = fleet.DistributedStrategy()
    s.amp = True
    s.ngraph, s.ngraph_configs = True, {"transport": "ccl", "bucket_mb": 0.5}
    path = tmp_path / "strategy.prototxt"
    s.save_to_prototxt(str(path))
    assert '# paddle_ngraph: {"ngraph": true, "ngraph_configs": {"bucket_mb": 0.5, "transport": "ccl"}}' \
        in path.read_text()
    t = fleet.DistributedStrategy()
    t.load_from_prototxt(str(path))
    assert t.amp is True and t.ngraph is True and t.ngraph_configs == {"bucket_mb": 0.5, "transport": "ccl"}


def test_a_strategy_without_ngraph_saves_exactly_as_paddle_does(tmp_path):
    s = fleet.DistributedStrategy()
    s.amp = True
    s.save_to_prototxt(str(tmp_path / "a.prototxt"))
    assert (tmp_path / "a.prototxt").read_text() == str(s.strategy)


def test_loading_a_bad_paddle_ngraph_line_names_the_file(tmp_path):
    path = tmp_path / "bad.prototxt"
    path.write_text('amp: true\n# paddle_ngraph: {"ngraph": true, "ngraph_configs": {"bucket": 1}}\n')
    with pytest.raises(ConfigError, match=rf"{path}: strategy.ngraph_configs: unknown key\(s\) 'bucket'"):
        fleet.DistributedStrategy().load_from_prototxt(str(path))


# --- precedence: ngraph_configs > PADDLE_NGRAPH_<KEY> > PADDLE_NGRAPH_CONFIG file > defaults ---------
def test_defaults():
    from paddle_ngraph.config import Config

    defaults = cfg.resolve_config({})
    assert defaults == {f.name: getattr(Config(), f.name) for f in dataclasses.fields(Config)}
    assert {k: defaults[k] for k in ("backend", "transport", "bucket_mb", "min_buckets", "reduction", "compress",
                                     "threads", "zero_stage", "accumulate_steps", "fallback", "log_level")} == {
        "backend": "CPU", "transport": "auto", "bucket_mb": 32, "min_buckets": 4, "reduction": "avg",
        "compress": "none", "threads": 0, "zero_stage": 0, "accumulate_steps": 1, "fallback": True,
        "log_level": "WARNING"}


def test_precedence(tmp_path, monkeypatch):
    file = tmp_path / "pdng.yaml"
    file.write_text("bucket_mb: 1\nreduction: sum\nthreads: 3\n")
    monkeypatch.setenv("PADDLE_NGRAPH_CONFIG", str(file))
    assert cfg.resolve_config({}) == dict(cfg.resolve_config({}), bucket_mb=1, reduction="sum", threads=3)
    monkeypatch.setenv("PADDLE_NGRAPH_BUCKET_MB", "2")
    monkeypatch.setenv("PADDLE_NGRAPH_TRANSPORT", "NULL")
    monkeypatch.setenv("PADDLE_NGRAPH_TIMEOUT_S", "2.5")
    resolved = cfg.resolve_config({"bucket_mb": 3})
    assert resolved["bucket_mb"] == 3              # strategy.ngraph_configs beats everything
    assert resolved["transport"] == "null"         # environment beats the file and the defaults
    assert resolved["timeout_s"] == 2.5
    assert resolved["reduction"] == "sum" and resolved["threads"] == 3  # the file beats the defaults
    assert resolved["backend"] == "CPU"            # the defaults
    assert cfg.resolve_config({})["bucket_mb"] == 2
    s = fleet.DistributedStrategy()
    s.ngraph_configs = {"threads": 4}
    assert paddle_ngraph.fleet.effective_config(s) == dict(resolved, bucket_mb=2, threads=4)


@pytest.mark.parametrize("name,value,message", [
    ("PADDLE_NGRAPH_BUCKET_MB", "big", "environment variable PADDLE_NGRAPH_BUCKET_MB='big': 'bucket_mb' must be a number"),
    ("PADDLE_NGRAPH_THREADS", "1.5", "environment variable PADDLE_NGRAPH_THREADS='1.5': 'threads' must be an integer"),
    ("PADDLE_NGRAPH_BACKEND", "GPU", "environment variable PADDLE_NGRAPH_BACKEND: unknown backend 'GPU'; valid: CPU, INTERPRETER"),
    ("PADDLE_NGRAPH_TRANSPORT", "gloo", "environment variable PADDLE_NGRAPH_TRANSPORT: unknown transport 'gloo'; valid:"),
])
def test_bad_environment_variables_are_named(monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        cfg.resolve_config({})
    assert message in str(info.value)


@pytest.mark.parametrize("text,message", [
    ("bucket_mb: [1\n", "not valid YAML"),
    ("- 1\n- 2\n", "expected a mapping of keys to values, got list; " + VALID_KEYS),
    ("bucket_size: 1\n", "unknown key(s) 'bucket_size'; " + VALID_KEYS),
    ("transport: tcp\n", "unknown transport 'tcp'; valid: auto, mpi, ccl, mlsl, null"),
    ("threads: many\n", "'threads' must be an integer, got str 'many'"),
])
def test_a_bad_yaml_file_is_named(tmp_path, monkeypatch, text, message):
    file = tmp_path / "bad.yaml"
    file.write_text(text)
    monkeypatch.setenv("PADDLE_NGRAPH_CONFIG", str(file))
    with pytest.raises(ConfigError) as info:
        cfg.resolve_config({})
    assert str(info.value).startswith(f"config file {file} (PADDLE_NGRAPH_CONFIG): ")
    assert message in str(info.value)


def test_a_missing_yaml_file_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PADDLE_NGRAPH_CONFIG", str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match=r"nope.yaml \(PADDLE_NGRAPH_CONFIG\): cannot read"):
        cfg.resolve_config({})


# --- the shipped defaults ------------------------------------------------------------------------
def test_the_defaults_are_configs_and_the_yaml_template_agrees():
    assert cfg.resolve_config({}) == paddle_ngraph.Config().as_dict()
    assert cfg.load_yaml(os.path.join(ROOT, "configs", "defaults.yaml")) == cfg.resolve_config({})


def test_every_key_is_in_the_defaults_and_documented_by_a_comment():
    lines = open(os.path.join(ROOT, "configs", "defaults.yaml")).read().splitlines()
    assert set(cfg.load_yaml(os.path.join(ROOT, "configs", "defaults.yaml"))) == set(cfg.KEYS)
    for key in cfg.KEYS:
        index = next(i for i, line in enumerate(lines) if line.startswith(f"{key}:"))
        assert lines[index - 1].startswith("#"), f"{key} has no comment above it"


def test_compress_with_zero_stage_1_fails_at_resolution(monkeypatch):
    monkeypatch.setenv("PADDLE_NGRAPH_ZERO_STAGE", "1")
    with pytest.raises(ConfigError, match="effective configuration: compress: 'fp16' cannot be combined with zero_stage"):
        cfg.resolve_config({"compress": "fp16"})


# --- distributed_optimizer / minimize in one process ----------------------------------------------
@pytest.fixture
def static_fleet():
    paddle.enable_static()
    fleet.init(is_collective=True)
    yield


def _build(legacy):
    guard = paddle.pir_utils.OldIrGuard() if legacy else paddle.pir_utils.IrGuard()
    with guard:
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [None, 4], "float32")
            y = paddle.static.data("y", [None, 1], "int64")
            loss = paddle.mean(paddle.nn.functional.cross_entropy(paddle.nn.Linear(4, 3)(x), y))
    return guard, main, startup, loss


def _op_types(main):
    if hasattr(main.global_block(), "ops") and main.global_block().ops and hasattr(main.global_block().ops[0], "type"):
        return [op.type for op in main.global_block().ops]
    return [op.name() for op in main.global_block().ops]


@pytest.mark.parametrize("legacy", [False, True], ids=["pir", "legacy"])
def test_the_flag_selects_ngraph_optimizer_and_transpiles(static_fleet, legacy):
    guard, main, startup, loss = _build(legacy)
    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    strategy.ngraph_configs = {"bucket_mb": 1}
    with guard, paddle.static.program_guard(main, startup):
        opt = fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), strategy)
        opt.minimize(loss)
    assert fleet.fleet._get_applied_meta_list() == ["NgraphOptimizer"]
    assert any("ngraph_engine" in t for t in _op_types(main)), _op_types(main)


def test_fleet_workers_the_launcher_did_not_start_are_refused(monkeypatch):
    """Paddle's own fleet tests set PADDLE_TRAINER_ID and two PADDLE_TRAINER_ENDPOINTS in one process:
    fleet counts 2 workers, the engine (no launcher) 1. The process trained alone on fleet's shard."""
    from paddle.distributed.fleet.base import role_maker

    paddle.enable_static()
    monkeypatch.setenv("PADDLE_TRAINER_ID", "1")
    monkeypatch.setenv("PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:36001,127.0.0.1:36002")
    fleet.init(role_maker.PaddleCloudRoleMaker(is_collective=True))
    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    with pytest.raises(ConfigError, match=r"fleet sees 2 workers \(this is worker 1.*started alone"):
        fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), strategy)


@pytest.mark.parametrize("legacy", [False, True], ids=["pir", "legacy"])
def test_a_second_minimize_on_a_transpiled_program_is_refused_with_the_way_out(static_fleet, legacy):
    """Two optimizers through fleet: the first minimize transpiles the program, whose engine ops have
    no gradient for the second's backward (Paddle failed naming ngraph_engine)."""
    guard, main, startup, loss = _build(legacy)
    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    with guard, paddle.static.program_guard(main, startup):
        params = main.global_block().all_parameters()
        fleet.distributed_optimizer(paddle.optimizer.SGD(0.1, parameters=params[:1]), strategy).minimize(loss)
        second = fleet.distributed_optimizer(paddle.optimizer.SGD(0.1, parameters=params[1:]), strategy)
        with pytest.raises(ConfigError, match=r"already transpiled.*then paddle_ngraph.transpile\(main\) once"):
            second.minimize(loss)


def test_accumulate_steps_reaches_transpile(static_fleet):
    from paddle_ngraph.transpiler import engines

    guard, main, startup, loss = _build(legacy=False)
    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    strategy.ngraph_configs = {"accumulate_steps": 3, "backend": "INTERPRETER"}
    with guard, paddle.static.program_guard(main, startup):
        fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), strategy).minimize(loss)
    engine = engines()[-1]
    assert engine.accumulate_steps == 3 and engine.accumulate is not None and len(engine.accumulators) == 2


def test_gradient_merge_maps_onto_accumulation(static_fleet):
    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    strategy.gradient_merge = True
    strategy.gradient_merge_configs = {"k_steps": 3, "avg": False}
    fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), strategy)
    from paddle_ngraph.fleet import effective_config

    config = effective_config(strategy)
    assert (config["accumulate_steps"], config["accumulate_avg"]) == (3, False)


def test_localsgd_flags_map_one_to_one_onto_the_keys_and_ngraph_configs_win():
    from paddle_ngraph.fleet.features import localsgd_config, merged_overrides as strategy_overrides

    strategy = fleet.DistributedStrategy()
    assert localsgd_config(strategy) == {}
    strategy.localsgd = True  # Paddle's default configs: k_steps 1, begin_step 1
    assert localsgd_config(strategy) == {"localsgd_k_steps": 1, "localsgd_begin_step": 1, "localsgd_adaptive": False}
    strategy.localsgd_configs = {"k_steps": 4, "begin_step": 30}
    assert localsgd_config(strategy) == {"localsgd_k_steps": 4, "localsgd_begin_step": 30, "localsgd_adaptive": False}
    strategy.ngraph_configs = {"localsgd_k_steps": 8}
    assert strategy_overrides(strategy)["localsgd_k_steps"] == 8
    assert cfg.resolve_config(strategy_overrides(strategy))["localsgd_begin_step"] == 30
    strategy.adaptive_localsgd = True
    with pytest.raises(ConfigError, match="localsgd and strategy.adaptive_localsgd are exclusive"):
        localsgd_config(strategy)
    strategy.localsgd = False
    strategy.adaptive_localsgd_configs = {"init_k_steps": 2, "begin_step": 0}
    assert localsgd_config(strategy) == {"localsgd_k_steps": 2, "localsgd_begin_step": 0, "localsgd_adaptive": True}
    strategy.adaptive_localsgd_configs = {"init_k_steps": 0}
    with pytest.raises(ConfigError, match="adaptive_localsgd_configs: init_k_steps must be >= 1"):
        localsgd_config(strategy)


def test_localsgd_reaches_transpile_and_refuses_what_paddle_does_not_cover(static_fleet):
    from paddle_ngraph.transpiler import engines

    guard, main, startup, loss = _build(legacy=False)
    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    strategy.ngraph_configs = {"backend": "INTERPRETER"}
    strategy.localsgd = True
    with guard, paddle.static.program_guard(main, startup):
        fleet.distributed_optimizer(paddle.optimizer.Momentum(0.1), strategy).minimize(loss)
    assert fleet.fleet._get_applied_meta_list() == ["NgraphOptimizer"]
    assert engines()[-1].local is None  # one process: nothing to average, as Paddle's _can_apply
    guard, main, startup, loss = _build(legacy=False)
    with guard, paddle.static.program_guard(main, startup), pytest.raises(ConfigError, match="SGD and Momentum"):
        fleet.distributed_optimizer(paddle.optimizer.Adam(0.1), strategy).minimize(loss)
    strategy.ngraph_configs = {"zero_stage": 1}
    with pytest.raises(ConfigError, match="localsgd_k_steps 1 .local SGD. cannot be combined with zero_stage 1"):
        fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), strategy)


def test_without_the_flag_paddle_chooses_as_before(static_fleet):
    guard, main, startup, loss = _build(legacy=True)
    with guard, paddle.static.program_guard(main, startup):
        fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), fleet.DistributedStrategy()).minimize(loss)
    assert fleet.fleet._get_applied_meta_list() == ["RawProgramOptimizer"]
    assert not any("ngraph_engine" in t for t in _op_types(main))


def test_amp_with_use_pure_bf16_reaches_transpile_as_precision_bf16(static_fleet):
    from paddle_ngraph.passes.mixed_precision import bf16_nodes
    from paddle_ngraph.transpiler import engines

    guard, main, startup, loss = _build(legacy=False)
    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    strategy.ngraph_configs = {"backend": "INTERPRETER"}
    strategy.amp = True
    strategy.amp_configs = {"use_pure_bf16": True}
    with guard, paddle.static.program_guard(main, startup):
        fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), strategy).minimize(loss)
    assert fleet.fleet._get_applied_meta_list() == ["NgraphOptimizer"]
    assert not any("cast" in t for t in _op_types(main))  # Paddle's AMP rewrite did not run
    assert [n.op_type for n in bf16_nodes(engines()[-1].function)] == ["MatMul", "MatMul"]


def test_precision_comes_from_the_environment_and_bad_values_are_named(monkeypatch):
    monkeypatch.setenv("PADDLE_NGRAPH_PRECISION", "BF16")
    assert cfg.resolve_config()["precision"] == "bf16"
    monkeypatch.setenv("PADDLE_NGRAPH_PRECISION", "fp16")
    with pytest.raises(ConfigError, match="environment variable PADDLE_NGRAPH_PRECISION: unknown precision 'fp16'; "
                                          "valid: fp32, bf16"):
        cfg.resolve_config()
    monkeypatch.delenv("PADDLE_NGRAPH_PRECISION")
    with pytest.raises(ConfigError, match="strategy.ngraph_configs: unknown precision 'int8'; valid: fp32, bf16"):
        cfg.resolve_config({"precision": "int8"})
    with pytest.raises(ConfigError, match="transpile: 'precision' must be a string, got int 16"):
        paddle_ngraph.transpile(paddle.static.Program(), precision=16)


@pytest.mark.parametrize("feature,value", [("amp", True), ("pipeline", True), ("dgc", True), ("asp", True)])
def test_features_it_cannot_honour_are_refused_by_name(static_fleet, feature, value):
    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    setattr(strategy, feature, value)
    with pytest.raises(ConfigError, match=rf"strategy.ngraph cannot be combined with strategy.{feature} \(") as caught:
        fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), strategy)
    # The page the message sends the reader to holds the section it names.
    page, section = re.search(r'\((docs/[\w.-]+\.md), "([^"]+)"\)$', str(caught.value)).groups()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert f"\n## {section}\n" in open(os.path.join(root, page)).read(), (page, section)


def test_a_bad_environment_fails_at_distributed_optimizer(static_fleet, monkeypatch):
    monkeypatch.setenv("PADDLE_NGRAPH_TRANSPORT", "gloo")
    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    with pytest.raises(ConfigError, match="PADDLE_NGRAPH_TRANSPORT: unknown transport 'gloo'"):
        fleet.distributed_optimizer(paddle.optimizer.SGD(0.1), strategy)


def test_dynamic_mode_needs_fleet_init(monkeypatch):
    """In dygraph, strategy.ngraph serves fleet.distributed_model/optimizer (tests/distributed/
    test_dygraph_dp.py); without fleet.init they say what to call first."""
    from paddle.distributed.fleet import fleet as fleet_obj

    strategy = fleet.DistributedStrategy()
    strategy.ngraph = True
    monkeypatch.setattr(fleet_obj, "_role_maker", None, raising=False)
    paddle.disable_static()
    try:
        with pytest.raises(ConfigError, match=r"call fleet.init\(is_collective=True"):
            fleet.distributed_optimizer(paddle.optimizer.SGD(0.1, parameters=[]), strategy)
    finally:
        paddle.enable_static()


# --- nothing changes without `import paddle_ngraph`; importing it does not import Paddle ----------------
def _python(code: str):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env=quiet_env())


def test_paddle_is_unchanged_without_the_import_and_patched_after_it(tmp_path):
    saved = tmp_path / "s.prototxt"
    s = fleet.DistributedStrategy()
    s.amp, s.ngraph, s.ngraph_configs = True, True, {"bucket_mb": 8}
    s.save_to_prototxt(str(saved))
    proc = _python(f"""
        import sys
        import paddle.distributed.fleet as fleet
        from paddle.distributed.fleet import meta_optimizers
        from paddle.distributed.fleet.base import meta_optimizer_factory
        from paddle.distributed.fleet.fleet import Fleet
        assert "paddle_ngraph" not in sys.modules
        try:
            fleet.DistributedStrategy().ngraph = True
            raise SystemExit("strategy.ngraph accepted without import paddle_ngraph")
        except TypeError as e:
            assert "ngraph is not a attribute of DistributedStrategy" in str(e), e
        assert not hasattr(meta_optimizers, "NgraphOptimizer")
        assert "NgraphOptimizer" not in meta_optimizer_factory.meta_optimizer_names
        assert not hasattr(Fleet, "_paddle_ngraph_installed")
        t = fleet.DistributedStrategy()
        t.load_from_prototxt({str(saved)!r})  # our comment line is ignored by plain Paddle
        assert t.amp is True
        import paddle_ngraph  # now, with paddle already imported: installed at once
        s = fleet.DistributedStrategy()
        s.ngraph = True
        assert "NgraphOptimizer" in meta_optimizer_factory.meta_optimizer_names
        print("OK")
    """)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr[-3000:]


def test_importing_paddle_ngraph_first_is_cheap_and_installs_on_fleet_import():
    proc = _python("""
        import sys
        import paddle_ngraph
        assert "paddle" not in sys.modules, "import paddle_ngraph imported paddle"
        import paddle.distributed.fleet as fleet
        s = fleet.DistributedStrategy()
        s.ngraph = True
        from paddle.distributed.fleet.meta_optimizers import NgraphOptimizer
        assert paddle_ngraph.fleet.installed()
        print("OK")
    """)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr[-3000:]
