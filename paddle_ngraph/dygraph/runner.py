"""Runs a captured dygraph Layer on the engine, glued to eager autograd.

``LayerEngine.call(args)`` is what the wrapper's ``forward`` does. Per input signature (mode,
whether gradients are wanted, shapes and dtypes of the inputs) the Layer is captured once
(``frontend/dygraph.py``) and compiled into:

- a forward executable: the outputs, the values backward needs (``saved:*``) and the batch-norm
  running statistics, which it writes into the Layer's buffers in place;
- a backward executable that ends in the bucketed AllReduce of the parameter gradients
  (``passes/insert_allreduce.average_gradient_results``; the CPU backend overlaps each bucket
  with the rest of backward), and one without collectives, for ``no_sync``.

Under tensor parallelism (``mp_degree`` > 1: fleet.meta_parallel's layers, docs/model-parallel.md)
the forward and both backward executables also carry the model's own collectives over the
model-parallel group, the gradient AllReduce runs over the data-parallel group only (none with
one replica), and the Layer runs whole on the engine or raises (Paddle has no CPU kernels for
those ops: no segments, no eager run). ``tensor_parallel.py`` reads Paddle's groups.

A ``paddle.autograd.PyLayer`` (``_EngineCall``) joins them to eager autograd: its forward runs the
forward executable, its backward receives the output gradients (the loss is computed eagerly
after the Layer) and runs the backward executable. Parameter gradients then reach ``param.grad``
as Paddle's accumulation would put them there (added in place where ``param.grad`` exists, else
handed to autograd), and the user's ``opt.step()`` runs in Paddle: clipping, weight decay and LR
schedules are Paddle's own (docs/PERFORMANCE.md, "Dygraph", measures why the update stays there).

Memory: inputs, parameters and gradients are passed as NumPy views of the Paddle tensors' memory
(DLPack), without copies. The executables' results are views of their arena, valid until their
next call: outputs and gradients are copied out once; saved values stay in the forward arena
until backward, and are copied only if the same forward runs again first.
"""
from __future__ import annotations

import contextlib
import itertools
import logging

import numpy as np

from ..errors import ConfigError, ConversionError, ExecutionError
from ..frontend.dygraph import (GRAD_PREFIX, OUT_PREFIX, SEED_PREFIX, XGRAD_PREFIX, Capture, CaptureError,
                                RefusedCaptureError, capture, trace, watched_attributes)
from ..ir.roles import Role, written_back
from ..backends.base import write_back, writeback_positions
from ..distributed.agreement import agree
from ..ir import Function
from ..ir.groups import RankLayout
from ..passes.pipeline import Facts, build_passes, run_pipeline
from .tensor_parallel import paddle_layout

log = logging.getLogger("paddle_ngraph.dygraph")


_NUMPY = {"paddle.float32": np.float32, "paddle.float64": np.float64, "paddle.float16": np.float16,
          "paddle.int32": np.int32, "paddle.int64": np.int64, "paddle.int8": np.int8, "paddle.uint8": np.uint8,
          "paddle.bool": np.bool_, "paddle.int16": np.int16}


# id(Paddle dtype) -> (that dtype, NumPy dtype), filled from _NUMPY on first sight. Views are made
# several times per step: str() of a Paddle dtype costs about 2 us and hashing one 0.5 (Python-level
# __hash__), its id 0.2. The entry holds the dtype, so its id cannot be reused.
_NUMPY_OF_DTYPE: dict = {}


def _numpy_dtype(dtype):
    entry = _NUMPY_OF_DTYPE.get(id(dtype))
    if entry is None or entry[0] is not dtype:
        found = _NUMPY.get(str(dtype))
        entry = (dtype, np.dtype(found) if found is not None else None)
        _NUMPY_OF_DTYPE[id(dtype)] = entry
    return entry[1]


def _view(tensor) -> np.ndarray:
    """A NumPy array over the memory of a dense CPU Paddle tensor, without a copy. The caller keeps
    the tensor alive as long as the array is used (DLPack would, but refuses tensors that require
    gradients, and detach() costs more than the whole view)."""
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    dtype = _numpy_dtype(tensor.dtype)
    if _array_at is None or dtype is None:
        return np.from_dlpack(tensor.detach())
    return _array_at(tensor.data_ptr(), dtype, tensor.shape)


def _dense_of_rows(grad, param) -> np.ndarray:
    """The dense array of a selected-rows gradient: its rows added into zeros of the parameter's
    shape (a row listed twice adds twice, as Paddle merges them)."""
    dense = np.zeros(param.shape, _numpy_dtype(param.dtype))
    np.add.at(dense, np.asarray(grad.rows(), np.int64), grad._get_tensor_from_selected_rows().numpy())
    return dense


try:
    from .._cpu import array_at as _array_at
except ImportError:  # the native library is not built: DLPack
    _array_at = None


def _no_rows(param):
    """A selected-rows gradient of ``param`` listing no rows: zeros of a sparse embedding's kind."""
    import paddle
    from paddle.base import core

    tensor = core.eager.Tensor(param.dtype, list(param.shape), f"{param.name}@GRAD", core.VarDesc.VarType.SELECTED_ROWS,
                               False)
    rows = tensor.get_selected_rows()
    rows.set_height(param.shape[0])
    rows.set_rows([])
    rows.get_tensor().set(np.zeros((0, *param.shape[1:]), _numpy_dtype(param.dtype)), paddle.CPUPlace())
    return tensor


def _to_paddle(array: np.ndarray):
    """A Paddle tensor owning ``array`` (no copy)."""
    import paddle

    return paddle.utils.dlpack.from_dlpack(array)


_ALLOCATION = None  # (NumPy dtype -> Paddle dtype, paddle._C_ops.empty, the CPU place), made on first use


