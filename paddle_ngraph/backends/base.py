"""The backend interface, after nGraph's runtime::Backend.

``Backend.compile(function) -> Executable``; ``Executable.call(inputs) -> outputs``.
Inputs are given in the order of ``function.parameters`` and outputs are returned
in the order of ``function.results``. Backends register under an upper-case name.
"""
from __future__ import annotations

from ..errors import ConfigError, ExecutionError
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


def check_input(name: str, dtype_matches: bool, dtype_text: str, shape, expected, declared_by: str):
    """Raises an ExecutionError naming input ``name`` when its dtype (``dtype_matches``; shown as
    ``dtype_text``) or its ``shape`` is not the ``expected`` TensorType (-1: any size), which
    ``declared_by`` (the program, the function) declares."""
    if not dtype_matches:
        raise ExecutionError(f"input '{name}': dtype {dtype_text}, {declared_by} declares {expected.dtype.value}")
    if len(shape) != expected.rank or any(e >= 0 and e != a for e, a in zip(expected.shape, shape)):
        raise ExecutionError(f"input '{name}': shape {list(shape)}, {declared_by} declares "
                             f"{[d if d >= 0 else None for d in expected.shape]}")


def writeback_positions(function: Function, inplace_results: dict[str, str]) -> list[tuple[int, int]]:
    """(result, input) positions of the results that replace an input's value (``inplace_results``:
    result name -> parameter name), for ``write_back``."""
    results = list(function.results)
    index = {p.name: i for i, p in enumerate(function.parameters)}
    return [(results.index(r), index[p]) for r, p in inplace_results.items()]


def write_back(outputs, inputs, positions):
    """Copies each result into the input buffer it replaces (``writeback_positions``), unless the
    backend already wrote it there in place."""
    import numpy as np

    for result_pos, input_pos in positions:
        result, target = outputs[result_pos], inputs[input_pos]
        # ``is``: the CPU backend returns an input it wrote in place as that very array (cheaper
        # than comparing addresses, which makes a ctypes object per array).
        if result is not target and result.ctypes.data != target.ctypes.data:
            np.copyto(target, result, casting="no")


def backend_for(config) -> "Backend":
    """The backend a configuration asks for (a ``Config``, read by attribute: ``backend``, default
    ``default_backend()``; ``threads``; ``check_finite``), for static programs and dygraph alike."""
    options = {"threads": config.threads, **({"check_finite": True} if config.check_finite else {})}
    return get_backend(config.backend or default_backend(), **options)


class Executable:
    function: Function

    def call(self, inputs: list, transport=None) -> list:
        """Runs one step. ``transport`` serves the collective nodes (None: one process)."""
        raise NotImplementedError

    def collective_progress(self) -> tuple[list[str], int, int]:
        """For the stall watchdog, from another thread while ``call`` runs: (labels of the step's
        collectives in submission order, how many were submitted, how many completed)."""
        return [], 0, 0

    #: Peak bytes of a step's intermediate values in the last call (CPU: the planned arena;
    #: INTERPRETER: the most bytes alive at once); None when unknown or before the first call.
    peak_bytes = None

    def results_in_inputs(self) -> frozenset | None:
        """Positions of the last call's results that may share memory with one of its inputs;
        None when the backend cannot tell (the caller then compares addresses)."""
        return None

    tracing = False

    def set_tracing(self, on: bool):
        """Record the spans of each call, for the timeline (backends/timeline.py)."""
        self.tracing = bool(on)

    def last_spans(self):
        """The ``timeline.Span``s of the last call (any iterable of them) when tracing is on."""
        return []


def collective_tensor_names(node, users) -> list[str]:
    """Names of a collective's outputs for messages: 'param@GRAD' where an update reads it."""
    from ..ir.ops.optimizer import OptimizerUpdate

    names = [f"{node.name}:{k}" for k in range(len(node.output_types))]
    for user in users.get(node.id, []):
        if isinstance(user, OptimizerUpdate):
            grad = user.inputs[user.grad_input]
            if grad.node.id == node.id:
                names[grad.index] = f"{user.inputs[user.param_input].node.name}@GRAD"
    return names


def collective_labels(function, collectives) -> list[str]:
    """How the stall watchdog names each collective: its bucket and the gradients in it."""
    from ..distributed.watchdog import bucket_label

    users = function.users()
    return [bucket_label(node.attrs.get("bucket") or node.name, collective_tensor_names(node, users))
            for node in collectives]


class Backend:
    name = "BASE"

    def refuses(self, node) -> str | None:
        """Why this backend cannot run ``node`` (None: it can). Asked while planning the engine
        segments, so that the Paddle op which made such a node stays with Paddle's executor
        (transpiler/segments.py) instead of failing when compiled."""
        return None

    def compile(self, function: Function, inplace_results: dict[str, str] | None = None) -> Executable:
        """``inplace_results`` (result name -> parameter name): results that replace an input, such
        as updated parameters, which a backend may write straight into that input's buffer. Then the
        returned result shares the input's memory; without the hint, or where it cannot, it does not."""
        raise NotImplementedError
