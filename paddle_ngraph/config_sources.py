"""Where the configuration of fleet training (``strategy.ngraph = True``) and of
``paddle_ngraph.DataParallel`` comes from.

The keys, their types, defaults and documentation are those of ``paddle_ngraph.config.Config``
(``configs/defaults.yaml`` is the documented template generated from it). Precedence,
highest first: ``strategy.ngraph_configs`` > environment variables ``PADDLE_NGRAPH_<KEY>`` >
a YAML file named by ``PADDLE_NGRAPH_CONFIG`` > ``Config``'s defaults.

Every value is validated where it comes from, and errors name that source (the
strategy, the environment variable, the file) and list the valid keys or choices.
Importing this module does not import Paddle.
"""
from __future__ import annotations

import os

from .config import KEYS, check_combination, defaults, kind, type_name, valid_keys, validate, validate_value
from .errors import ConfigError

ENV_PREFIX = "PADDLE_NGRAPH_"
CONFIG_FILE_ENV = "PADDLE_NGRAPH_CONFIG"


def _parse_env(key: str, text: str):
    """An environment variable's text, as the type the key expects."""
    name = ENV_PREFIX + key.upper()
    value_kind = kind(key)
    source = f"environment variable {name}"
    if value_kind == "str":
        return validate_value(key, text.strip(), source)
    if value_kind == "names":  # comma-separated; empty = none
        return validate_value(key, [n for n in text.split(",") if n.strip()], source)
    if value_kind == "bool":
        words = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
        if text.strip().lower() not in words:
            raise ConfigError(f"{source}={text!r}: '{key}' must be {type_name(key)}")
        return words[text.strip().lower()]
    try:
        value = int(text) if value_kind == "int" else float(text)
        if value_kind == "number" and value.is_integer() and "." not in text and "e" not in text.lower():
            value = int(value)
    except ValueError:
        raise ConfigError(f"{source}={text!r}: '{key}' must be {type_name(key)}") from None
    return validate_value(key, value, source)


def from_environment(env=None) -> dict:
    env = os.environ if env is None else env
    return {key: _parse_env(key, env[ENV_PREFIX + key.upper()]) for key in KEYS if ENV_PREFIX + key.upper() in env}


def load_yaml(path, source: str | None = None) -> dict:
    """A YAML file of configuration values; errors name the file."""
    import yaml

    source = source or f"config file {path}"
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"{source}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{source}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {' '.join(str(e).split())}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of keys to values, got {type(data).__name__}; "
                          f"valid keys: {valid_keys()}")
    return validate(data, source)


def resolve_config(overrides: dict | None = None, env=None) -> dict:
    """The effective configuration: ``overrides`` (``strategy.ngraph_configs``) > environment
    variables ``PADDLE_NGRAPH_<KEY>`` > the YAML file named by ``PADDLE_NGRAPH_CONFIG`` >
    ``Config``'s defaults. Every layer is validated, then the combination; returns a dict with
    every key (``Config(**resolve_config(...))`` is the typed form)."""
    env = os.environ if env is None else env
    config = defaults()
    file = env.get(CONFIG_FILE_ENV)
    if file:
        config.update(load_yaml(file, f"config file {file} ({CONFIG_FILE_ENV})"))
    config.update(from_environment(env))
    config.update(validate(dict(overrides or {}), "strategy.ngraph_configs"))
    check_combination(config, "effective configuration")
    return config
