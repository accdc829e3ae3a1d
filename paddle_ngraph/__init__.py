"""paddle_ngraph: data-parallel training of PaddlePaddle static programs on CPU clusters.

A transpiler turns a Paddle program (legacy ProgramDesc or PIR) into a graph IR
function; passes insert AllReduce after the gradients; backends execute it on
every rank over MPI or oneCCL.
"""
# First: the native parts are compiled against one Paddle; another one fails here, in one line.
from .version_guard import check_installed_paddle as _check_installed_paddle

_check_installed_paddle()

from . import backends, errors, ir  # noqa: F401,E402
from .api import convert, unsupported_ops  # noqa: E402
from .config import Config  # noqa: E402
from .checkpoint import CheckpointError, latest_checkpoint, load_checkpoint, save_checkpoint  # noqa: E402
from .errors import (ConfigError, ConversionError, ExecutionError, NgraphError, PaddleVersionError,  # noqa: E402
                     ProgramFileError, RefusedOpError, SerializationError, TransportError, UnsupportedOpsError, ValidationError)

__version__ = "0.1.0"

# fleet.DistributedStrategy.ngraph and the NgraphOptimizer meta optimizer: installed now if
# paddle.distributed.fleet is imported, else right after it is (this does not import Paddle).
from .fleet import install_hooks as _install_fleet_hooks  # noqa: E402

_install_fleet_hooks()

# Under mpirun, Paddle's own rank APIs (get_rank, DistributedBatchSampler, fleet) see MPI's
# ranks: Paddle's launcher variables are set from Open MPI's (distributed/paddle_env.py).
from .distributed.paddle_env import export_mpi_ranks as _export_mpi_ranks  # noqa: E402

_export_mpi_ranks()


def transpile(program, config: Config | None = None, **options):
    """Rewrites ``program`` in place so that its supported ops run on this engine; returns it.
    ``config``: a ``Config``; ``options``: its keys as keyword overrides, and the per-call
    ``nranks``, ``transport``, ``fetch_list`` (``paddle_ngraph.transpiler.transpile``)."""
    from .transpiler import transpile as _transpile

    return _transpile(program, config, **options)


def engines():
    """The engines of this process (one per engine segment of each transpiled program), oldest
    first; each has ``steps`` (``exe.run`` calls it served) and ``updates`` (optimizer steps)."""
    from .transpiler import engines as _engines

    return _engines()


def __getattr__(name):
    # paddle_ngraph.DataParallel imports Paddle: only when asked for.
    if name == "DataParallel":
        from .dygraph import DataParallel

        return DataParallel
    if name == "elastic":  # imports Paddle too
        import importlib

        return importlib.import_module(".elastic", __name__)
    raise AttributeError(f"module 'paddle_ngraph' has no attribute '{name}'")


def release(program) -> int:
    """Frees the engines of a transpiled ``program``; it can no longer run."""
    from .transpiler import release as _release

    return _release(program)


__all__ = ["Config", "convert", "unsupported_ops", "transpile", "engines", "DataParallel", "release", "save_checkpoint", "load_checkpoint", "latest_checkpoint",
           "CheckpointError", "NgraphError", "ValidationError", "ConversionError",
           "RefusedOpError", "UnsupportedOpsError", "ProgramFileError", "SerializationError", "ExecutionError", "TransportError",
           "ConfigError", "PaddleVersionError", "__version__"]
