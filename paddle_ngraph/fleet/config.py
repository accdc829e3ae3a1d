"""The configuration of fleet training with ``strategy.ngraph = True``.

Keys, types and defaults are documented in ``configs/defaults.yaml`` (shipped in the
package as ``paddle_ngraph/fleet/defaults.yaml``). Precedence, highest first:
``strategy.ngraph_configs`` > environment variables ``PADDLE_NGRAPH_<KEY>`` > a YAML
file named by ``PADDLE_NGRAPH_CONFIG`` > the shipped defaults.

Every value is validated where it comes from, and errors name that source (the
strategy, the environment variable, the file) and list the valid keys or choices.
Importing this module does not import Paddle.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import ConfigError
from ..ir.ops.collective import COMPRESSIONS

ENV_PREFIX = "PADDLE_NGRAPH_"
CONFIG_FILE_ENV = "PADDLE_NGRAPH_CONFIG"
TRANSPORTS = ("auto", "mpi", "ccl", "mlsl", "null")
REDUCTIONS = ("avg", "sum")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

_PACKAGE_DEFAULTS = Path(__file__).resolve().parent / "defaults.yaml"
_REPO_ROOT = Path(__file__).resolve().parents[2]


def _backends() -> list[str]:
    from ..backends import available_backends

    return available_backends()


@dataclass(frozen=True)
class Option:
    kind: str                       # "str", "int", "number" or "bool"
    choices: Callable[[], Any] | tuple | None = None
    case: str | None = None         # "upper"/"lower": choices compare case-insensitively
    minimum: float | None = None
    exclusive_minimum: bool = False

    def type_name(self) -> str:
        return {"str": "a string", "int": "an integer", "number": "a number", "bool": "true or false"}[self.kind]


SCHEMA: dict[str, Option] = {
    "backend": Option("str", choices=_backends, case="upper"),
    "transport": Option("str", choices=TRANSPORTS, case="lower"),
    "bucket_mb": Option("number", minimum=0),
    "min_buckets": Option("int", minimum=1),
    "reduction": Option("str", choices=REDUCTIONS, case="lower"),
    "compress": Option("str", choices=COMPRESSIONS, case="lower"),
    "threads": Option("int", minimum=0),
    "check_finite": Option("bool"),
    "zero_stage": Option("int", choices=(0, 1)),
    "accumulate_steps": Option("int", minimum=1),
    "timeout_s": Option("number", minimum=0, exclusive_minimum=True),
    "hierarchical": Option("str", choices=("auto", "on", "off"), case="lower"),
    "fallback": Option("bool"),
    "log_level": Option("str", choices=LOG_LEVELS, case="upper"),
}
KEYS = tuple(SCHEMA)


def valid_keys() -> str:
    return ", ".join(sorted(KEYS))


def validate_value(key: str, value, source: str):
    """Returns the normalized value, or raises a ConfigError naming ``source``."""
    if key not in SCHEMA:
        raise ConfigError(f"{source}: unknown key '{key}'; valid keys: {valid_keys()}")
    option = SCHEMA[key]
    if option.kind == "str":
        ok = isinstance(value, str)
    elif option.kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif option.kind == "bool":
        ok = isinstance(value, bool)
    else:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and option.kind == "number" and not math.isfinite(value):
        ok = False
    if not ok:
        raise ConfigError(f"{source}: '{key}' must be {option.type_name()}, got {type(value).__name__} {value!r}")
    if option.case == "upper":
        value = value.upper()
    elif option.case == "lower":
        value = value.lower()
    if option.choices is not None:
        choices = tuple(option.choices() if callable(option.choices) else option.choices)
        if value not in choices:
            raise ConfigError(f"{source}: unknown {key} {value!r}; valid: {', '.join(map(str, choices))}")
    if option.minimum is not None:
        bad = value <= option.minimum if option.exclusive_minimum else value < option.minimum
        if bad:
            bound = f"> {option.minimum:g}" if option.exclusive_minimum else f">= {option.minimum:g}"
            raise ConfigError(f"{source}: '{key}' must be {bound}, got {value!r}")
    return value


def validate(config, source: str, keys_only: bool = False) -> dict:
    """Validates a (partial) mapping of configuration values; returns them normalized."""
    if not isinstance(config, dict):
        raise ConfigError(f"{source}: must be a dict of configuration values, got {type(config).__name__}; "
                          f"valid keys: {valid_keys()}")
    unknown = [k for k in config if k not in SCHEMA]
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {', '.join(repr(k) for k in unknown)}; "
                          f"valid keys: {valid_keys()}")
    return {key: validate_value(key, value, source) for key, value in config.items()}


def _parse_env(key: str, text: str):
    """An environment variable's text, as the type the key expects."""
    name = ENV_PREFIX + key.upper()
    kind = SCHEMA[key].kind
    source = f"environment variable {name}"
    if kind == "str":
        return validate_value(key, text.strip(), source)
    if kind == "bool":
        words = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
        if text.strip().lower() not in words:
            raise ConfigError(f"{source}={text!r}: '{key}' must be {SCHEMA[key].type_name()}")
        return words[text.strip().lower()]
    try:
        value = int(text) if kind == "int" else float(text)
        if kind == "number" and value.is_integer() and "." not in text and "e" not in text.lower():
            value = int(value)
    except ValueError:
        raise ConfigError(f"{source}={text!r}: '{key}' must be {SCHEMA[key].type_name()}") from None
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


def defaults_path() -> Path:
    """The repository's ``configs/defaults.yaml`` when running from a checkout, else the packaged copy."""
    repo = _REPO_ROOT / "configs" / "defaults.yaml"
    if repo.is_file() and (_REPO_ROOT / "setup.py").is_file():
        return repo
    return _PACKAGE_DEFAULTS


def shipped_defaults() -> dict:
    path = defaults_path()
    values = load_yaml(path, f"shipped defaults {path}")
    missing = [k for k in KEYS if k not in values]
    if missing:
        raise ConfigError(f"shipped defaults {path}: missing key(s) {', '.join(missing)}")
    return values


def resolve_config(overrides: dict | None = None, env=None) -> dict:
    """The effective configuration: ``overrides`` (``strategy.ngraph_configs``) > environment
    variables ``PADDLE_NGRAPH_<KEY>`` > the YAML file named by ``PADDLE_NGRAPH_CONFIG`` > the
    shipped defaults. Every layer is validated; returns a dict with every key."""
    env = os.environ if env is None else env
    config = shipped_defaults()
    file = env.get(CONFIG_FILE_ENV)
    if file:
        config.update(load_yaml(file, f"config file {file} ({CONFIG_FILE_ENV})"))
    config.update(from_environment(env))
    config.update(validate(dict(overrides or {}), "strategy.ngraph_configs"))
    return config


def apply_log_level(level: str):
    """Sets the level of the ``paddle_ngraph`` logger (adds a stderr handler if it has none)."""
    import logging

    logger = logging.getLogger("paddle_ngraph")
    logger.setLevel(level)
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[paddle_ngraph] %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    return logger
