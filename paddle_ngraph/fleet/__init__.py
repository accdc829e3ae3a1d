"""Fleet integration: ``strategy.ngraph = True`` in an otherwise plain fleet training script (static
programs: meta_optimizer.py; dygraph: dygraph.py; Paddle's own strategy features: features.py).

``import paddle_ngraph`` calls ``install_hooks()``, which adds to Paddle's fleet:

- ``fleet.DistributedStrategy.ngraph`` (bool) and ``.ngraph_configs`` (dict), validated,
  saved and loaded with the strategy (``strategy.py``);
- ``NgraphOptimizer``, a meta optimizer registered where ``MetaOptimizerFactory`` finds
  meta optimizers, which ``fleet.distributed_optimizer(opt, strategy).minimize(loss)``
  uses when the flag is on (``meta_optimizer.py``);
- under ``mpirun``, ``fleet.worker_index()``/``worker_num()`` report MPI's rank and size;
- ``paddle.Model`` (hapi) runs its network on the engine with ``strategy.ngraph``, and does not wrap
  a ``paddle_ngraph.DataParallel`` in ``paddle.DataParallel`` again; in static mode on several ranks
  its train program is minimized with ``strategy.ngraph`` and transpiled (``hapi.py``).

Importing paddle_ngraph does not import Paddle: if ``paddle.distributed.fleet`` is not
imported yet, a one-shot import hook installs the hooks right after it is. Without
``import paddle_ngraph`` nothing in Paddle changes. If fleet cannot be patched (another
Paddle version), a warning says so and paddle_ngraph still imports.
"""
from __future__ import annotations

import importlib.abc
import sys
import warnings

from ..config_sources import resolve_config

__all__ = ["install_hooks", "installed", "resolve_config", "effective_config"]

_FLEET = "paddle.distributed.fleet"
_state = {"installed": False}


def effective_config(strategy) -> dict:
    from .strategy import effective_config as _effective

    return _effective(strategy)


def installed() -> bool:
    return _state["installed"]


def _install_now() -> None:
    if _state["installed"]:
        return
    pending = sys.modules.get(__name__ + ".meta_optimizer")
    if pending is not None and not hasattr(pending, "install"):
        return  # that module is importing Paddle right now; it calls install_hooks() when done
    try:
        fleet_module = sys.modules[_FLEET]
        from paddle.distributed.fleet.base.distributed_strategy import DistributedStrategy

        from . import hapi, meta_optimizer, strategy

        strategy.install(DistributedStrategy)
        meta_optimizer.install(fleet_module)
        hapi.install()  # paddle.hapi is imported with paddle.distributed.fleet (Paddle 3.3.1)
        _state["installed"] = True
    except Exception as e:  # never break `import paddle` or `import paddle_ngraph`
        warnings.warn(f"paddle_ngraph: fleet integration (strategy.ngraph) not installed: "
                      f"{type(e).__name__}: {e}", RuntimeWarning, stacklevel=2)


class _AfterFleetImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of ``paddle.distributed.fleet`` so that the hooks
    are installed right after that package has executed, then removes itself."""

    def find_spec(self, name, path, target=None):
        if name != _FLEET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return None
        exec_module = loader.exec_module

        def exec_then_install(module):
            exec_module(module)
            _remove_finder()
            _install_now()

        loader.exec_module = exec_then_install
        return spec


def _remove_finder() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _AfterFleetImport)]


def install_hooks() -> None:
    """Installs the fleet hooks now if fleet is imported, else right after it is. Cheap; idempotent."""
    module = sys.modules.get(_FLEET)
    if module is not None and hasattr(module, "DistributedStrategy"):
        _install_now()
    elif not any(isinstance(f, _AfterFleetImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterFleetImport())
