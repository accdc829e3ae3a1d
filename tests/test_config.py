"""paddle_ngraph.Config, the one definition of the configuration: what transpile accepts, what
fleet resolves and what the docs say all come from it, and a test fails if one drifts."""
import dataclasses
import inspect
import os

import pytest

import paddle_ngraph
from paddle_ngraph import Config, ConfigError
from paddle_ngraph import config as config_module
from paddle_ngraph.errors import UnknownConfigKeyError
from paddle_ngraph import config_sources
from paddle_ngraph.transpiler import PER_CALL_ARGUMENTS, options
from paddle_ngraph.transpiler import transpile as transpiler_transpile


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith("PADDLE_NGRAPH_"):
            monkeypatch.delenv(key)


def test_transpile_takes_the_per_call_arguments_and_every_config_key():
    signature = inspect.signature(transpiler_transpile)
    named = [p.name for p in signature.parameters.values() if p.kind == p.KEYWORD_ONLY]
    assert named == list(PER_CALL_ARGUMENTS)
    assert list(signature.parameters)[:2] == ["program", "config"]
    assert signature.parameters["overrides"].kind == inspect.Parameter.VAR_KEYWORD
    assert not set(PER_CALL_ARGUMENTS) - {"transport"} & set(config_module.KEYS)
    defaults = Config()
    for key in config_module.KEYS:  # every key is accepted as a keyword, with its default unchanged
        assert getattr(options(None, {key: getattr(defaults, key)}), key) == getattr(defaults, key)
    for key in config_module.KEYS:  # and documented in transpile's docstring
        assert f"``{key}``" in transpiler_transpile.__doc__


def test_resolved_fleet_defaults_are_the_dataclass_defaults():
    assert config_sources.resolve_config({}) == dataclasses.asdict(Config())
    assert set(config_sources.KEYS) == {f.name for f in dataclasses.fields(Config)}


def test_every_field_is_documented_and_typed():
    for f in dataclasses.fields(Config):
        assert f.type in (str, int, float, bool, tuple), f.name
        assert f.metadata["doc"].strip() and f.metadata["summary"].strip(), f.name


def test_overrides_beat_the_config_and_none_keeps_its_value():
    base = Config(backend="interpreter", bucket_mb=1)
    assert base.backend == "INTERPRETER"  # normalized as the fleet's values are
    assert options(base, {"bucket_mb": 2}) == dataclasses.replace(base, bucket_mb=2)
    assert options(base, {"bucket_mb": None, "backend": None}) is base
    assert options({"reduction": "SUM"}, {"threads": 3}) == Config(reduction="sum", threads=3)


def test_an_unknown_keyword_is_a_type_error_listing_the_valid_keys():
    with pytest.raises(TypeError) as info:
        options(None, {"bucket": 1})
    assert isinstance(info.value, ConfigError) and isinstance(info.value, UnknownConfigKeyError)
    assert str(info.value) == (f"transpile: unknown key(s) 'bucket'; valid keys: {config_module.valid_keys()}; "
                               "per-call arguments: nranks, transport, fetch_list")


@pytest.mark.parametrize("bad,message", [
    ({"hierarchical": "maybe"}, "transpile: unknown hierarchical 'maybe'; valid: auto, on, off"),
    ({"zero_stage": 2}, "transpile: unknown zero_stage 2; valid: 0, 1"),
    ({"accumulate_steps": 0}, "transpile: 'accumulate_steps' must be >= 1, got 0"),
    ({"bucket_mb": "8"}, "transpile: 'bucket_mb' must be a number, got str '8'"),
    ({"timeout_s": float("inf")}, "transpile: 'timeout_s' must be a number, got float inf"),
    ({"transport": "tcp"}, "transpile: unknown transport 'tcp'; valid: auto, mpi, ccl, mlsl, null"),
    ({"compress": "bf16", "zero_stage": 1}, "transpile: compress: 'bf16' cannot be combined with zero_stage 1"),
])
def test_transpile_errors_are_the_fleets_naming_transpile(bad, message):
    with pytest.raises(ConfigError) as info:
        options(None, bad)
    assert str(info.value).startswith(message)
    key = next(iter(bad))
    if key != "compress":  # the same check, the same words, for the strategy
        with pytest.raises(ConfigError) as fleet_info:
            config_sources.validate({key: bad[key]}, "strategy.ngraph_configs")
        assert str(fleet_info.value) == message.replace("transpile", "strategy.ngraph_configs", 1)


def test_a_config_of_the_wrong_type_is_refused():
    with pytest.raises(ConfigError, match="transpile: config must be a paddle_ngraph.Config or a dict"):
        options("CPU", {})


def test_config_is_frozen_and_validated_on_construction():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Config().bucket_mb = 1
    with pytest.raises(ConfigError, match="Config: 'threads' must be >= 0, got -1"):
        Config(threads=-1)


def test_the_top_level_transpile_forwards_config_and_keywords():
    assert list(inspect.signature(paddle_ngraph.transpile).parameters) == ["program", "config", "options"]
    with pytest.raises(UnknownConfigKeyError, match="unknown key\\(s\\) 'bucket'"):
        paddle_ngraph.transpile(object(), bucket=1)  # refused before the program is looked at
