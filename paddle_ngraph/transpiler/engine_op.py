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
    return lib


@functools.lru_cache(maxsize=None)
def paddle_copies():
    """The library's ``pdng_paddle_copies``: a list of NumPy arrays -> a list of new ``paddle.Tensor``
    holding their copies (None for an array it does not take: empty, not C-contiguous, or of a
    dtype without an entry there). Called with the GIL held, hence ``PyDLL``."""
    library()
    copies = ctypes.PyDLL(_library_path()).pdng_paddle_copies
    copies.argtypes = [ctypes.py_object]
    copies.restype = ctypes.py_object
    return copies


# The operator's sizes (native/paddle_op/engine_op.cc) and their output slots. A segment takes the
# smallest that holds its values: Paddle's executor frees every unused slot through its garbage
# collector thread, a wake-up each (rewrite.py). The ordering token is the last slot of the large
# size; in the one-slot size, the slot's value (if any) doubles as the token.
OP_SLOTS = {"ngraph_engine_one": 1, "ngraph_engine": 16}
MAX_VALUES = OP_SLOTS["ngraph_engine"] - 1


def op_for(values: int) -> tuple[str, int]:
    """(operator type, token slot) of the smallest size with room for ``values``."""
    if values <= OP_SLOTS["ngraph_engine_one"]:
        return "ngraph_engine_one", 0
    return "ngraph_engine", MAX_VALUES


def is_engine_op(op_type: str) -> bool:
    """Whether a Paddle op type (legacy) or name (PIR: ``custom_op.<type>``) is one of the operator's sizes."""
    return op_type.rpartition(".")[2] in OP_SLOTS


def set_output_meta(engine_id: int, dtype_codes: list[int], shapes: list[tuple]):
    codes = np.asarray(dtype_codes, dtype=np.int32)
    ndims = np.asarray([len(s) for s in shapes], dtype=np.int32)
    flat = np.asarray([d for s in shapes for d in s] or [0], dtype=np.int64)
    library().pdng_set_output_meta(engine_id, len(shapes), codes.ctypes.data, ndims.ctypes.data, flat.ctypes.data)