def _paddle_copy(array: np.ndarray):
    """A new Paddle tensor holding a copy of ``array``: allocated by Paddle and filled through a
    view, 3-4 us where a NumPy copy handed over by DLPack costs about 20 (paddle's from_dlpack
    wraps its result in Python); DLPack for dtypes without a view and for empty arrays."""
    global _ALLOCATION
    if _ALLOCATION is None:
        import paddle
        from paddle import _C_ops
        from paddle.base import core

        dtypes = {np.dtype(n): getattr(paddle, p[len("paddle."):]) for p, n in _NUMPY.items()}
        _ALLOCATION = (dtypes, _C_ops.empty, core.CPUPlace())
    dtypes, empty, place = _ALLOCATION
    dtype = dtypes.get(array.dtype)
    if dtype is None or _array_at is None or array.size == 0:
        return _to_paddle(np.array(array, copy=True))
    tensor = empty(list(array.shape), dtype, place)
    np.copyto(_array_at(tensor.data_ptr(), array.dtype, array.shape), array, casting="no")
    return tensor


_COPIES = None  # transpiler.engine_op.paddle_copies(), False without the operator library


def _paddle_copies(arrays: list) -> list:
    """New Paddle tensors holding copies of ``arrays``, made by one native call for all of them
    (about 0.5 us a tensor against 2.5 for ``_paddle_copy``); ``_paddle_copy`` for each array the
    call does not take."""
    global _COPIES
    if _COPIES is None:
        from ..errors import NgraphError
        from ..transpiler.engine_op import paddle_copies

        try:
            _COPIES = paddle_copies()
        except NgraphError:
            _COPIES = False
    if _COPIES is False or not arrays:
        return [_paddle_copy(a) for a in arrays]
    tensors = _COPIES(arrays)
    for i, tensor in enumerate(tensors):
        if tensor is None:
            tensors[i] = _paddle_copy(np.asarray(arrays[i]))
    return tensors


class Compiled:
    """One signature of one Layer: its capture and executables."""

    segmented = False  # the whole program on the engine (else segmented.SegmentedCompiled)

    def __init__(self, engine: "LayerEngine", cap: Capture):
        self.capture = cap
        self.trains = cap.backward is not None
        self.engine = engine
        compiler = engine.compiler
        forward, config, nranks = cap.forward, engine.config, engine.transport.size
        # The forward and the backward without collectives take the passes one replica takes (the
        # optimizer is the user's, in Paddle: nothing else applies); the synchronizing backward
        # takes the gradient AllReduce over the data-parallel group as well. Under tensor
        # parallelism one replica is mp_degree ranks, and the functions have collectives of their
        # own (over the model-parallel group: converters/collective.py).
        replica = engine.layout.mp_degree
        run_pipeline(forward, build_passes(config, replica))
        inplace = written_back(forward)
        self.forward = compiler.compile(forward, inplace_results=inplace)
        results = list(forward.results)
        self.out_positions = [results.index(f"{OUT_PREFIX}{i}") for i in range(cap.num_outputs)]
        self.saved_positions = [results.index(n) for n in cap.saved]
        self.forward_inputs = self._binding(forward.parameters)
        # (result, input) of each buffer the forward updates: the backend writes in place where it can.
        self.state_writeback = writeback_positions(forward, inplace)
        self.backward_local = self.backward_sync = None
        self.pending = None  # the saved values of the last training forward, until its backward
        if cap.backward is not None:
            backward = cap.backward
            run_pipeline(backward, build_passes(config, replica))
            self.backward_local = compiler.compile(backward)
            grads = [f"{GRAD_PREFIX}{p}" for p in cap.grads]
            if engine.layout.dp_degree > 1 and grads:
                averaged = Function(backward.parameters, backward.results, name=backward.name)
                run_pipeline(averaged, build_passes(config, nranks, Facts(gradient_results=grads,
                                                                          dp_group=engine.layout.dp_group())))
                self.backward_sync_function = averaged
                self.backward_sync = compiler.compile(averaged)
            else:
                self.backward_sync_function = backward
                self.backward_sync = self.backward_local
            results = list(backward.results)
            self.grad_positions = [results.index(f"{GRAD_PREFIX}{p}") for p in cap.grads]
            self.xgrad_positions = {i: results.index(f"{XGRAD_PREFIX}{i}") for i in cap.input_grads}
            self.backward_inputs = self._binding(backward.parameters)
        self.agreement_key = None  # _ranks_agree's key: which parameters get gradients, the backward function
        self.disagreement_said = False
        self.lone_output = None  # whether the Layer returns one tensor (LayerEngine._pack)

    def agreement_lines(self) -> list[str]:
        """What the ranks' synchronized backward passes must share to pair up their collectives."""
        from ..distributed import function_fingerprint

        return function_fingerprint(self.backward_sync_function)

    def _binding(self, parameters) -> list[tuple[str, object]]:
        """Where each function parameter comes from: ('arg', i), ('param', name), ('seed', i), ('saved', k)."""
        inputs = {n: i for i, n in enumerate(self.capture.inputs)}
        saved = {n: k for k, n in enumerate(self.capture.saved)}
        binding = []
        for p in parameters:
            if p.name in inputs:
                binding.append(("arg", inputs[p.name]))
            elif p.role is Role.SEED:
                binding.append(("seed", int(p.name[len(SEED_PREFIX):])))
            elif p.name in saved:
                binding.append(("saved", saved[p.name]))
            else:
                binding.append(("param", p.name))
        return binding

    def arrays(self, binding, args, seeds=None, saved=None) -> list[np.ndarray]:
        views = self.engine.param_views()
        out = []
        for kind, key in binding:
            if kind == "arg":
                out.append(args[key])
            elif kind == "param":
                out.append(views[key])
            elif kind == "seed":
                out.append(seeds[key])
            else:
                out.append(saved[key])
        return out


class _Saved:
    """What one training forward left for its backward."""

    __slots__ = ("compiled", "tensors", "args", "saved", "sync", "done")

    def __init__(self, compiled, tensors, args, saved, sync):
        self.compiled, self.tensors, self.args, self.saved = compiled, tensors, args, saved
        self.sync, self.done = sync, False

    def detach_from_arena(self):
        if isinstance(self.saved, dict):  # a segmented Layer's, by name
            self.saved = {n: np.array(a, copy=True) for n, a in self.saved.items()}
        else:
            self.saved = [np.array(a, copy=True) for a in self.saved]


