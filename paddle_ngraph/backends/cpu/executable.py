"""Compiles a function for the native executor and runs it.

A function may have dynamic dimensions (the batch); native kernels need concrete
shapes. So ``call`` specializes the function to the shapes of its inputs on first
sight of them (clone with concrete parameter types, compile passes, plan, native
build) and caches the result per shape signature: a training loop with a fixed
batch builds once; a smaller last batch builds once more.

Compile passes, in the pass manager (validation after each, dumps with
PADDLE_NGRAPH_DUMP_PASSES): eliminate_duplicates, then this backend's own passes (``passes/``):
fuse_matmul_bias, liveness, memory_plan.

A function marked for bfloat16 (``precision: bf16``, passes/mixed_precision.py) runs in float32
here, said once per process (precision.py): the specializations drop the marks.
"""
from __future__ import annotations

import os
from collections import OrderedDict

import numpy as np

from ...errors import ExecutionError, TransportError
from ..base import check_input
from ...ir import DType, Function, clone_function
from ...ir.ops import Parameter
from ...ir.ops.collective import COLLECTIVE_OPS
from ...passes import PassManager
from ...passes.eliminate_duplicates import EliminateDuplicates
from ...passes.mixed_precision import bf16_nodes, clear_bf16
from .. import timeline
from ..base import Backend, Executable, collective_labels, collective_tensor_names, register_backend
from ..interpreter.bfloat16 import kernel_for as reference_kernel_for, touches_bfloat16
from ..interpreter.kernels import KERNELS as REFERENCE_KERNELS
from . import precision
from .passes.fuse_matmul_bias import FuseMatMulBias
from .passes.liveness import IN_PLACE_COLLECTIVES, Liveness
from .passes.memory_plan import MemoryPlan
from .work import threads_for

_MAX_SPECIALIZATIONS = 8


def _native():
    from ... import _cpu

    return _cpu


