"""Runs a captured dygraph Layer on the engine, glued to eager autograd.

``LayerEngine.call(args)`` is what the wrapper's ``forward`` does. Per input signature (mode,
whether gradients are wanted, shapes and dtypes of the inputs) the Layer is captured once
(``frontend/dygraph.py``) and compiled into:

- a forward executable: the outputs, the values backward needs (``saved:*``) and the batch-norm
  running statistics, which it writes into the Layer's buffers in place;
- a backward executable that ends in the bucketed AllReduce of the parameter gradients
  (``passes/insert_allreduce.average_gradient_results``; the CPU backend overlaps each bucket
  with the rest of backward), and one without collectives, for ``no_sync``.

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

import itertools
import logging

import numpy as np

from ..errors import ConfigError
from ..frontend.dygraph import GRAD_PREFIX, OUT_PREFIX, SEED_PREFIX, XGRAD_PREFIX, Capture, CaptureError, capture
from ..ir.roles import Role, written_back
from ..backends.base import write_back, writeback_positions
from ..ir import Function
from ..passes.pipeline import Facts, build_passes, run_pipeline

log = logging.getLogger("paddle_ngraph.dygraph")


_NUMPY = {"paddle.float32": np.float32, "paddle.float64": np.float64, "paddle.float16": np.float16,
          "paddle.int32": np.int32, "paddle.int64": np.int64, "paddle.int8": np.int8, "paddle.uint8": np.uint8,
          "paddle.bool": np.bool_, "paddle.int16": np.int16}


def _view(tensor) -> np.ndarray:
    """A NumPy array over the memory of a dense CPU Paddle tensor, without a copy. The caller keeps
    the tensor alive as long as the array is used (DLPack would, but refuses tensors that require
    gradients, and detach() costs more than the whole view)."""
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    dtype = _NUMPY.get(str(tensor.dtype))
    if _array_at is None or dtype is None:
        return np.from_dlpack(tensor.detach())
    return _array_at(tensor.data_ptr(), dtype, tuple(tensor.shape))


try:
    from .._cpu import array_at as _array_at
except ImportError:  # the native library is not built: DLPack
    _array_at = None


def _to_paddle(array: np.ndarray):
    """A Paddle tensor owning ``array`` (no copy)."""
    import paddle

    return paddle.utils.dlpack.from_dlpack(array)


class Compiled:
    """One signature of one Layer: its capture and executables."""

    def __init__(self, engine: "LayerEngine", cap: Capture):
        self.capture = cap
        self.engine = engine
        compiler = engine.compiler
        forward, config, nranks = cap.forward, engine.config, engine.transport.size
        # The forward and the backward without collectives take the passes one rank takes (the
        # optimizer is the user's, in Paddle: nothing else applies); the synchronizing backward
        # takes the gradient AllReduce as well.
        run_pipeline(forward, build_passes(config, 1))
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
            run_pipeline(backward, build_passes(config, 1))
            self.backward_local = compiler.compile(backward)
            grads = [f"{GRAD_PREFIX}{p}" for p in cap.grads]
            if nranks > 1 and grads:
                averaged = Function(backward.parameters, backward.results, name=backward.name)
                run_pipeline(averaged, build_passes(config, nranks, Facts(gradient_results=grads)))
                self.backward_sync_function = averaged
                self.backward_sync = compiler.compile(averaged)
            else:
                self.backward_sync_function = backward
                self.backward_sync = self.backward_local
            results = list(backward.results)
            self.grad_positions = [results.index(f"{GRAD_PREFIX}{p}") for p in cap.grads]
            self.xgrad_positions = {i: results.index(f"{XGRAD_PREFIX}{i}") for i in cap.input_grads}
            self.backward_inputs = self._binding(backward.parameters)
        self.checked = False

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
            return tuple(outputs)

        @staticmethod
        def backward(ctx, *output_grads):
            return tuple(ctx.engine.run_backward(ctx.record, output_grads, ctx.num_args))

    return _EngineCall


_ENGINE_CALL = None
_ids = itertools.count(1)


class LayerEngine:
    """The engine of one wrapped Layer, listed by ``paddle_ngraph.engines()``: ``steps`` counts
    its forward calls, ``updates`` the gradient synchronizations (backward passes with AllReduce)."""

    def __init__(self, layer, config: dict, transport):
        from ..backends import backend_for
        from ..transpiler.engine import register_engine

        self.layer = layer
        self.config = config
        self.transport = transport
        self.compiler = backend_for(config)
        self.compiled: dict[tuple, Compiled | None] = {}
        self.refused: dict[tuple, str] = {}
        self.steps = 0
        self.updates = 0
        self.eager_steps = 0
        self.sync_gradients = True  # False inside no_sync()
        self.unsynced = False       # gradients accumulated under no_sync, not yet averaged
        self._params = None
        self._views: dict[str, tuple[int, np.ndarray]] = {}
        self.function = None
        register_engine(self)

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
            pointer = tensor.data_ptr()
            cached = self._views.get(name)
            if cached is None or cached[0] != pointer:
                cached = (pointer, _view(tensor))
                self._views[name] = cached
            views[name] = cached[1]
        return views

    def grad_param_names(self, compiled: Compiled) -> list[str]:
        return compiled.capture.grads

    # --- calls --------------------------------------------------------------------------------
    def call(self, args: tuple):
        import paddle

        global _ENGINE_CALL
        tensors = [a for a in args if isinstance(a, paddle.Tensor)]
        if len(tensors) != len(args):
            return self.eager(args, "non-tensor positional inputs")
        training = self.layer.training
        params = self.named_tensors()
        wants_grad = paddle.is_grad_enabled() and (
            any(not params[n].stop_gradient for n in params) or any(not t.stop_gradient for t in tensors))
        key = (training, wants_grad, tuple((tuple(t.shape), str(t.dtype), t.stop_gradient) for t in tensors))
        if key in self.refused:
            return self.eager(args, None)
        compiled = self.compiled.get(key)
        if compiled is None:
            compiled = self._build(key, list(args), training, wants_grad)
            if compiled is None:
                return self.eager(args, None)
        self.steps += 1
        if compiled.capture.backward is None:
            outputs, _ = self.run_forward(compiled, tensors, train=False)
            return self._pack(compiled, outputs)
        if _ENGINE_CALL is None:
            _ENGINE_CALL = _engine_call_class()
        trainable = [params[n] for n in compiled.capture.grads]
        outputs = _ENGINE_CALL.apply(self, compiled, len(tensors), *tensors, *trainable)
        return self._pack(compiled, list(outputs) if isinstance(outputs, (tuple, list)) else [outputs])

    def _pack(self, compiled, outputs):
        """The Layer's output structure, as Paddle's to_static restores it (a lone value unwrapped)."""
        packed = compiled.capture.outputs.restore(list(outputs))
        if packed is not None and len(packed) == 1:
            packed = packed[0]
        return packed

    def _build(self, key, args, training: bool, wants_grad: bool):
        try:
            cap = capture(self.layer, args, training, wants_grad)
            compiled = Compiled(self, cap)
        except CaptureError as e:
            if not self.config.fallback:
                raise
            self.refused[key] = str(e)
            if str(e) in self.refused.values() and list(self.refused.values()).count(str(e)) > 1:
                return None  # said once per Layer and reason
            log.warning("%s%s; it runs eagerly in Paddle (inputs %s)", self.rank_prefix(), e,
                        [list(shape) for shape, _, _ in key[2]])
            return None
        self.compiled[key] = compiled
        self.function = cap.forward
        return compiled

    def eager(self, args, reason, kwargs=None):
        """Runs the Layer in Paddle; with several ranks, its gradients are averaged after backward."""
        if reason and ("eager", reason) not in self.refused:
            self.refused[("eager", reason)] = reason
            log.warning("%sLayer %s runs eagerly in Paddle: %s", self.rank_prefix(), type(self.layer).__name__, reason)
        self.eager_steps += 1
        if self.transport.size > 1 and self.sync_gradients:
            self._arm_eager_allreduce()
        return self.layer(*args, **(kwargs or {}))

    def _arm_eager_allreduce(self):
        """After the eager backward has accumulated every parameter's gradient, average them (the
        last post-accumulation hook to fire does it)."""
        params = [p for p in self.layer.parameters() if not p.stop_gradient]
        if getattr(self, "_eager_hooks", None) is None:
            self._eager_hooks = []
            self._eager_ready = set()

            def make_hook(p):
                def hook():
                    self._eager_ready.add(p.name)
                    if len(self._eager_ready) == len(params):
                        self._eager_ready.clear()
                        self.allreduce_grads(params)
                return hook

            for p in params:
                self._eager_hooks.append(p._register_backward_hook(make_hook(p)))

    def allreduce_grads(self, params):
        """Averages ``param.grad`` in place over the ranks, bucketed (the rare paths: eager Layers,
        the first synchronized backward after ``no_sync``)."""
        grads = [(p, p.grad) for p in params if p.grad is not None]
        by_dtype: dict = {}
        for p, g in grads:
            by_dtype.setdefault(str(g.dtype), []).append(_view(g))
        for views in by_dtype.values():
            reduced = self.transport.allreduce_many(views, self.config.reduction, name="dygraph_grads")
            for view, value in zip(views, reduced):
                np.copyto(view, value, casting="no")
        self.updates += 1

    # --- the executables ------------------------------------------------------------------------
    def run_forward(self, compiled: Compiled, tensors, train: bool):
        args = [_view(t) for t in tensors]
        pending = compiled.pending
        if pending is not None and not pending.done:
            pending.detach_from_arena()  # its backward has not run: the arena is about to be reused
        inputs = compiled.arrays(compiled.forward_inputs, args)
        outputs = compiled.forward.call(inputs, None)
        write_back(outputs, inputs, compiled.state_writeback)
        values = [_to_paddle(np.array(outputs[k], copy=True)) for k in compiled.out_positions]
        record = None
        if train:
            record = _Saved(compiled, list(tensors), args, [outputs[k] for k in compiled.saved_positions],
                            self.sync_gradients and self.transport.size > 1)
            compiled.pending = record
        return values, record

    def run_backward(self, record: _Saved, output_grads, num_args: int) -> list:
        compiled = record.compiled
        cap = compiled.capture
        seeds = []
        for k, g in enumerate(output_grads):
            seeds.append(_view(g) if g is not None else np.zeros(cap.backward.parameter(f"{SEED_PREFIX}{k}")
                                                                  .output_types[0].shape, np.float32))
        sync = record.sync
        pending_local = sync and self.unsynced
        if sync and not pending_local:
            if not compiled.checked:
                from ..distributed import check_consistency

                check_consistency(compiled.backward_sync_function, self.transport)
                compiled.checked = True
            executable = compiled.backward_sync
        else:
            executable = compiled.backward_local
        inputs = compiled.arrays(compiled.backward_inputs, record.args, seeds, record.saved)
        outputs = executable.call(inputs, self.transport if executable is compiled.backward_sync else None)
        record.done = True
        record.saved = record.tensors = record.args = None
        if compiled.pending is record:
            compiled.pending = None
        params = self.named_tensors()
        grads = []
        for name, position in zip(cap.grads, compiled.grad_positions):
            param = params[name]
            existing = param.grad
            if existing is not None and existing._is_initialized():
                # Paddle's accumulation, param.grad + new, in place.
                view = _view(existing)
                np.add(view, outputs[position], out=view)
                grads.append(None)
            else:
                grads.append(_to_paddle(np.array(outputs[position], copy=True)))
        if pending_local:
            # The first synchronized backward after no_sync: average the accumulated gradients, as
            # paddle.DataParallel does (their sum over micro-batches, then the mean over ranks).
            # Gradients handed to autograd below are not in param.grad yet: reduce them first.
            handed = [g for g in grads if g is not None]
            if handed:
                views = [_view(g) for g in handed]
                reduced = self.transport.allreduce_many(views, self.config.reduction, name="dygraph_new_grads")
                for view, value in zip(views, reduced):
                    np.copyto(view, value, casting="no")
            present = [params[n] for n, g in zip(cap.grads, grads) if g is None]
            self.allreduce_grads(present)
            self.updates -= 1  # counted once below
            self.unsynced = False
        elif not sync and self.transport.size > 1:
            self.unsynced = True
        if sync:
            self.updates += 1
        arg_grads = [None] * num_args
        for i, position in compiled.xgrad_positions.items():
            arg_grads[i] = _to_paddle(np.array(outputs[position], copy=True))
        return arg_grads + grads


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
    if config.mp_degree != 1:
        raise ConfigError("mp_degree: tensor parallelism runs in static legacy programs only so far "
                          "(docs/model-parallel.md); in dygraph mp_degree must be 1")