def _engine_call_class():
    """The PyLayer, made on first use (importing this module does not import Paddle)."""
    from paddle.autograd import PyLayer

    class _EngineCall(PyLayer):
        @staticmethod
        def forward(ctx, engine, compiled, num_args, *tensors):
            outputs, record = engine.run_forward(compiled, tensors[:num_args], train=True)
            ctx.record = record
            ctx.engine = engine
            ctx.num_args = num_args
            ctx.param_names = engine.grad_param_names(compiled)
            constant = compiled.capture.no_grad_outputs
            if constant:  # as in Paddle: no gradient reaches them, so they are stop_gradient
                ctx.mark_non_differentiable(*[outputs[i] for i in constant])
            return tuple(outputs)

        @staticmethod
        def backward(ctx, *output_grads):
            import paddle

            if paddle.is_grad_enabled():  # paddle.grad(..., create_graph=True): Paddle records this backward
                raise ExecutionError(
                    f"Layer {type(ctx.engine.layer).__name__}: paddle.grad(..., create_graph=True) through a Layer on "
                    f"the engine: its backward runs on the engine and leaves no graph to differentiate again (a "
                    f"gradient penalty would get no gradient). Compute higher-order gradients with the Layer in "
                    f"plain Paddle (paddle.DataParallel)")
            return tuple(ctx.engine.run_backward(ctx.record, output_grads, ctx.num_args))

    return _EngineCall


_ENGINE_CALL = None
_UNSET = object()  # a watched attribute deleted since
ATTRIBUTE_CAPTURES_TOLD = 8  # captures of one signature for new attribute values before a warning
# What an eager backward gives the ranks' agreement (_ranks_agree): no captured program's key.
EAGER_AGREEMENT_KEY = 0
_ids = itertools.count(1)


