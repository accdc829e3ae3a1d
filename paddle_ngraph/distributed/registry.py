"""Transports by name, each registered by its own module beside its class.

A transport module ends with ``register_transport(TransportSpec(...))``: the name the ``transport``
config key gives it (and its aliases), how to build it for the launcher that started this process,
and the launchers for which ``auto`` chooses it. Everything that chooses or lists transports reads
this registry: ``config.TRANSPORTS`` (the config key's choices), ``bootstrap.make_transport`` and
``LaunchInfo.auto_transport``. How the CPU backend reaches the other ranks from C++ is the
transport object's own (``Transport.native_link``): it depends on the instance (MPI's
hierarchical communicators).

Adding a transport: a module here with its ``Transport`` subclass and its registration, its name in
``TRANSPORT_MODULES``, and, for the native path, a communicator of the pdng_ccl C ABI
(native/cpu/src/function_communicator.cc calls it; cython/ccl.pyx's ``allreduce_address`` is
the example).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from . import launcher

# The modules of this package that define transports, imported by ``load_transports``: importing
# one registers its transports. The null transport's (``transport``) comes with the interface.
TRANSPORT_MODULES = ("transport", "mpi", "ccl")


@dataclass(frozen=True)
class TransportSpec:
    name: str  # lower case, as the config key takes it
    # Builds the transport for the launcher that started this process (``launcher.LaunchInfo``);
    # ``timeout_s``: how long a start-up rendezvous may wait for the other ranks (None: its default).
    # Refuses, with a ConfigError, launchers it cannot join.
    build: Callable[[launcher.LaunchInfo, float | None], object]
    aliases: tuple[str, ...] = ()
    auto_for: tuple[str, ...] = ()  # launchers ("mpirun", "paddle", "none") for which auto picks it
    # False for the one-process transport: listed after the ones that connect ranks.
    connects_ranks: bool = True


_SPECS: dict[str, TransportSpec] = {}  # by name, in registration order


def register_transport(spec: TransportSpec) -> TransportSpec:
    for key in (spec.name, *spec.aliases):
        owner = find_transport(key, load=False)
        if owner is not None and owner.name != spec.name:
            raise ValueError(f"transport name '{key}' is taken by the '{owner.name}' transport")
    _SPECS[spec.name] = spec
    for name in spec.auto_for:
        launcher.TRANSPORT_OF_LAUNCHER[name] = spec.name
    return spec


def load_transports():
    """Imports every transport module, so that all transports are registered."""
    for module in TRANSPORT_MODULES:
        importlib.import_module(f"{__package__}.{module}")


def transport_specs() -> list[TransportSpec]:
    """The registered transports, those that connect ranks first, each group in registration order."""
    load_transports()
    return sorted(_SPECS.values(), key=lambda spec: not spec.connects_ranks)


def find_transport(name: str, load: bool = True) -> TransportSpec | None:
    """The transport registered under ``name`` or as its alias (lower case), else None."""
    if load:
        load_transports()
    return next((s for s in _SPECS.values() if name == s.name or name in s.aliases), None)


def transport_names() -> tuple[str, ...]:
    """Every name the ``transport`` config key accepts: auto, then each transport and its aliases."""
    return ("auto",) + tuple(n for spec in transport_specs() for n in (spec.name, *spec.aliases))


def described_transport_names() -> str:
    """For error messages: "auto, mpi, ccl (alias mlsl), null"."""
    return ", ".join(["auto"] + [spec.name + (f" (alias {', '.join(spec.aliases)})" if spec.aliases else "")
                                 for spec in transport_specs()])