def local_ranks() -> int:
    """Ranks of this job on this node, from the launcher (1 without one)."""
    for variable in ("OMPI_COMM_WORLD_LOCAL_SIZE", "PADDLE_LOCAL_SIZE", "LOCAL_WORLD_SIZE"):
        value = os.environ.get(variable)
        if value and value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def default_threads() -> int:
    """Cores available to this process divided by the ranks on this node: ranks must not oversubscribe."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // local_ranks())


def refuses_bfloat16(node) -> bool:
    """The native kernels compute float32, float64 and integers; bfloat16 (Convert included) is
    refused when the kernels are built. Collectives are the exception: those on bfloat16 take the
    Python path, which reduces them as the INTERPRETER does."""
    return node.op_type not in COLLECTIVE_OPS and node.op_type not in ("Parameter", "Constant") and touches_bfloat16(node)


def touches_float16(node) -> bool:
    return (any(i.type.dtype is DType.float16 for i in node.inputs)
            or any(t.dtype is DType.float16 for t in node.output_types))


def refuses_float16(node) -> bool:
    """The native kernels have no float16 either (Convert included: a program casting to float16, as
    Paddle's FP16AllReduceOptimizer does around each gradient, would fail in the first step's
    compile); collectives take the Python path, which reduces float16 in float32."""
    return node.op_type not in COLLECTIVE_OPS and node.op_type not in ("Parameter", "Constant") and touches_float16(node)


class Specialization:
    """The function compiled for one set of input shapes."""

    def __init__(self, function: Function, threads: int, transport, inplace: dict[str, str],
                 check_finite: bool = False):
        self.function = function
        self.check_finite = check_finite
        self.fused = FuseMatMulBias()
        self.deduplicated = EliminateDuplicates()
        self.liveness = Liveness(inplace)
        self.memory = MemoryPlan(self.liveness)
        PassManager([self.deduplicated, self.fused, self.liveness, self.memory]).run(function)
        self.transport = transport
        self.collectives = []
        self.threads = threads  # compute threads of its steps (work.py: one for a small step)
        self.native = self._build(threads)
        self.labels = collective_labels(function, self.collectives)
        self._trace_descriptions = None
        self.progress_base = (0, 0)  # the native counters at the start of the running step

    def _build(self, threads: int):
        cpu = _native()
        native = cpu.NativeExecutable()
        native.set_arena_size(self.memory.arena_bytes)
        native.set_num_inputs(len(self.function.parameters))
        native.set_threads(threads)
        native.set_check_finite(self.check_finite)
        live = self.liveness
        root_buffer = {}
        index = {p.id: i for i, p in enumerate(self.function.parameters)}
        # The parameters that results overwrite in place get a second buffer, which those results
        # (and views of them) are written to: the parameter's memory, unless a call gives other
        # memory for it (``call``'s ``outputs``). The parameter's own value is read from the input.
        overwritten = set(live.inplace.values())
        output_buffer = {}
        for key, root in live.roots.items():
            if root.kind == "arena":
                root_buffer[key] = native.add_arena_buffer(self.memory.offsets[key], root.nbytes)
            elif root.kind == "input":
                root_buffer[key] = native.add_input_buffer(index[key[1]], root.nbytes)
                if key[1] in overwritten:
                    output_buffer[key] = native.add_output_buffer(index[key[1]], root.nbytes)
        for node in self.function.ordered_nodes():
            if node.op_type == "Constant":
                value = np.ascontiguousarray(node.attrs["value"], dtype=node.output_types[0].dtype.numpy)
                root_buffer[("value", node.id, 0)] = native.add_constant_buffer(value.reshape(-1).view(np.uint8))
        value_buffer = {}

        def replaces_input(output) -> bool:
            """Whether a value in an overwritten parameter's storage is a new value (an in-place
            result or a view of one) rather than the parameter or a view of it."""
            while output.node.op_type == "Reshape":
                output = output.node.inputs[0]
            return not isinstance(output.node, Parameter)

        def buffer_of(output):
            value = (output.node.id, output.index)
            if value not in value_buffer:
                root = live.value_root[value]
                base = output_buffer[root] if root in output_buffer and replaces_input(output) else root_buffer[root]
                offset, nbytes = live.value_offset[value], output.type.nbytes()
                if offset == 0 and nbytes == live.roots[root].nbytes:
                    value_buffer[value] = base
                else:
                    value_buffer[value] = native.add_view_buffer(base, offset, nbytes)
            return value_buffer[value]

        collective_index = {}
        users = self.function.users()
        for step in live.steps:
            node = step.node
            if step.kind == "compute":
                native.add_compute(node, [buffer_of(i) for i in node.inputs], [buffer_of(o) for o in node.outputs])
            elif step.kind == "start":
                region = root_buffer[("region", node.id)] if node.op_type in IN_PLACE_COLLECTIVES else -1
                collective_index[node.id] = native.add_collective_start(
                    node, len(self.collectives), [buffer_of(i) for i in node.inputs],
                    [buffer_of(o) for o in node.outputs], region, collective_tensor_names(node, users))
                self.collectives.append(node)
            else:
                native.add_collective_wait(collective_index[node.id])
        results = list(self.function.results.values())
        # Results written into an input's buffer are returned as that input array itself, which
        # keeps the memory alive as long as the result is (a view would not).
        self.result_is_input = {k: index[live.inplace[(o.node.id, o.index)]] for k, o in enumerate(results)
                                if (o.node.id, o.index) in live.inplace}
        # Results whose memory is an input's (in place, or a view such as a Reshape of a feed): the
        # only ones that may not outlive the caller's buffers.
        self.results_in_inputs = frozenset(k for k, o in enumerate(results)
                                           if live.roots[live.value_root[(o.node.id, o.index)]].kind == "input")
        native.set_results([buffer_of(o) for o in results], [(o.type.dtype.numpy, o.type.shape) for o in results])
        if self.collectives:
            native.use_fallback(self._run_collective)
            self._use_native_communicator(native)
        return native

    def trace_descriptions(self) -> list:
        """What each native step, then each collective's transfer, is in the timeline: (name,
        category, thread, args), in the order of native.last_trace()."""
        if self._trace_descriptions is None:
            described = []
            for step in self.liveness.steps:
                node = step.node
                if step.kind == "compute":
                    described.append((node.name, timeline.update_category(node) or node.op_type, "compute", {}))
                else:
                    bucket = timeline.bucket_of(node)
                    args = {"bucket": bucket, "bytes": timeline.collective_bytes(node)}
                    # Start hands the bucket to the communication thread, after copying into its
                    # region the inputs the memory plan could not place there (step.pack: none for
                    # ordinary gradients); the outputs are views of the region, so there is no unpack.
                    kind = "pack" if step.kind == "start" else "wait"
                    if step.kind == "start":
                        args["packed_bytes"] = sum(node.inputs[k].type.nbytes() for k in step.pack)
                    described.append((f"{kind} {bucket}", kind, "compute", args))
            for node in self.collectives:
                bucket = timeline.bucket_of(node)
                described.append((f"{node.op_type} {bucket}", "transfer", "comm", timeline.collective_args(node)))
            self._trace_descriptions = described
        return self._trace_descriptions

    def last_spans(self) -> "timeline.Spans":
        step_times, transfer_times = self.native.last_trace()
        return timeline.Spans(self.trace_descriptions(), step_times + transfer_times)

    def _use_native_communicator(self, native):
        """AllReduce from C++ on the communication thread where the transport allows
        (``Transport.native_link``): MPI directly, where the backend is built with it, or a C ABI
        (oneCCL's). Other collectives and dtypes go through the Python fallback."""
        transport = self.transport
        if transport is None or transport.size <= 1:
            return
        link = transport.native_link()
        if link is None:
            return
        if link.kind == "mpi":
            if _native().has_native_mpi():
                native.use_native_mpi(*link.handles, shared_memory=transport.shared_memory)
        elif link.kind == "mpi-comm":
            if _native().has_native_mpi():
                native.use_native_mpi_comm(*link.handles)
        elif link.kind == "functions":
            native.use_native_functions(transport.rank, transport.size, *link.handles,
                                        shared_memory=transport.shared_memory)
        else:
            raise TransportError(f"rank {transport.rank}: the {transport.name} transport's native link "
                                 f"'{link.kind}' is not one of mpi, mpi-comm, functions")
        self._use_native_group_communicators(native)

    def _use_native_group_communicators(self, native):
        """Collectives over groups of ranks (their ``group`` attribute) from C++ where the group's
        transport links natively (MPI); the others go through the Python fallback. In the order of
        the groups' rank tuples on every rank, as ``Transport.make_groups`` makes them."""
        groups = sorted({tuple(n.attrs.get("group", ())) for n in self.collectives} - {()})
        if not groups or not _native().has_native_mpi():
            return
        for ranks in groups:
            link = self.transport.group(ranks).native_group_link()
            if link is not None and link.kind == "mpi-group":
                native.use_native_mpi_group(list(ranks), *link.handles)

    def _run_collective(self, index: int, in_addresses: list, out_addresses: list):
        """A collective the native communicator does not handle: the reference kernel over the
        transport, on the communication thread (which holds the GIL only for this)."""
        cpu = _native()
        node = self.collectives[index]
        inputs = [cpu.array_at(a, i.type.dtype.numpy, i.type.shape) for a, i in zip(in_addresses, node.inputs)]
        outputs = reference_kernel_for(node, REFERENCE_KERNELS)(node, inputs, self.transport)
        for address, t, value in zip(out_addresses, node.output_types, outputs):
            np.copyto(cpu.array_at(address, t.dtype.numpy, t.shape), value, casting="no")


class CPUExecutable(Executable):
    def __init__(self, function: Function, threads: int = 0, inplace_results: dict[str, str] | None = None,
                 check_finite: bool = False):
        self.function = function
        self.check_finite = check_finite
        self.threads = threads or default_threads()
        # Unless told how many, a step too small to share runs on one thread (work.py).
        self.auto_threads = not threads
        self.inplace_results = dict(inplace_results or {})
        self._specializations: OrderedDict[tuple, Specialization] = OrderedDict()
        self._transport = None
        self.last = None  # the specialization of the last call, for reports
        # What call() checks each input against, looked up once: a step's Python cost is part of
        # every AllReduce's fixed cost (tools/bench_allreduce.py) and of every small step.
        self._expected = [(p.name, np.dtype(p.output_types[0].dtype.numpy), p.output_types[0])
                          for p in function.parameters]
        kernels = set(_native().registered_op_types())
        missing = sorted({n.op_type for n in function.ordered_nodes()
                          if n.op_type not in kernels and n.op_type not in COLLECTIVE_OPS
                          and n.op_type not in ("Parameter", "Constant")})
        if missing:
            raise ExecutionError(f"the CPU backend has no kernel for op type(s): {', '.join(missing)}")
        refused = [f"'{n.name}' ({n.op_type})" for n in function.ordered_nodes() if refuses_float16(n)]
        if refused:
            raise ExecutionError(f"the CPU backend has no float16 kernels; nodes reading or making float16: "
                                 f"{', '.join(refused[:8])}{' ...' if len(refused) > 8 else ''} (the INTERPRETER "
                                 f"computes them; transpile with fallback leaves their ops to Paddle)")
        refused = [f"'{n.name}' ({n.op_type})" for n in function.ordered_nodes() if refuses_bfloat16(n)]
        if refused:
            raise ExecutionError(f"the CPU backend has no bfloat16 kernels; nodes reading or making bfloat16: "
                                 f"{', '.join(refused[:8])}{' ...' if len(refused) > 8 else ''} (the INTERPRETER "
                                 f"computes them; transpile with fallback leaves their ops to Paddle)")
        # Nodes marked to compute in bfloat16 that this backend runs in float32 (None: it would honour them).
        self.float32_instead = None
        if bf16_nodes(function):
            self.float32_instead = precision.float32_reason()
            if self.float32_instead is not None:
                precision.tell_once(self.float32_instead)

    @property
    def peak_bytes(self) -> int | None:
        """The memory plan's arena of the last call's specialization: every intermediate value of a
        step lives in it (parameters and feeds are the caller's); None before the first call."""
        return self.last.memory.arena_bytes if self.last is not None else None

    @property
    def communicator(self) -> str:
        """How the last step's native allreduce reached the other ranks (e.g. hierarchical)."""
        return self.last.native.communicator if self.last is not None else "none"

    # call() takes ``outputs``: the engine may give new memory for the values that replace inputs.
    writes_elsewhere = True

    def call(self, inputs, transport=None, outputs=None):
        """Runs one step. The outputs are views of the executable's arena, valid until its next call.
        ``outputs``: input index -> an array of the input's dtype and shape into which the results
        that replace that input are written (where the backend writes them in place: every other
        result replacing it is copied there by ``write_back``), instead of into the input."""
        last = self.last
        if outputs is None and last is not None and transport is self._transport and not last.collectives:
            # The signature of an earlier call, whose checks it passed: no checks in Python again.
            results = last.native.run_if_accepted(inputs if type(inputs) is list else list(inputs))
            if results is not None:
                for position, index in last.result_is_input.items():
                    results[position] = inputs[index]
                return results
        if len(inputs) != len(self._expected):
            raise ExecutionError(f"function '{self.function.name}' takes {len(self._expected)} inputs, got {len(inputs)}")
        arrays = []
        for (name, dtype, expected), value in zip(self._expected, inputs):
            array = value if type(value) is np.ndarray else np.asarray(value)
            if array.dtype is not dtype and array.dtype != dtype:
                check_input(name, False, str(array.dtype), array.shape, expected, "the function")
            arrays.append(array if array.flags.c_contiguous else np.require(array, requirements="C"))
        # Shapes are checked when a specialization is made for them: the same shapes pass again.
        specialization = self._specialization(arrays, transport)
        if specialization.collectives:
            specialization.progress_base = specialization.native.collective_progress()
        self.last = specialization
        if outputs:
            results = specialization.native.run(arrays, outputs)
            for position, index in specialization.result_is_input.items():
                results[position] = outputs.get(index, arrays[index])
            return results
        results = specialization.native.run(arrays)
        if not specialization.collectives:
            specialization.native.accept_signature(arrays)
        for position, index in specialization.result_is_input.items():
            results[position] = arrays[index]
        return results

    def results_in_inputs(self) -> frozenset:
        """Positions of the last call's results that share memory with one of its inputs."""
        return self.last.results_in_inputs

    def step_plan(self, codes: list, extra_inputs: int, handover: dict, handed_in: list, writeback: list,
                  handed_out: list, fetch: list):
        """An engine step on the last call's specialization as one native object (``StepPlan`` of
        cython/cpu_runtime.pyx), for the engine's steps whose inputs have the last call's dtypes
        and shapes. ``codes``: the Paddle dtype codes of the Paddle inputs (the function's first
        parameters), which the engine accepted; ``extra_inputs``: inputs after them that the
        operator passes and the function does not take; ``handed_in``: names in ``handover`` of the
        parameters after them; ``writeback``: (result, input) positions; ``handed_out``: (name,
        result position) to store in ``handover``; ``fetch``: (Paddle dtype code, result position).
        None where a step needs more than that (collectives, tracing)."""
        specialization = self.last
        if specialization is None or specialization.collectives or self.tracing:
            return None
        if len(codes) + len(handed_in) != len(self._expected):
            return None
        types = [(p.output_types[0].dtype.numpy, p.output_types[0].shape)
                 for p in specialization.function.parameters]
        aliased = specialization.results_in_inputs
        return _native().StepPlan(
            specialization.native, self, specialization, len(codes) + extra_inputs, list(codes), types, handover,
            list(handed_in), dict(specialization.result_is_input), [tuple(p) for p in writeback],
            [(name, pos, pos in aliased) for name, pos in handed_out], [tuple(f) for f in fetch])

    def collective_progress(self):
        specialization = self.last
        if specialization is None:
            return [], 0, 0
        submitted, completed = specialization.native.collective_progress()
        base_submitted, base_completed = specialization.progress_base
        return specialization.labels, submitted - base_submitted, completed - base_completed

    def comm_stats(self) -> tuple[float, float]:
        """(seconds blocked waiting for collectives, seconds collectives ran) in the last call."""
        if self.last is None:
            return 0.0, 0.0
        return self.last.native.last_wait_seconds, self.last.native.last_comm_seconds

    def set_tracing(self, on: bool):
        self.tracing = bool(on)
        for specialization in self._specializations.values():
            specialization.native.set_tracing(self.tracing)

    def last_spans(self) -> list:
        if not self.tracing or self.last is None:
            return []
        return self.last.last_spans()

    def _specialization(self, arrays, transport) -> Specialization:
        signature = tuple([a.shape for a in arrays])
        if transport is not self._transport:
            self._specializations.clear()  # communicators are bound at build time
            self._transport = transport
        found = self._specializations.get(signature)
        if found is not None:
            self._specializations.move_to_end(signature)
            return found
        for (name, _, expected), array in zip(self._expected, arrays):
            check_input(name, True, "", array.shape, expected, "the function")
        shapes = {p.name: a.shape for p, a in zip(self.function.parameters, arrays)}
        specialized = clone_function(self.function, shapes)
        if self.float32_instead is not None:
            clear_bf16(specialized)
        threads = threads_for(specialized, self.threads) if self.auto_threads else self.threads
        found = Specialization(specialized, threads, transport, self.inplace_results, self.check_finite)
        found.native.set_tracing(self.tracing)
        self._specializations[signature] = found
        if len(self._specializations) > _MAX_SPECIALIZATIONS:
            self._specializations.popitem(last=False)
        return found


@register_backend("CPU")
class CPUBackend(Backend):
    def __init__(self, threads: int = 0, check_finite: bool = False, **options):
        self.threads = int(threads or 0)
        self.check_finite = bool(check_finite)
        self.options = options

    def refuses(self, node) -> str | None:
        if refuses_bfloat16(node):
            return f"the CPU backend has no bfloat16 kernel for {node.op_type} (the INTERPRETER has)"
        if refuses_float16(node):
            return f"the CPU backend has no float16 kernel for {node.op_type} (the INTERPRETER has)"
        return None

    def compile(self, function: Function, inplace_results: dict[str, str] | None = None) -> CPUExecutable:
        return CPUExecutable(function, threads=self.threads, inplace_results=inplace_results,
                             check_finite=self.check_finite)