class LayerEngine:
    """The engine of one wrapped Layer, listed by ``paddle_ngraph.engines()``: ``steps`` counts
    its forward calls, ``updates`` the gradient synchronizations (backward passes with AllReduce)."""

    def __init__(self, layer, config: dict, transport):
        from ..backends import backend_for
        from ..transpiler.engine import register_engine

        self.layer = layer
        self._regrouping: dict = {}  # input structure -> the Layer regrouping flat inputs for ``layer``
        self.config = config
        self.transport = transport
        # Under tensor parallelism (mp_degree > 1) Paddle's hybrid groups; gradients are averaged
        # over the data-parallel group (the ranks holding the same shards) only.
        if config.mp_degree > 1:
            self.layout = paddle_layout(transport, config.mp_degree)
            transport.make_groups([g for g in (self.layout.dp_group(), self.layout.mp_group()) if len(g) != 1])
        else:
            self.layout = RankLayout(transport.size, transport.rank)
        self.dp_transport = transport.group(self.layout.dp_group()) if self.layout.dp_degree > 1 else None
        # The transport the forward and the unsynchronized backward need: their own collectives
        # (tensor parallelism) or none.
        self.local_transport = transport if self.layout.mp_degree > 1 else None
        self.compiler = backend_for(config)
        self.compiled: dict[tuple, Compiled | None] = {}
        self.refused: dict[tuple, str] = {}
        self.steps = 0
        self.updates = 0
        self.eager_steps = 0
        self.sync_gradients = True  # False inside no_sync()
        self._eager_armed = False   # an eager backward has reached the Layer: average after it
        self._eager_disagreement_said = False
        self._selected_rows_grads: set = set()  # parameters whose gradient Paddle holds as selected rows
        self._watched = None  # (sublayer, attribute) whose values key the captures (watched_attributes)
        self._attribute_captures: dict = {}  # signature -> captures made for new attribute values
        self._attribute_captures_told = False
        self.unsynced = False       # gradients accumulated under no_sync, not yet averaged
        self._params = None
        self._tensor_ids: tuple = ()  # ids of the Layer's parameters and buffers when captured
        self._views: dict[str, tuple[int, np.ndarray]] = {}
        self._grad_views: dict[str, tuple[int, np.ndarray]] = {}
        self.function = None
        self._executor = None
        register_engine(self)
        # Bounds the wait of every gradient collective (timeout_s) and names the missing ranks, as for
        # static programs (distributed/watchdog.py): made here, where every rank makes the wrapper.
        self.watchdog = None
        self._watchdog_steps = 0
        if self.dp_transport is not None and transport.stall_watchdog:
            from ..distributed.watchdog import watchdog_for

            self.watchdog = watchdog_for(transport, config.timeout_s)

    @contextlib.contextmanager
    def _bounded(self, phase: str):
        """The stall watchdog's step around a backward's collectives (the watchdog, or None)."""
        watchdog = self.watchdog
        if watchdog is None:
            yield None
            return
        self._watchdog_steps += 1
        watchdog.enter_step(self.id, self._watchdog_steps)
        watchdog.set_phase(phase)
        try:
            yield watchdog
        finally:
            watchdog.leave_step()

    def rank_prefix(self) -> str:
        return f"rank {self.transport.rank}: " if self.transport.size > 1 else ""

    # --- the Layer's tensors -----------------------------------------------------------------
    def named_tensors(self) -> dict:
        """Parameters and buffers by their dygraph names (what the captured programs call them)."""
        if self._params is None:
            tensors = {p.name: p for p in self.layer.parameters()}
            tensors.update({b.name: b for b in self.layer.buffers() if b is not None})
            self._params = tensors
        return self._params

    def param_views(self) -> dict[str, np.ndarray]:
        """NumPy views of the parameters and buffers, re-made where a tensor's memory moved."""
        views = {}
        for name, tensor in self.named_tensors().items():
            if not tensor._is_initialized():
                # A buffer no kernel has written yet (the recurrent layers' dropout state, which
                # Paddle's rnn kernel fills only when it draws a mask): it has no memory to view,
                # and the ops that read it take zeros of its shape, which they then overwrite.
                cached = self._views.get(name)
                if cached is None or cached[0] is not None:
                    cached = (None, np.zeros(tensor.shape, _numpy_dtype(tensor.dtype)))
                    self._views[name] = cached
                views[name] = cached[1]
                continue
            pointer = tensor.data_ptr()
            cached = self._views.get(name)
            if cached is None or cached[0] != pointer:
                cached = (pointer, _view(tensor))
                self._views[name] = cached
            views[name] = cached[1]
        return views

    def grad_view(self, name: str, grad) -> np.ndarray:
        """A view of ``grad`` (the gradient of parameter ``name``), kept while its memory stays
        where it is: clear_grad() zeroes gradients in place, so one view serves every step."""
        pointer = grad.data_ptr()
        cached = self._grad_views.get(name)
        if cached is None or cached[0] != pointer or cached[1].shape != tuple(grad.shape):
            cached = (pointer, _view(grad))
            self._grad_views[name] = cached
        return cached[1]

    def grad_param_names(self, compiled: Compiled) -> list[str]:
        return compiled.capture.grads

    def paddle_executor(self):
        """The Paddle executor that runs the ops left to Paddle in a segmented Layer."""
        if self._executor is None:
            import paddle

            self._executor = paddle.static.Executor(paddle.CPUPlace())
        return self._executor

    # --- calls --------------------------------------------------------------------------------
    def call(self, args: tuple):
        import paddle

        global _ENGINE_CALL
        given = args
        layer = self.layer
        tensors = [a for a in args if isinstance(a, paddle.Tensor)]
        if len(tensors) != len(args):
            # Lists and tuples of tensors (a transformer's (word, position, bias) groups): captured
            # flat, through a Layer that regroups them for the user's forward.
            structure = _input_structure(args)
            if structure is None:
                return self.eager(args, "non-tensor positional inputs (only tensors, None and lists or tuples of "
                                        "them are captured)")
            tensors = _flatten_inputs(args)
            layer = self._regrouping.get(structure)
            if layer is None:
                layer = self._regrouping[structure] = _regrouping_layer(self.layer, structure)
            args = tuple(tensors)
        training = self.layer.training
        held = _layer_tensors(self.layer, [])
        ids = tuple(map(id, held))
        if ids != self._tensor_ids:
            self._layer_changed(ids)
        params = self.named_tensors()
        # Which parameters are frozen is part of the signature: a capture computes gradients for
        # the parameters trainable when it ran, so unfreezing one must re-capture.
        frozen = tuple([t.stop_gradient for t in held])
        wants_grad = paddle.is_grad_enabled() and (
            not all(frozen) or any(not t.stop_gradient for t in tensors))
        key = (training, wants_grad, tuple([(tuple(t.shape), t.dtype, t.stop_gradient) for t in tensors]), frozen)
        if layer is not self.layer:
            key += (_input_structure(given),)
        if key in self.refused:  # (whatever the attributes below: a Layer refused runs eagerly)
            return self.eager(given, None)
        refusal_key = key
        if self._watched is None:
            self._watched = watched_attributes(self.layer)
        if self._watched:  # plain attributes the forward may read: a capture took their values
            key += (tuple([sub.__dict__.get(attr, _UNSET) for sub, attr in self._watched]),)
        compiled = self.compiled.get(key)
        if compiled is None:
            if self._watched:
                self._tell_attribute_captures(refusal_key)
            compiled = self._build(key, list(args), training, wants_grad, layer, refusal_key)
            if compiled is None:
                return self.eager(given, None)
        self.steps += 1
        if not compiled.trains:
            outputs, _ = self.run_forward(compiled, tensors, train=False)
            return self._pack(compiled, outputs)
        if _ENGINE_CALL is None:
            _ENGINE_CALL = _engine_call_class()
        trainable = [params[n] for n in compiled.capture.grads]
        outputs = _ENGINE_CALL.apply(self, compiled, len(tensors), *tensors, *trainable)
        return self._pack(compiled, list(outputs) if isinstance(outputs, (tuple, list)) else [outputs])

    def _layer_changed(self, ids: tuple):
        """The Layer gained, lost or replaced a parameter or buffer (a sublayer set after wrapping):
        the captured programs name the old ones, so every signature is captured anew."""
        if self._tensor_ids:
            log.info("%sLayer %s changed its parameters or buffers: captured again", self.rank_prefix(),
                     type(self.layer).__name__)
        self._renamed_tensors(ids)
        self.compiled.clear()
        self.refused.clear()
        self._watched = None

    def _renamed_tensors(self, ids: tuple):
        """Forgets what was looked up of the Layer's tensors (by name, and their memory's views)."""
        self._tensor_ids = ids
        self._params = None
        self._views.clear()
        self._grad_views.clear()

    def _adopt_tensors_set_by_forward(self):
        """After an eager call: a forward that keeps a tensor in an attribute (``self.gtbox = gtbox``,
        as Paddle's YOLOv3 test model does) gives the Layer a new buffer at every call. That is the
        forward's own doing, not a Layer changed after wrapping: taken as a change, every call captured
        the Layer anew (a trace each step) and repeated its warning. The captures stay; only what
        names the Layer's tensors is refreshed (a capture reads its tensors by name)."""
        ids = tuple(map(id, _layer_tensors(self.layer, [])))
        if ids != self._tensor_ids:
            self._renamed_tensors(ids)

    def _pack(self, compiled, outputs):
        """The Layer's output structure, as Paddle's to_static restores it (a lone value unwrapped)."""
        if compiled.lone_output is None:
            # Whether the structure is one tensor, asked once: restoring it costs 20-40 us a step.
            marker = object()
            try:
                restored = compiled.capture.outputs.restore([marker] * compiled.capture.num_outputs)
            except AssertionError:  # outputs listed more than once: the general path below
                restored = None
            compiled.lone_output = (isinstance(restored, (list, tuple)) and len(restored) == 1
                                    and restored[0] is marker)
        if compiled.lone_output:
            return outputs[0]
        packed = compiled.capture.outputs.restore(list(outputs))
        if packed is not None and len(packed) == 1:
            packed = packed[0]
        return packed

    def _tell_sparse_embeddings(self):
        """Says once, at the Layer's first capture, that its sparse embeddings get dense gradients
        here: the optimizer is the user's, so nothing refuses Paddle's sparse updates that differ from
        their dense forms (docs/dygraph.md)."""
        import paddle

        sparse = [name for name, sub in self.layer.named_sublayers(include_self=True)
                  if isinstance(sub, paddle.nn.Embedding) and getattr(sub, "_sparse", False)]
        if sparse:
            log.warning("%sLayer %s: Embedding(sparse=True) (%s) gets a dense gradient on the engine, averaged "
                        "over the ranks; Paddle's sparse SGD equals its dense SGD, but its sparse Momentum and "
                        "Adam differ from their dense forms: use SGD, or sparse=False, for plain Paddle's "
                        "results", self.rank_prefix(), type(self.layer).__name__, ", ".join(sparse[:4]))

    def _tell_attribute_captures(self, signature: tuple):
        """Says once per Layer when one signature has been captured for many values of the watched
        attributes: each new value costs a capture (a counter read by the forward, changed at every
        step, captures at every step)."""
        count = self._attribute_captures[signature] = self._attribute_captures.get(signature, 0) + 1
        if count == ATTRIBUTE_CAPTURES_TOLD and not self._attribute_captures_told:
            self._attribute_captures_told = True
            names = ", ".join(f"{type(sub).__name__}.{attr}" for sub, attr in self._watched)
            log.warning("%sLayer %s: captured %d times for new values of the plain attributes its forward may "
                        "read (%s); each new value is captured anew. Pass a value that changes at every step as "
                        "a tensor input instead", self.rank_prefix(), type(self.layer).__name__, count, names)

    def _build(self, key, args, training: bool, wants_grad: bool, layer=None, refusal_key=None):
        try:
            compiled = self._compile(args, training, wants_grad, layer if layer is not None else self.layer)
            self._check_reads_own_tensors(compiled)
        except CaptureError as e:
            if self.tensor_parallel:
                raise self._cannot_run_eagerly(str(e)) from e
            if not self.config.fallback:
                raise
            self.refused[refusal_key if refusal_key is not None else key] = str(e)
            if str(e) in self.refused.values() and list(self.refused.values()).count(str(e)) > 1:
                return None  # said once per Layer and reason
            log.warning("%s%s; it runs eagerly in Paddle (inputs %s)", self.rank_prefix(), e,
                        [list(shape) for shape, _, _ in key[2]])
            return None
        self.compiled[key] = compiled
        if len(self.compiled) == 1:
            self._tell_sparse_embeddings()
        if compiled.segmented:
            self.function = next((r.function for r in compiled.runners if hasattr(r, "function")), None)
            where = compiled.summary()
        else:
            self.function = compiled.capture.forward
            where = "the whole program on the engine"
        log.info("%s%s (%s, inputs %s): %s", self.rank_prefix(), type(self.layer).__name__,
                 "training" if training else "eval", [list(shape) for shape, _, _ in key[2]], where)
        return compiled

    def _check_reads_own_tensors(self, compiled):
        """Refuses a capture reading parameters that are not the Layer's: a Layer or parameter made
        inside ``forward`` (``paddle.nn.Linear(4, 2)(h)``) is new at every call, with new values,
        which a captured program would read from the first call's, gone since."""
        if compiled.segmented:
            read = list(compiled.traced.params)
        else:
            read = [name for kind, name in compiled.forward_inputs if kind == "param"]
        owned = self.named_tensors()
        foreign = [name for name in read if name not in owned]
        if foreign:
            raise CaptureError(f"Layer {type(self.layer).__name__}: its forward reads parameters that are not the "
                               f"Layer's ({', '.join(foreign[:4])}{' ...' if len(foreign) > 4 else ''}): a Layer or "
                               f"parameter made inside forward is new at every call, which a captured program cannot "
                               f"follow; make it in __init__")

    def _compile(self, args, training: bool, wants_grad: bool, layer):
        """The whole program on the engine where its converters take every op; else engine
        segments with the other ops run by Paddle between them (``fallback``; segmented.py).
        ``layer``: the Layer, or the one regrouping flat inputs for it (``_regrouping_layer``)."""
        layout = self.layout
        if self.tensor_parallel:
            # Paddle cannot run the tensor-parallel ops on CPU: no segment of the Layer can be left
            # to it (nor, with them, the Layer: see eager()).
            return Compiled(self, capture(layer, args, training, wants_grad, layout=layout))
        if not self.config.fallback:
            return Compiled(self, capture(layer, args, training, wants_grad))
        traced = trace(layer, args, training, wants_grad)
        if not traced.unconverted:
            try:
                return Compiled(self, capture(layer, args, training, wants_grad, traced))
            except RefusedCaptureError:
                pass  # the op a converter refuses runs in Paddle
        from .segmented import SegmentedCompiled

        try:
            return SegmentedCompiled(self, traced)
        except ConversionError as e:
            raise CaptureError(f"Layer {traced.name}: {e}") from e
        except Exception as e:  # never a wrong result: the Layer runs eagerly, the message names the bug
            raise CaptureError(f"Layer {traced.name}: its engine segments could not be built ({type(e).__name__}: "
                               f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}; a bug in paddle_ngraph: "
                               f"please report it with this message)") from e

    @property
    def tensor_parallel(self) -> bool:
        return self.layout.mp_degree > 1

    def _cannot_run_eagerly(self, why: str) -> CaptureError:
        """The error of a tensor-parallel Layer the engine cannot run: Paddle cannot either."""
        return CaptureError(f"{why}; with mp_degree {self.layout.mp_degree} it cannot run eagerly either (Paddle "
                            f"3.3.1 has no CPU kernels for the tensor-parallel ops)")

    def eager(self, args, reason, kwargs=None):
        """Runs the Layer in Paddle; with several ranks, its gradients are averaged after backward."""
        if self.tensor_parallel:
            raise self._cannot_run_eagerly(f"Layer {type(self.layer).__name__}: {reason}")
        if reason and ("eager", reason) not in self.refused:
            self.refused[("eager", reason)] = reason
            log.warning("%sLayer %s runs eagerly in Paddle: %s", self.rank_prefix(), type(self.layer).__name__, reason)
        self.eager_steps += 1
        outputs = self.layer(*args, **(kwargs or {}))
        self._adopt_tensors_set_by_forward()
        if self.dp_transport is not None and self.sync_gradients:
            self._arm_eager_allreduce(outputs)
        return outputs

    def _arm_eager_allreduce(self, outputs):
        """Averages the gradients once the eager backward through this call is over: Paddle's final
        backward hook (it fires once, at the end of the backward running when it is added), added by
        a hook on the outputs' gradients, i.e. by the backward that reaches this Layer, whichever
        parameters it then reaches on each rank. (Waiting for every parameter's gradient would never
        average a Layer with a parameter its forward does not use, nor one whose ranks use different
        parameters: each rank would train on its own gradients. Adding the final hook at the forward
        would average too early where another backward runs first: that of a second Layer whose
        forward ran after this one's, as in Paddle's own gradient-check tests.)"""
        import paddle

        def reached(grad):
            self._average_after_this_backward(agree_first=True)
            return None

        for tensor in paddle.utils.flatten(outputs):
            if isinstance(tensor, paddle.Tensor) and not tensor.stop_gradient:
                tensor.register_hook(reached)

    def _average_after_this_backward(self, agree_first: bool = False):
        """Called during a backward: averages the Layer's gradients once it is over (``_allreduce_eager_grads``).
        ``agree_first`` (an eager backward): first meets the other ranks at the agreement an engine's
        backward starts with (``_ranks_agree``), with a key no captured program has. A rank that runs
        this Layer on the engine at this step (its forward could be captured there, not here: Python
        state changed on this rank only) then learns that the ranks differ and averages after its
        backward too, instead of waiting in a bucketed AllReduce this rank never runs."""
        from paddle.base import core

        if self._eager_armed:  # several outputs or forwards, one backward: one average
            return
        self._eager_armed = True
        if agree_first:
            with self._bounded("gradient agreement"):
                agreed = agree(self.dp_transport, EAGER_AGREEMENT_KEY, name="dygraph_agreement")[0]
        if agree_first and not agreed:
            if not self._eager_disagreement_said:
                self._eager_disagreement_said = True
                log.warning("%sLayer %s runs eagerly here while another rank runs it on the engine at this step; "
                            "both average the gradients after the backward", self.rank_prefix(),
                            type(self.layer).__name__)

        def after_backward():
            self._eager_armed = False
            with self._bounded("gradient average"):
                self._allreduce_eager_grads([p for p in self.layer.parameters() if not p.stop_gradient])

        core.eager._add_backward_final_hook(after_backward)

    def _allreduce_eager_grads(self, params):
        """``allreduce_grads`` for an eager backward, where the ranks may have gradients for
        different parameters: a parameter some rank has a gradient for gets zeros on the others
        before the average (as paddle.DataParallel with find_unused_parameters); one no rank
        has a gradient for keeps none, as in one process on the whole batch."""
        import paddle

        present = np.array([p.grad is not None for p in params], np.float32)
        anywhere = self.dp_transport.allreduce_many([present], "sum", name="dygraph_eager_grad_flags")[0]
        for p, count in zip(params, anywhere):
            if count > 0 and p.grad is None:
                # Of the kind Paddle keeps for this parameter: a sparse embedding's gradient slot,
                # once it held selected rows, refuses a dense tensor.
                p._set_grad_ivar(_no_rows(p) if p.name in self._selected_rows_grads else paddle.zeros(p.shape, p.dtype))
        self.allreduce_grads([p for p, count in zip(params, anywhere) if count > 0])

    def allreduce_grads(self, params):
        """Averages ``param.grad`` in place over the ranks, bucketed (the rare paths: eager Layers,
        the first synchronized backward after ``no_sync``). A selected-rows gradient (an eager
        ``Embedding(sparse=True)``'s: the ranks hold different rows) is averaged dense, as the
        captured backward computes it, and given back as selected rows listing every row, in order
        (Paddle keeps a parameter's gradient of the kind its first backward made)."""
        import paddle

        grads = [(p, p.grad) for p in params if p.grad is not None]
        by_dtype: dict = {}
        for p, g in grads:
            if g.is_selected_rows():
                self._selected_rows_grads.add(p.name)
            by_dtype.setdefault(str(g.dtype), []).append(
                (p, _dense_of_rows(g, p) if g.is_selected_rows() else _view(g), g))
        for entries in by_dtype.values():
            views = [view for _, view, _ in entries]
            reduced = self.dp_transport.allreduce_many(views, self.config.reduction, name="dygraph_grads")
            for (p, view, grad), value in zip(entries, reduced):
                if grad.is_selected_rows():
                    rows = grad.get_selected_rows()
                    rows.set_rows(list(range(value.shape[0])))
                    rows.get_tensor().set(np.ascontiguousarray(value, view.dtype), paddle.CPUPlace())
                else:
                    # A new tensor, not the average written into the old one: a gradient that
                    # clear_grad() zeroed is marked so, and the next backward would overwrite a value
                    # written into it in place (on a rank whose backward did not reach ``p``)
                    # instead of adding to it.
                    p._set_grad_ivar(_paddle_copy(np.ascontiguousarray(value, view.dtype)))
        self.updates += 1

    # --- the executables ------------------------------------------------------------------------
    def run_forward(self, compiled: Compiled, tensors, train: bool):
        args = [_view(t) for t in tensors]
        pending = compiled.pending
        if pending is not None and not pending.done:
            pending.detach_from_arena()  # its backward has not run: the arena is about to be reused
        if compiled.segmented:
            outputs, saved = compiled.forward(args, self.param_views(), train)
            record = None
            if train:
                record = _Saved(compiled, list(tensors), args, saved,
                                self.sync_gradients and self.dp_transport is not None)
                compiled.pending = record
            return _paddle_copies(outputs), record
        inputs = compiled.arrays(compiled.forward_inputs, args)
        outputs = compiled.forward.call(inputs, self.local_transport)
        write_back(outputs, inputs, compiled.state_writeback)
        values = _paddle_copies([outputs[k] for k in compiled.out_positions])
        record = None
        if train:
            record = _Saved(compiled, list(tensors), args, [outputs[k] for k in compiled.saved_positions],
                            self.sync_gradients and self.dp_transport is not None)
            compiled.pending = record
        return values, record

    def run_backward(self, record: _Saved, output_grads, num_args: int) -> list:
        if not record.sync:
            return self._run_backward(record, output_grads, num_args, None)
        with self._bounded("gradient agreement") as watchdog:
            return self._run_backward(record, output_grads, num_args, watchdog)

    def _run_backward(self, record: _Saved, output_grads, num_args: int, watchdog) -> list:
        compiled = record.compiled
        if compiled.segmented:
            return self._run_segmented_backward(record, output_grads, num_args)
        cap = compiled.capture
        seeds = []
        for k, g in enumerate(output_grads):
            seeds.append(_view(g) if g is not None else np.zeros(cap.backward.parameter(f"{SEED_PREFIX}{k}")
                                                                  .output_types[0].shape, np.float32))
        sync = record.sync
        rank_dependent = sync and not self._ranks_agree(compiled, record.args)
        pending_local = sync and self.unsynced and not rank_dependent
        if sync and not pending_local and not rank_dependent:
            executable = compiled.backward_sync
        else:
            executable = compiled.backward_local
        inputs = compiled.arrays(compiled.backward_inputs, record.args, seeds, record.saved)
        synchronizing = executable is compiled.backward_sync
        if watchdog is not None:
            watchdog.start_collectives(executable.collective_progress if synchronizing else lambda: ([], 0, 0))
        outputs = executable.call(inputs, self.transport if synchronizing else self.local_transport)
        if watchdog is not None:
            watchdog.set_phase("gradient average")  # no_sync's sums, or a rank-dependent step's average
        record.done = True
        record.saved = record.tensors = record.args = None
        if compiled.pending is record:
            compiled.pending = None
        grads = [outputs[p] for p in compiled.grad_positions]
        xgrads = {i: outputs[p] for i, p in compiled.xgrad_positions.items()}
        if rank_dependent:
            # Each rank's own gradients, then the average of everything accumulated (no_sync's sums
            # included) once the backward is over, zeros where a rank has none: as for an eager Layer.
            delivered = self._deliver(cap, grads, xgrads, False, False, num_args)
            self.unsynced = False
            self._average_after_this_backward()
            return delivered
        return self._deliver(cap, grads, xgrads, sync, pending_local, num_args)

    def _ranks_agree(self, compiled, inputs) -> bool:
        """Whether every rank's backward of this step can run the bucketed AllReduce with the others':
        the same parameters get gradients and the backward functions are the same. One small
        AllReduce (distributed.agreement) at each synchronized backward, so that
        the ranks agree at every step, whatever signature each meets: ranks given batches of
        different sizes (Paddle's sparse_embedding_diff_length tests, or a last batch smaller on
        one rank) capture functions of other shapes, and a rank meeting a new one would otherwise
        wait in a collective the others do not run. Python in the forward that depends on the rank
        (``self.w1 if rank == 1 else self.w2``) captures a program per rank whose buckets would
        hold different parameters at the same places (the AllReduce would add one rank's gradient
        of w1 to another's of w2). Where they do not agree, each rank's backward runs on the engine
        without AllReduce and the gradients are averaged after it, as for an eager Layer (zeros
        where a rank has none, as paddle.DataParallel(find_unused_parameters=True))."""
        if compiled.agreement_key is None:
            import hashlib

            names = list(self.named_tensors())
            positions = [names.index(g) for g in compiled.capture.grads]
            lines = [repr(positions), *compiled.agreement_lines()]
            digest = hashlib.sha256("\n".join(lines).encode()).digest()
            compiled.agreement_key = int.from_bytes(digest[:6], "big") or EAGER_AGREEMENT_KEY + 1
        if agree(self.dp_transport, compiled.agreement_key, name="dygraph_agreement")[0]:
            return True
        if not compiled.disagreement_said:  # said by each rank for its own signature (no collective)
            compiled.disagreement_said = True
            log.warning("%sLayer %s (inputs %s): the ranks' captured programs differ at this step (other input "
                        "shapes, Python in the forward that depends on the rank, or a rank running the Layer eagerly); "
                        "each rank's backward runs on "
                        "the engine without AllReduce and the gradients are averaged after it, zeros where a rank "
                        "has none, as paddle.DataParallel(find_unused_parameters=True)", self.rank_prefix(),
                        type(self.layer).__name__, [list(a.shape) for a in inputs])
        return False

    def _run_segmented_backward(self, record: _Saved, output_grads, num_args: int) -> list:
        """The backward pieces. When synchronizing, the engine segments average the gradients they
        make; those Paddle ops make are averaged here (one AllReduce per dtype)."""
        compiled = record.compiled
        seeds = [_view(g) if g is not None else zeros for g, zeros in zip(output_grads, compiled.seed_types)]
        sync = record.sync
        rank_dependent = sync and not self._ranks_agree(compiled, record.args)
        pending_local = sync and self.unsynced and not rank_dependent
        transport = self.dp_transport if sync and not pending_local and not rank_dependent else None
        if self.watchdog is not None and sync:
            # The pieces' compute may outlast timeout_s: only the waits around them are bounded.
            self.watchdog.start_collectives(lambda: ([], 0, 0))
        grads, input_grads, averaged = compiled.backward(record.args, self.param_views(), record.saved, seeds,
                                                         transport)
        if self.watchdog is not None and sync:
            self.watchdog.set_phase("gradient average")
        record.done = True
        record.saved = record.tensors = record.args = None
        if compiled.pending is record:
            compiled.pending = None
        rest = [k for k, done in enumerate(averaged) if not done]
        if transport is not None and rest:
            grads = list(grads)
            by_dtype: dict = {}
            for k in rest:
                grads[k] = np.array(grads[k], copy=True)
                by_dtype.setdefault(grads[k].dtype.str, []).append(k)
            for positions in by_dtype.values():
                reduced = self.dp_transport.allreduce_many([grads[k] for k in positions], self.config.reduction,
                                                        name="dygraph_paddle_grads")
                for k, value in zip(positions, reduced):
                    np.copyto(grads[k], value, casting="no")
        if rank_dependent:  # as for a Layer captured whole (run_backward)
            delivered = self._deliver(compiled.capture, grads, input_grads, False, False, num_args)
            self.unsynced = False
            self._average_after_this_backward()
            return delivered
        return self._deliver(compiled.capture, grads, input_grads, sync, pending_local, num_args)

    def _deliver(self, cap, grad_values, xgrad_values: dict, sync: bool, pending_local: bool, num_args: int) -> list:
        """The gradients for autograd, of the inputs and of the parameters, and the averaging of
        what ``no_sync`` accumulated. Parameter gradients go through Paddle's accumulation, which
        runs the hooks registered on the parameters (``param.register_hook``) and adds them to
        ``param.grad``; only the first synchronized backward after ``no_sync`` adds them itself, as
        the sum must be in ``param.grad`` before it is averaged (hooks then see no gradient)."""
        params = self.named_tensors()
        if not pending_local:
            grads = _paddle_copies(list(grad_values))
        else:
            grads = []
            for name, value in zip(cap.grads, grad_values):
                existing = params[name].grad
                if existing is not None and existing._is_initialized():
                    # Paddle's accumulation, param.grad + new, in place.
                    view = self.grad_view(name, existing)
                    np.add(view, value, out=view)
                    grads.append(None)
                else:
                    grads.append(_paddle_copy(value))
        if pending_local:
            # The first synchronized backward after no_sync: average the accumulated gradients, as
            # paddle.DataParallel does (their sum over micro-batches, then the mean over ranks).
            # Gradients handed to autograd below are not in param.grad yet: reduce them first.
            handed = [g for g in grads if g is not None]
            if handed:
                views = [_view(g) for g in handed]
                reduced = self.dp_transport.allreduce_many(views, self.config.reduction, name="dygraph_new_grads")
                for view, value in zip(views, reduced):
                    np.copyto(view, value, casting="no")
            present = [params[n] for n, g in zip(cap.grads, grads) if g is None]
            self.allreduce_grads(present)
            self.updates -= 1  # counted once below
            self.unsynced = False
        elif not sync and self.dp_transport is not None:
            self.unsynced = True
        if sync:
            self.updates += 1
        arg_grads = [None] * num_args
        if xgrad_values:
            for i, tensor in zip(xgrad_values, _paddle_copies(list(xgrad_values.values()))):
                arg_grads[i] = tensor
        return arg_grads + grads


