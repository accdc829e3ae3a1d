"""``fleet.DistributedStrategy.ngraph`` and ``.ngraph_configs``, added by ``import paddle_ngraph``.

In the style of Paddle's ``gradient_merge``/``gradient_merge_configs``: a boolean flag
and a dict of configs. Unlike Paddle's setters, which log a warning and keep the old
value, ours raise ``ConfigError`` at once for a non-boolean flag, an unknown key or a
value of the wrong type, listing the valid keys or choices.

``ngraph_configs`` holds the keys you set (merged over earlier assignments, as
Paddle's ``*_configs`` setters merge); ``effective_config(strategy)`` gives every key
after the precedence rules (``paddle_ngraph.config_sources``).

Save and load: ``DistributedStrategy`` is backed by a protobuf message with a fixed
schema, which has no field for ours. ``save_to_prototxt`` therefore appends them as one
comment line of the protobuf text format, ``# paddle_ngraph: {...json...}``, and
``load_from_prototxt`` reads that line back. Protobuf's text parser skips comments, so
the file still loads in a Paddle without paddle_ngraph (which then ignores the line).
The line is written only when the flag is on or configs are set, so a file saved with
``ngraph`` off and no configs is byte-identical to Paddle's own.
"""
from __future__ import annotations

import json

from ..errors import ConfigError
from ..config import KEYS, validate
from ..config_sources import resolve_config

SAVE_TAG = "# paddle_ngraph:"
_ORIGINALS: dict = {}


def _get_flag(self) -> bool:
    return bool(self.__dict__.get("_ngraph_flag", False))


def _set_flag(self, flag) -> None:
    if not isinstance(flag, bool):
        raise ConfigError(f"strategy.ngraph must be True or False, got {type(flag).__name__} {flag!r}")
    object.__setattr__(self, "_ngraph_flag", flag)


def _get_configs(self) -> dict:
    return dict(self.__dict__.get("_ngraph_configs") or {})


def _set_configs(self, configs) -> None:
    values = validate(configs, "strategy.ngraph_configs")
    merged = _get_configs(self)
    merged.update(values)
    object.__setattr__(self, "_ngraph_configs", merged)


_FLAG_DOC = """Run collective training on paddle_ngraph's engine (CPU data parallelism). Static graphs:
``fleet.distributed_optimizer(opt, strategy).minimize(loss)`` appends backward and the
optimizer, then ``paddle_ngraph.transpile``s the program. Dygraph: ``fleet.distributed_model``
returns ``paddle_ngraph.DataParallel``. Paddle's own strategy features are mapped or refused
(``paddle_ngraph/fleet/features.py``). Default: False."""

_CONFIGS_DOC = f"""paddle_ngraph's configuration overrides, any of: {', '.join(KEYS)}
(the fields of paddle_ngraph.Config, documented in configs/defaults.yaml). Assigning a dict
merges it into the keys set before; a wrong key or type raises ConfigError."""


def effective_config(strategy) -> dict:
    """Every configuration key after precedence: ngraph_configs > Paddle's strategy features that map onto
    keys (features.py) > PADDLE_NGRAPH_<KEY> > file > defaults."""
    from .features import merged_overrides

    return resolve_config(merged_overrides(strategy))


def _state(self) -> dict:
    return {"ngraph": self.ngraph, "ngraph_configs": self.ngraph_configs}


def save_to_prototxt(self, output: str) -> None:
    _ORIGINALS["save_to_prototxt"](self, output)
    if self.ngraph or self.ngraph_configs:
        with open(output, "a", encoding="utf-8") as f:
            f.write(f"{SAVE_TAG} {json.dumps(_state(self), sort_keys=True)}\n")


def load_from_prototxt(self, pb_file: str) -> None:
    _ORIGINALS["load_from_prototxt"](self, pb_file)
    with open(pb_file, encoding="utf-8") as f:
        lines = [line[len(SAVE_TAG):] for line in f if line.startswith(SAVE_TAG)]
    for text in lines:
        try:
            state = json.loads(text)
        except ValueError as e:
            raise ConfigError(f"{pb_file}: unreadable paddle_ngraph line: {e}") from None
        if not isinstance(state, dict) or set(state) - {"ngraph", "ngraph_configs"}:
            raise ConfigError(f"{pb_file}: the paddle_ngraph line must hold 'ngraph' and 'ngraph_configs', "
                              f"got {text.strip()}")
        try:
            if "ngraph" in state:
                self.ngraph = state["ngraph"]
            if "ngraph_configs" in state:
                self.ngraph_configs = state["ngraph_configs"]
        except ConfigError as e:
            raise ConfigError(f"{pb_file}: {e}") from None


def __repr__(self) -> str:
    text = _ORIGINALS["__repr__"](self)
    if self.ngraph or self.ngraph_configs:
        text += f"    paddle_ngraph: ngraph={self.ngraph}, ngraph_configs={self.ngraph_configs}\n"
    return text


def install(strategy_class) -> None:
    """Adds the properties and wraps save/load/repr of ``strategy_class``; idempotent."""
    if getattr(strategy_class, "_paddle_ngraph_installed", False):
        return
    for name in ("save_to_prototxt", "load_from_prototxt", "__repr__"):
        _ORIGINALS[name] = getattr(strategy_class, name)
    strategy_class.ngraph = property(_get_flag, _set_flag, doc=_FLAG_DOC)
    strategy_class.ngraph_configs = property(_get_configs, _set_configs, doc=_CONFIGS_DOC)
    strategy_class.save_to_prototxt = save_to_prototxt
    strategy_class.load_from_prototxt = load_from_prototxt
    strategy_class.__repr__ = __repr__
    strategy_class._paddle_ngraph_installed = True
