"""The YAML configuration reader fuzzed: whatever the file holds, the outcome is a valid
configuration or one ConfigError naming the file, never another exception."""
import os

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paddle_ngraph.errors import ConfigError
from paddle_ngraph import config_sources as cfg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULTS = open(os.path.join(ROOT, "configs", "defaults.yaml"), "rb").read()
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                          max_size=3), max_leaves=6)
keys = st.sampled_from(list(cfg.KEYS) + ["bucket", "BACKEND", ""])


def check(path, data: bytes):
    path.write_bytes(data)
    try:
        config = cfg.load_yaml(str(path))
    except ConfigError as e:
        assert str(path) in str(e)
        return
    assert set(config) <= set(cfg.KEYS)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200))
def test_random_bytes(tmp_path, data):
    check(tmp_path / "c.yaml", data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=0, max_value=len(DEFAULTS)), flip=st.integers(min_value=0, max_value=255))
def test_truncated_and_corrupted_defaults(tmp_path, cut, flip):
    data = bytearray(DEFAULTS[:cut])
    if data:
        data[flip % len(data)] ^= 0x5A
    check(tmp_path / "c.yaml", bytes(data))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=st.dictionaries(keys, values, max_size=4))
def test_mappings_of_any_values(tmp_path, doc):
    check(tmp_path / "c.yaml", yaml.safe_dump(doc, allow_unicode=True).encode())
