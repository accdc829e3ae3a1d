"""Loads the ``ngraph_engine`` Paddle operator and connects it to the Cython bridge."""
from __future__ import annotations

import ctypes
import functools
import os

import numpy as np

from ..errors import NgraphError

_LIBRARY_NAME = "_engine_op"


def _library_path() -> str:
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name in os.listdir(package):
        if name.startswith(_LIBRARY_NAME) and name.endswith(".so"):
            return os.path.join(package, name)
    raise NgraphError(f"the ngraph_engine operator library ({_LIBRARY_NAME}*.so) is not built in {package}; "
                      f"install paddle_ngraph with `pip install --no-build-isolation .` (or `make build`)")


@functools.lru_cache(maxsize=None)
def library() -> ctypes.CDLL:
    """Registers the operator with Paddle (once per process) and sets the engine callback."""
    from paddle.utils.cpp_extension.extension_utils import load_op_meta_info_and_register_op

    from .. import _bridge

    path = _library_path()
    load_op_meta_info_and_register_op(path)
    lib = ctypes.CDLL(path)
    lib.pdng_set_run_callback.argtypes = [ctypes.c_void_p]
    lib.pdng_set_run_callback(_bridge.run_callback_address())
    lib.pdng_set_output_meta.argtypes = [ctypes.c_int64, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.pdng_max_outputs.restype = ctypes.c_int
    return lib


def max_outputs() -> int:
    return library().pdng_max_outputs()


def set_output_meta(engine_id: int, dtype_codes: list[int], shapes: list[tuple]):
    codes = np.asarray(dtype_codes, dtype=np.int32)
    ndims = np.asarray([len(s) for s in shapes], dtype=np.int32)
    flat = np.asarray([d for s in shapes for d in s] or [0], dtype=np.int64)
    library().pdng_set_output_meta(engine_id, len(shapes), codes.ctypes.data, ndims.ctypes.data, flat.ctypes.data)