def _layer_tensors(layer, out: list) -> list:
    """The Layer's parameters and buffers, walked as ``Layer.parameters()`` does but at a third of
    its cost (it runs every call: 66 us for a ResNet-50)."""
    out.extend([t for t in layer._parameters.values() if t is not None])
    out.extend([t for t in layer._buffers.values() if t is not None])
    for sub in layer._sub_layers.values():
        if sub is not None:
            _layer_tensors(sub, out)
    return out


def check_options(config: dict):
    """Options of the static path that have no meaning here."""
    if config.zero_stage:
        raise ConfigError("zero_stage: 1 shards an optimizer the engine runs; in dygraph the optimizer is yours "
                          "and runs in Paddle, so zero_stage must be 0")
    if config.accumulate_steps != 1:
        raise ConfigError("accumulate_steps: in dygraph, accumulate with `with model.no_sync():` for the first k-1 "
                          "micro-batches (as with paddle.DataParallel); accumulate_steps must be 1")
    if config.localsgd_k_steps:
        raise ConfigError("localsgd_k_steps: local SGD is for static programs (the engine runs their optimizer "
                          "update); in dygraph the optimizer is yours, so localsgd_k_steps must be 0")
    if config.recompute_checkpoints:
        raise ConfigError("recompute_checkpoints: names forward variables of a static program; a dygraph Layer's "
                          "captured program has none to name (use paddle.distributed.fleet.utils.recompute in "
                          "the Layer instead); recompute_checkpoints must be empty")
    if config.sync_batch_norm:
        raise ConfigError("sync_batch_norm: not available in dygraph yet (each rank normalizes its own batch, as "
                          "paddle.DataParallel without SyncBatchNorm); sync_batch_norm must be false")


