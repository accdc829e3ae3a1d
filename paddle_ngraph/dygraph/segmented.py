"""A captured Layer whose program has ops the engine lacks: engine segments, with those ops run by
Paddle between them, as in a transpiled static program (transpiler/segments.py).

The traced program (forward, then the backward from the output-gradient seeds) is cut in program
order into *pieces*: maximal runs of ops the engine converts (engine segments, each compiled into
one executable) and runs of ops it lacks or whose converter refuses them (``PaddlePiece``: Paddle's
executor runs them). A piece never spans the forward and the backward: the forward pieces run when
the Layer is called, the backward pieces at ``loss.backward()``, glued to eager autograd by the
runner's PyLayer as a Layer captured whole is.

Values cross pieces as NumPy arrays by name, without copies. Forward values that the backward
pieces read stay in the engines' arenas until the backward, and are copied out only if the same
forward runs again first (an arena is reused by the next call), as for a Layer captured whole.
Constants (ops without operands) are copied into every piece that reads them, as transpile does.
With several ranks, each parameter gradient is averaged once: in the backward engine segment that
makes it (the bucketed AllReduce of a Layer captured whole), or, if a Paddle op makes it, by the
runner after the backward.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConversionError
from ..frontend import OP_TABLE, SKIPPED_OPS, ConversionSession
from ..frontend.constant_folding import folded_value
from ..frontend.dygraph import source_line
from ..frontend.program_view import DENSE, FORWARD
from ..ir import Function
from ..ir.ops import Constant
from ..ir.roles import Role, fetch_result, result_role
from ..passes.pipeline import Facts, build_passes, run_pipeline
from ..transpiler.segments import SOURCE_OPS, refused_by_converters
from .paddle_piece import PaddlePiece

FORWARD_PHASE, BACKWARD_PHASE = "forward", "backward"
# "op 'pd_op.x' (block 0, op 7, outputs ...): " in a refusal: the summary names the op type already.
_LOCATION = re.compile(r"op '[^']*' \(block \d+, op \d+, outputs [^)]*\): ")


@dataclass
class Piece:
    index: int
    phase: str                                       # FORWARD_PHASE or BACKWARD_PHASE
    on_engine: bool
    ops: list                                        # OpViews, in program order
    constants: list = field(default_factory=list)    # operand-less ops of other pieces it reads (its own copy)
    inputs: list = field(default_factory=list)       # names it reads from outside
    outputs: list = field(default_factory=list)      # names that later pieces or the call's results read


@dataclass
class SegmentedCapture:
    """What the runner reads of a capture (``frontend.dygraph.Capture``'s fields of the same names)."""
    outputs: object
    num_outputs: int
    grads: list[str]
    input_grads: list[int]
    no_grad_outputs: list[int]


def plan_pieces(traced, lacking: set) -> list[Piece]:
    """``lacking``: ids of the ops the engine does not run. Ops whose values nothing reads are
    left out (the seeds' ``full_like`` among them: the output gradients replace them)."""
    seeds = {s for s in traced.seeds if s is not None}
    wanted = set(traced.outputs) | {g for g in traced.x_grads if g} | set(traced.p_grads.values())
    ops = [op for op in traced.ops if op.type not in SKIPPED_OPS and op.type not in SOURCE_OPS
           and not (set(op.output_names()) & seeds)]
    live = []
    for op in reversed(ops):  # liveness: an engine op nothing reads is dead code
        if id(op) in lacking or set(op.output_names()) & wanted or _updates_state(traced.view, op):
            live.append(op)
            wanted.update(op.input_names())
    pieces: list[Piece] = []
    for op in reversed(live):
        phase = FORWARD_PHASE if op.role == FORWARD else BACKWARD_PHASE
        on_engine = id(op) not in lacking
        if pieces and pieces[-1].phase == phase and pieces[-1].on_engine == on_engine:
            pieces[-1].ops.append(op)
        else:
            pieces.append(Piece(len(pieces), phase, on_engine, [op]))
    _wire(traced, pieces)
    return pieces


def non_dense_crossing(view, pieces: list[Piece]) -> str | None:
    """Why the pieces cannot run, if a value other than a dense tensor passes between two of them:
    pieces exchange NumPy arrays, and a tensor array (``paddle.tensor.create_array``, written and
    read by ops the engine lacks) has none to give; Paddle's executor then failed fetching it
    (``Tensor holds no memory``) instead of the Layer running eagerly. None where every value that
    crosses is dense."""
    made_by = {name: op for piece in pieces for op in piece.ops for name in op.output_names()}
    for piece in pieces:
        for name in piece.inputs + piece.outputs:
            info = view.vars.get(name)
            auxiliary = _auxiliary_element(made_by, name)
            if auxiliary is not None:
                return (f"{auxiliary.type} at {source_line(auxiliary)} gives its backward values that may hold "
                        f"no memory (its {', '.join(_auxiliary_slots(auxiliary))}), which would pass between the "
                        f"engine's segments and the ops left to Paddle")
            if info is None or info.kind == DENSE:
                continue
            op = made_by.get(name)
            origin = f" (made by {op.type} at {source_line(op)})" if op is not None else ""
            return (f"its {info.kind} {name}{origin} would pass between the engine's segments and the ops "
                    f"left to Paddle, which exchange dense tensors only")
    return None


# Output slots (normalized) that Paddle's kernels may leave without memory: an ``xshape`` holds dims
# only, einsum's ``inner_cache`` is filled only when the kernel chooses to cache.
_NO_DATA_SLOTS = ("xshape", "innercache")


def _auxiliary_slots(op) -> list[str]:
    """The list outputs of ``op`` that Paddle keeps for its backward and may leave without memory."""
    return [slot for slot in op.outputs if slot in _NO_DATA_SLOTS]


def _auxiliary_element(made_by: dict, name: str):
    """The op whose auxiliary list output (``_auxiliary_slots``) the PIR ``builtin.split`` making
    ``name`` unpacks, if it does: Paddle's executor hands such an element on inside one program,
    but fetched from a piece it has no value (the next piece's feed was None)."""
    split = made_by.get(name)
    if split is None or split.type != "builtin.split":
        return None
    [vector] = split.input_names() or [None]
    producer = made_by.get(vector)
    if producer is None:
        return None
    slots = _auxiliary_slots(producer)
    return producer if any(vector in producer.outputs.get(slot, ()) for slot in slots) else None


def _updates_state(view, op) -> bool:
    """Writes a persistable variable (batch norm's running statistics): the Layer's buffer."""
    return any(view.vars.get(n) is not None and view.vars[n].persistable for n in op.output_names())


def _wire(traced, pieces: list[Piece]):
    """Each piece's inputs and outputs. An op reads a name from its last writer before it, in
    program order: an in-place op (``pd_op.add_``, which Paddle's backward accumulates gradients
    with under ``FLAGS_max_inplace_grad_add``) writes the name it reads, and wiring by the last
    writer overall took it for its own input's maker, so the piece making that input never handed
    it over (a ``KeyError`` in backward)."""
    producer: dict = {}
    for piece in pieces:
        for op in piece.ops:
            for name in op.input_names():
                owner, source = producer.get(name, (None, None))
                if owner is piece:
                    continue
                if owner is not None and not source.input_names():
                    if piece.on_engine and source not in piece.constants:
                        piece.constants.append(source)  # a Paddle piece copies its constants itself
                    continue
                if name not in piece.inputs:
                    piece.inputs.append(name)
                if owner is not None and name not in owner.outputs:
                    owner.outputs.append(name)
            producer.update((name, (piece, op)) for name in op.output_names())
    results = list(traced.outputs) + [g for g in traced.x_grads if g] + list(traced.p_grads.values())
    results += [n for piece in pieces if not piece.on_engine for op in piece.ops for n in op.output_names()
                if traced.view.vars.get(n) is not None and traced.view.vars[n].persistable]
    for name in results:
        owner = producer.get(name, (None, None))[0]
        if owner is not None and name not in owner.outputs:
            owner.outputs.append(name)


def _constant_crossings(pieces: list[Piece], whole: ConversionSession, graph_inputs: set) -> dict:
    """``{name: value}`` of the values engine segments read from other pieces that depend on
    constants only in the program converted whole (``whole``): an upsampling size computed from a
    static shape, which the forward segment makes and the backward's ``nearest_interp_grad`` reads.
    Read as an input, the segment's converter would find no constant there and refuse the op that
    the whole program converts (and the Layer ran eagerly); each segment gets the value as a
    constant instead, as the whole program folds it (``constant_folding``)."""
    folded = {}
    for piece in pieces:
        if not piece.on_engine:
            continue
        for name in piece.inputs:
            if name in folded or name in graph_inputs or name not in whole.env:
                continue
            value = folded_value(whole.env[name])
            if value is not None:
                folded[name] = np.asarray(value, dtype=whole.env[name].dtype.numpy)
    return folded


class EnginePiece:
    """One engine segment: its executable, what it reads and what it gives back by name, and the
    buffers (batch-norm statistics) it updates, written into the Layer's tensors."""

    def __init__(self, engine, view, piece: Piece, unmade: set, folded: dict | None = None):
        """``folded``: values of inputs computed from constants only, given as constants."""
        session = ConversionSession(view)
        folded = folded or {}
        for name in piece.inputs:
            if name in folded:
                session.env[name] = Constant(folded[name]).output()
            elif name not in unmade:
                session.value(name)
        session.convert_ops(piece.constants + piece.ops)
        outputs = [n for n in piece.outputs if n in session.env]
        unmade.update(n for n in piece.outputs if n not in session.env)
        function = session.function(outputs, name=f"segment_{piece.index}")
        run_pipeline(function, build_passes(engine.config, 1))
        self.function = function
        self.executable = engine.compiler.compile(function)
        self.averaging = None  # the executable that also averages gradients across ranks
        self.inputs = [p.name for p in function.parameters]
        self.results = [(r.variable, result_role(r) is Role.STATE) for r in function.results]
        self.results_by_name = {name for name, is_state in self.results if not is_state}

    def average(self, engine, gradients: list[str]):
        """A second executable for synchronizing backward passes: the results ``gradients`` (names
        of the variables) averaged across the ranks by the bucketed AllReduce, each bucket sent
        while the rest of the segment runs (as a Layer captured whole)."""
        names = [fetch_result(n) for n in gradients]
        averaged = Function(self.function.parameters, self.function.results, name=self.function.name)
        run_pipeline(averaged, build_passes(engine.config, engine.transport.size, Facts(gradient_results=names)))
        self.averaging = engine.compiler.compile(averaged)

    def run(self, env: dict, params: dict, transport=None):
        """``transport``: a synchronizing backward (the averaging executable, where there is one)."""
        if transport is not None and self.averaging is not None:
            outputs = self.averaging.call([env[n] for n in self.inputs], transport)
        else:
            outputs = self.executable.call([env[n] for n in self.inputs], None)
        for (name, is_state), value in zip(self.results, outputs):
            if is_state and name in params:
                np.copyto(params[name], value, casting="no")  # the Layer's buffer, in place
            else:
                env[name] = value


class SegmentedCompiled:
    """One signature of a Layer run in pieces; the runner calls ``forward``/``backward``."""

    segmented = True

    def __init__(self, engine, traced):
        view = traced.view
        whole = ConversionSession(view)
        refused = refused_by_converters(view, engine.compiler, session=whole)
        lacking = {id(op) for op in traced.ops
                   if (op.type not in OP_TABLE and op.type not in SKIPPED_OPS) or id(op) in refused}
        self.traced = traced
        self.pieces = plan_pieces(traced, lacking)
        crossing = non_dense_crossing(view, self.pieces)
        if crossing:
            raise ConversionError(crossing)
        self.reasons = {op.type: ("no converter" if op.type not in OP_TABLE else _LOCATION.sub("", refused[id(op)]))
                        for piece in self.pieces if not piece.on_engine for op in piece.ops}
        graph_inputs = set(traced.data) | set(traced.params) | {s for s in traced.seeds if s is not None}
        folded = _constant_crossings(self.pieces, whole, graph_inputs)
        unmade: set = set()
        self.runners = []
        executor = engine.paddle_executor()
        for piece in self.pieces:
            missing = [n for n in piece.inputs if n not in graph_inputs and n in unmade]
            if missing and not piece.on_engine:
                raise ConversionError(f"the ops left to Paddle read {', '.join(missing)}, which the engine's "
                                      f"converters do not make")
            if piece.on_engine:
                self.runners.append(EnginePiece(engine, view, piece, unmade, folded))
            else:
                self.runners.append(PaddlePiece(view, piece.ops, piece.outputs, executor))
        made = {n for piece in self.pieces for n in piece.outputs} - unmade
        available = made | graph_inputs
        grads = [p for p in traced.params if traced.p_grads.get(p) in available]
        input_grads = [i for i, g in enumerate(traced.x_grads) if g is not None and g in available]
        self.capture = SegmentedCapture(traced.outputs_structure, len(traced.outputs), grads, input_grads,
                                        [i for i, seed in enumerate(traced.seeds) if seed is None])
        self.averaged_in_engine = self._average_in_engines(engine, grads)
        backward_reads = {n for piece in self.pieces if piece.phase == BACKWARD_PHASE for n in piece.inputs}
        backward_reads |= {traced.p_grads[p] for p in grads} | {traced.x_grads[i] for i in input_grads}
        forward_made = {n for piece in self.pieces if piece.phase == FORWARD_PHASE for n in piece.outputs}
        self.saved = sorted((forward_made - unmade) & backward_reads)
        # No gradient reaching a parameter or an input: forward only, as Paddle's outputs carry none.
        self.trains = any(s is not None for s in traced.seeds) and bool(grads or input_grads)
        self.pending = None  # the runner's record of the last training forward, until its backward
        self.lone_output = None  # whether the Layer returns one tensor (LayerEngine._pack)
        self.agreement_key = None  # the runner's _ranks_agree: see agreement_lines
        self.disagreement_said = False
        # Shapes and dtypes of the output gradients, for an output autograd hands none for.
        self.seed_types = [np.zeros(tuple(view.vars[n].shape), np.dtype(view.vars[n].dtype.value))
                           for n in traced.outputs]

    def _average_in_engines(self, engine, grads: list[str]) -> set:
        """With several ranks, the parameter gradients that backward engine segments make (and no
        later piece reads) are averaged in those segments; the names of the others, made by Paddle
        ops, are averaged by the runner after the backward."""
        if engine.transport.size < 2:
            return set()
        final = {self.traced.p_grads[p] for p in grads}
        read = {n for piece in self.pieces for n in piece.inputs}
        averaged = set()
        for piece, runner in zip(self.pieces, self.runners):
            if piece.phase != BACKWARD_PHASE or not piece.on_engine:
                continue
            mine = [n for n in piece.outputs if n in final and n not in read and n in runner.results_by_name]
            if mine:
                runner.average(engine, mine)
                averaged.update(mine)
        return averaged

    def agreement_lines(self) -> list[str]:
        """What the ranks' synchronized backward passes must share to pair up their collectives: the
        pieces in order, where each runs, and each backward engine segment's function (its
        gradient buckets)."""
        from ..distributed import function_fingerprint

        lines = [repr([(p.on_engine, p.phase, len(p.ops)) for p in self.pieces])]
        for piece, runner in zip(self.pieces, self.runners):
            if piece.on_engine and piece.phase == BACKWARD_PHASE:
                lines += function_fingerprint(runner.function)
        return lines

    # --- what the runner reports ------------------------------------------------------------------
    def summary(self) -> str:
        """``N ops on the engine in S segments, K ops left to Paddle (type: why, ...)``."""
        engine_ops = sum(len(p.ops) for p in self.pieces if p.on_engine)
        segments = sum(p.on_engine for p in self.pieces)
        paddle_ops = sum(len(p.ops) for p in self.pieces if not p.on_engine)
        why = ", ".join(f"{t}: {r}" for t, r in self.reasons.items())
        return (f"{engine_ops} ops on the engine in {segments} segment{'s' * (segments != 1)}, {paddle_ops} "
                f"op{'s' * (paddle_ops != 1)} left to Paddle ({why})")

    # --- running ----------------------------------------------------------------------------------
    def _env(self, args: list, params: dict) -> dict:
        env = dict(zip(self.traced.data, args))
        env.update(params)
        return env

    def forward(self, args: list, params: dict, train: bool):
        """The outputs and, when ``train``, the forward values backward reads: NumPy views of the
        engines' arenas (or of what Paddle's pieces fetched), valid until these pieces run again.
        The runner copies the outputs into Paddle tensors at once, and the saved values when the
        pieces are about to run again before their backward has (as for a Layer captured whole)."""
        env = self._env(args, params)
        for piece, runner in zip(self.pieces, self.runners):
            if piece.phase == FORWARD_PHASE:
                runner.run(env, params)
        outputs = [env[n] for n in self.traced.outputs]
        saved = {n: env[n] for n in self.saved} if train else None
        return outputs, saved

    def backward(self, args: list, params: dict, saved: dict, seeds: list, transport=None):
        """The parameter gradients (in ``capture.grads`` order), the input gradients by position,
        and which parameter gradients are averaged across the ranks already: with ``transport`` (a
        synchronizing backward), those the engine segments make."""
        env = self._env(args, params)
        env.update(saved)
        env.update((name, value) for name, value in zip(self.traced.seeds, seeds) if name is not None)
        for piece, runner in zip(self.pieces, self.runners):
            if piece.phase == BACKWARD_PHASE:
                if piece.on_engine:
                    runner.run(env, params, transport)
                else:
                    runner.run(env, params)
        grads = [env[self.traced.p_grads[p]] for p in self.capture.grads]
        input_grads = {i: env[self.traced.x_grads[i]] for i in self.capture.input_grads}
        averaged = [transport is not None and self.traced.p_grads[p] in self.averaged_in_engine
                    for p in self.capture.grads]
        return grads, input_grads, averaged
