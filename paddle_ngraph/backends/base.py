"""The backend interface, after nGraph's runtime::Backend.

``Backend.compile(function) -> Executable``; ``Executable.call(inputs) -> outputs``.
Inputs are given in the order of ``function.parameters`` and outputs are returned
in the order of ``function.results``. Backends register under an upper-case name.
"""
from __future__ import annotations

from ..errors import ConfigError
from ..ir import Function

_BACKENDS: dict[str, type["Backend"]] = {}


def register_backend(name: str):
    def decorate(cls):
        _BACKENDS[name.upper()] = cls
        cls.name = name.upper()
        return cls
    return decorate


def available_backends() -> list[str]:
    return sorted(_BACKENDS)


def default_backend() -> str:
    """CPU where the native library is built, else the INTERPRETER."""
    return "CPU" if "CPU" in _BACKENDS else "INTERPRETER"


def get_backend(name: str, **options) -> "Backend":
    key = str(name).upper()
    if key not in _BACKENDS:
        raise ConfigError(f"unknown backend '{name}'; available: {', '.join(available_backends())}")
    return _BACKENDS[key](**options)


class Executable:
    function: Function

    def call(self, inputs: list, transport=None) -> list:
        """Runs one step. ``transport`` serves the collective nodes (None: one process)."""
        raise NotImplementedError


class Backend:
    name = "BASE"

    def compile(self, function: Function, inplace_results: dict[str, str] | None = None) -> Executable:
        """``inplace_results`` (result name -> parameter name): results that replace an input, such
        as updated parameters, which a backend may write straight into that input's buffer. Then the
        returned result shares the input's memory; without the hint, or where it cannot, it does not."""
        raise NotImplementedError