def _input_structure(args):
    """The nesting of positional inputs that are tensors or (nested) lists and tuples of tensors, as
    a hashable value: ``"t"`` for a tensor, ``"none"`` for None (an optional input left out, YOLOv3's
    ``gtbox`` at inference: part of the signature, passed to the forward as it is),
    ``("list"|"tuple", (...))`` for a sequence; None when anything else is among them (the Layer
    then runs eagerly)."""
    import paddle

    def of(value):
        if isinstance(value, paddle.Tensor):
            return "t"
        if value is None:
            return "none"
        if isinstance(value, (list, tuple)) and value:
            inner = tuple(of(v) for v in value)
            return None if None in inner else (type(value).__name__, inner)
        return None

    structure = tuple(of(a) for a in args)
    return None if None in structure else structure


def _flatten_inputs(args) -> list:
    flat = []

    def add(value):
        if isinstance(value, (list, tuple)):
            for v in value:
                add(v)
        elif value is not None:
            flat.append(value)

    for a in args:
        add(a)
    return flat


def _regrouping_layer(layer, structure):
    """A Layer taking the flat tensors of ``structure`` and calling ``layer`` with them regrouped.
    Its forward is generated with the regrouping written out (``inner([x0, x1], x2)``), as the
    translator reads the source of what it converts and refuses ``*args``. It holds ``layer`` as its
    only sublayer (the same parameters, under the same names) and takes its class name, which the
    capture's messages show."""
    import paddle

    from ..frontend.dygraph import function_with_source

    count = [0]

    def expression(node):
        if node == "none":
            return "None"
        if node == "t":
            count[0] += 1
            return f"x{count[0] - 1}"
        kind, inner = node
        items = ", ".join(expression(n) for n in inner)
        return f"[{items}]" if kind == "list" else f"({items},)"

    call = ", ".join(expression(node) for node in structure)
    names = ", ".join(f"x{i}" for i in range(count[0]))
    forward = function_with_source("forward", f"def forward(self, {names}):\n    return self.inner({call})\n")

    def init(self, inner):
        paddle.nn.Layer.__init__(self)
        self.inner = inner

    regrouping = type(type(layer).__name__, (paddle.nn.Layer,), {"__init__": init, "forward": forward})(layer)
    regrouping.training = layer.training
    return regrouping
