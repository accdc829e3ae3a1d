"""Captures a dygraph ``nn.Layer`` as IR functions: forward, and backward from the output gradients.

Paddle's dynamic-to-static translator in AST mode (``paddle.jit.to_static(..., full_graph=True)``;
its default SOT mode silently leaves parts eager) records the Layer's forward for one input
signature; its partial program's ``train_program`` is the forward followed by the backward that
eager execution of that program would run, in PIR:

- ``builtin.parameter`` ops name the Layer's parameters and buffers by their dygraph names
  (batch-norm running statistics are parameters that ``batch_norm_`` updates in place);
- ``pd_op.data`` ops are the positional tensor inputs;
- ``shadow_output`` ops mark the outputs (``output_<i>``), the seeds of the output gradients
  (``grad_input_<i>``, a ``full_like(output, 1)`` that Paddle replaces at run time) and the
  gradients of the inputs and parameters (names listed by ``x_grad_names``/``p_grad_names``,
  ``Fake_var`` where there is none).

The whole program is converted by the ordinary converters into one function whose seeds are
parameters ``grad_out:<i>`` (``Role.SEED``); ``split_backward.py`` then splits it at the seeds.
Results (their roles, ir/roles.py): ``out:<i>`` (OUTPUT), ``state:<buffer>`` (STATE: running
statistics, written back in place), ``grad:<param>`` (GRADIENT) and ``xgrad:<i>`` (INPUT_GRADIENT).

``trace`` raises ``CaptureError`` naming the Layer, the reason and the source line for what
only eager execution runs (Python control flow on tensor values, ``.numpy()`` in forward); the
caller runs such a Layer eagerly. ``capture`` converts the traced program whole; where ops have no
converter (``Traced.unconverted``) or a converter refuses one (``RefusedCaptureError``), the
caller runs the program in segments instead (dygraph/segmented.py).
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

from ..errors import ConversionError, UnsupportedOpsError
from ..ir import Function
from ..ir.groups import RankLayout
from ..ir.ops import Parameter
from ..ir.roles import ResultName, Role, state_result
from .split_backward import Split, split_backward
from .pir_decoder import decode_program
from .converters import OP_TABLE, SKIPPED_OPS
from .session import ConversionSession, find_unsupported
from .tensor_parallel_capture import tensor_parallel_tracing

FAKE = "Fake_var"
SEED_PREFIX = "grad_out:"
OUT_PREFIX = "out:"
GRAD_PREFIX = "grad:"
XGRAD_PREFIX = "xgrad:"
# Ops that control flow on tensor values becomes in AST mode: the engine cannot run them here
# (there is no Paddle executor around a dygraph call to leave them to).
_CONTROL_FLOW = {"pd_op.if", "pd_op.while", "pd_op.pylayer"}


class CaptureError(ConversionError):
    """A Layer whose forward cannot run on the engine; the message names the Layer and why."""


@dataclass
class Capture:
    """One Layer, one input signature, one mode."""

    inputs: list[str]             # the function parameter of each positional tensor input
    params: list[str]             # the Layer's parameters and buffers the program reads (dygraph names)
    outputs: object               # Paddle's NestSequence of the outputs: .restore(tensors) rebuilds the structure
    num_outputs: int
    forward: Function             # results out:*, state:*, saved:* (training) / out:*, state:* (eval)
    backward: Function | None = None  # results grad:*, xgrad:*; parameters grad_out:*, saved:*, inputs
    saved: list[str] = field(default_factory=list)
    grads: list[str] = field(default_factory=list)      # parameters that get a gradient
    input_grads: list[int] = field(default_factory=list)  # positional inputs that get a gradient
    state: list[str] = field(default_factory=list)      # buffers the forward updates
    no_grad_outputs: list[int] = field(default_factory=list)  # outputs no gradient reaches (stop_gradient in Paddle)


# The translator reads the source of what it converts and refuses ``*args``: one holder forward
# per input count, written out.
def _forward_1(self, x0):
    return self.inner(x0)

def _forward_2(self, x0, x1):
    return self.inner(x0, x1)

def _forward_3(self, x0, x1, x2):
    return self.inner(x0, x1, x2)

def _forward_4(self, x0, x1, x2, x3):
    return self.inner(x0, x1, x2, x3)

def _forward_5(self, x0, x1, x2, x3, x4):
    return self.inner(x0, x1, x2, x3, x4)

def _forward_6(self, x0, x1, x2, x3, x4, x5):
    return self.inner(x0, x1, x2, x3, x4, x5)

def _forward_7(self, x0, x1, x2, x3, x4, x5, x6):
    return self.inner(x0, x1, x2, x3, x4, x5, x6)

def _forward_8(self, x0, x1, x2, x3, x4, x5, x6, x7):
    return self.inner(x0, x1, x2, x3, x4, x5, x6, x7)


_FORWARDS = {n: globals()[f"_forward_{n}"] for n in range(1, 9)}
MAX_INPUTS = 64


def function_with_source(name: str, source: str):
    """The function ``name`` defined by ``source``, whose source the translator can read: it is
    registered in linecache under a file name of its own, as if read from a file."""
    import linecache

    filename = f"<paddle_ngraph {name} {len(linecache.cache)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict = {}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 (our own generated source)
    return namespace[name]


def _forward_for(arity: int):
    """The holder forward of ``arity`` inputs (written out up to 8, generated beyond)."""
    if arity not in _FORWARDS and 1 <= arity <= MAX_INPUTS:
        names = ", ".join(f"x{i}" for i in range(arity))
        _FORWARDS[arity] = function_with_source(
            f"_forward_{arity}", f"def _forward_{arity}(self, {names}):\n    return self.inner({names})\n")
    return _FORWARDS.get(arity)


class _Holder:
    """Keeps the user's Layer as it is: to_static wraps this holder's forward, not the Layer's."""

    def __init__(self, layer, arity: int):
        import paddle

        if _forward_for(arity) is None:
            raise CaptureError(f"Layer {layer_name(layer)}: {arity} positional inputs; the engine captures 1 to "
                               f"{MAX_INPUTS}")

        def init(self, inner):
            paddle.nn.Layer.__init__(self)
            self.inner = inner

        holder_type = type(f"Capture{arity}", (paddle.nn.Layer,), {"__init__": init, "forward": _FORWARDS[arity]})
        self.layer = holder_type(layer)
        paddle.jit.to_static(self.layer, full_graph=True)


_HOLDERS: dict[tuple, _Holder] = {}
# Calls that take a value out of the graph into Python. The translator often turns them into graph
# ops again, but what Python then does with the value (keep it, print it, index a list with it)
# would be frozen at capture time: such a Layer runs eagerly.
_LEAVES_GRAPH = re.compile(r"\.(numpy|item|tolist)\s*\(")


def values_leaving_graph(layer) -> list[str]:
    """``Class.forward calls .numpy() (file:line)`` for the user-defined Layers (Paddle's own are
    known to be clean) whose forward source takes tensor values into Python."""
    found = []
    seen = set()
    for sub in [layer, *layer.sublayers()]:
        cls = type(sub)
        if cls in seen or cls.__module__.startswith("paddle."):
            continue
        seen.add(cls)
        try:
            lines, first = inspect.getsourcelines(cls.forward)
            path = inspect.getsourcefile(cls.forward)
        except (OSError, TypeError):
            continue
        calls, where = [], []
        for offset, line in enumerate(lines):
            hits = _LEAVES_GRAPH.findall(line.split("#", 1)[0])
            if hits:
                calls.extend(hits)
                where.append(f"{path}:{first + offset}")
        if calls:
            listed = ", ".join("." + c + "()" for c in dict.fromkeys(calls))
            found.append(f"{cls.__name__}.forward calls {listed} at {', '.join(where)}")
    return found


def layer_name(layer) -> str:
    return f"{type(layer).__name__} ({layer.full_name()})" if hasattr(layer, "full_name") else type(layer).__name__


@dataclass
class Traced:
    """The program one signature of a Layer traced to, decoded, with the names of what crosses its
    border: the positional inputs, the parameters and buffers, the outputs, the seeds of their
    gradients, and the gradients of the inputs (None where there is none) and of the parameters."""

    name: str                     # the Layer, for messages
    type_name: str                # its class, the function's name
    view: object                  # ProgramView of the whole program (block 0 is what runs)
    ops: list                     # block 0's OpViews
    outputs_structure: object     # Paddle's NestSequence of the outputs
    data: list[str]
    params: list[str]
    outputs: list[str]
    seeds: list                   # per output; None where no gradient reaches it
    x_grads: list
    p_grads: dict

    @property
    def unconverted(self) -> list:
        """Ops of block 0 without converter, in program order."""
        return [op for op in self.ops if op.type not in OP_TABLE and op.type not in SKIPPED_OPS]


def trace(layer, args: list, training: bool, with_grad: bool) -> Traced:
    """Traces ``layer(*args)`` (``with_grad``: its backward too). Raises ``CaptureError`` for what
    only eager execution runs: Python control flow on tensor values, values leaving the graph."""
    name = layer_name(layer)
    partial, runnable, program = _trace(layer, args, training, with_grad, name)
    view = decode_program(program, source=f"Layer {name}")
    ops = [op for op in view.ops if op.block == 0]
    flow = [op for op in ops if op.type in _CONTROL_FLOW]
    if flow:
        found = list(dict.fromkeys(f"{op.type} at {source_line(op)}" for op in flow))
        # The backward of a PyLayer traces as a second pd_op.pylayer without a line: the first says it.
        known = [f for f in found if not f.endswith(" an unknown line")]
        where = "; ".join(known or found)
        # A PyLayer traces as a pd_op.pylayer block (its backward is the user's Python), not as a
        # branch on a tensor's value: say which of the two the Layer has.
        what = ("a PyLayer (paddle.autograd.PyLayer: a Python backward)"
                if all(op.type == "pd_op.pylayer" for op in flow) else "Python control flow on tensor values")
        raise CaptureError(f"Layer {name}: its forward has {what} ({where}), "
                           f"which the engine does not run in dygraph mode")
    data = [op.output_names()[0] for op in ops if op.type == "pd_op.data"]
    params = [op.output_names()[0] for op in ops if op.type == "builtin.parameter"]
    outputs, seeds, x_grads, p_grads = _program_values(view, ops, partial, runnable)
    return Traced(name, type(layer).__name__, view, ops, partial._outputs, data, params, outputs, seeds,
                  x_grads, p_grads)


def source_line(op) -> str:
    """``file:line (code)`` of the user's code that made a traced op: the innermost frame of its PIR
    call stack outside Paddle and this package. A ``pd_op.if``/``while`` records none: its
    condition's does (the comparison on the ``if`` line). ``an unknown line`` where neither does."""
    native = op.native
    if op.type == "pd_op.pylayer":
        return _apply_line(native)
    for candidate in (native, _condition_op(native)):
        stack = list(getattr(candidate, "callstack", None) or [])
        for k in range(len(stack) - 1, -1, -1):
            match = re.search(r'File "([^"]+)", line (\d+)', stack[k])
            if match and "/paddle/" not in match.group(1) and "/paddle_ngraph/" not in match.group(1):
                code = stack[k + 1].strip() if k + 1 < len(stack) and "File " not in stack[k + 1] else ""
                return f"{match.group(1)}:{match.group(2)}" + (f" ({code})" if code else "")
    return "an unknown line"


def _user_frame(stack: list, k: int) -> str:
    """``file:line (code)`` of frame line ``k`` of a PIR call stack (the code is the next line)."""
    match = re.search(r'File "([^"]+)", line (\d+)', stack[k])
    code = stack[k + 1].strip() if k + 1 < len(stack) and "File " not in stack[k + 1] else ""
    return f"{match.group(1)}:{match.group(2)}" + (f" ({code})" if code else "")


def _apply_line(native) -> str:
    """The line calling ``MyPyLayer.apply`` for a ``pd_op.pylayer``: the op records no call stack, the
    ops of its block (the PyLayer's forward) do; in theirs, the user's frame that calls Paddle's
    ``static_pylayer``. ``an unknown line`` for the one a backward traces (no user frame)."""
    try:
        blocks = list(native.blocks())
    except Exception:  # not a PIR op with blocks
        blocks = []
    for block in blocks:
        for inner in block.ops:
            stack = list(getattr(inner, "callstack", None) or [])
            entry = next((k for k, line in enumerate(stack) if "static_pylayer.py" in line), None)
            if entry is None:  # the backward's block: no call of the user's
                continue
            # Only frames below the capture's holder forward (this package's last frame): the user's
            # forward and what it calls; above it is whoever made the program (Paddle's backward).
            holder = max((k for k, line in enumerate(stack[:entry]) if "/paddle_ngraph/" in line), default=-1)
            for k in range(entry - 1, holder, -1):
                match = re.search(r'File "([^"]+)", line (\d+)', stack[k])
                if match and "/paddle/" not in match.group(1) and "/paddle_ngraph/" not in match.group(1):
                    return _user_frame(stack, k)
    return "an unknown line"


def _condition_op(native):
    try:
        return native.operand_source(0).get_defining_op() if native.num_operands() else None
    except Exception:  # a value without defining op (a block argument)
        return None


class RefusedCaptureError(CaptureError):
    """A converter refused an op of the traced program (its attributes, a dynamic dimension): the
    op can run in Paddle between engine segments."""


def capture(layer, args: list, training: bool, with_grad: bool, traced: Traced | None = None,
            layout: RankLayout | None = None) -> Capture:
    """Captures ``layer(*args)`` whole; ``with_grad``: the backward too (else forward only);
    ``traced``: its ``trace``, if done already; ``layout``: the ranks and groups the functions
    run on (tensor parallelism: the groups of the ops' ring ids), by default one rank."""
    if traced is None:
        traced = trace(layer, args, training, with_grad)
    name, view, ops = traced.name, traced.view, traced.ops
    unsupported = find_unsupported(view, ops)
    if unsupported:
        raise CaptureError(f"Layer {name}: {UnsupportedOpsError(unsupported)}")
    data, params, outputs, seeds = traced.data, traced.params, traced.outputs, traced.seeds
    x_grads, p_grads = traced.x_grads, traced.p_grads
    session = ConversionSession(view, nranks=layout.nranks, layout=layout) if layout else ConversionSession(view)
    seed_params = []
    for i, (seed, out) in enumerate(zip(seeds, outputs)):
        info = view.vars[out]
        param = Parameter(name=f"{SEED_PREFIX}{i}", dtype=info.dtype.value, shape=tuple(info.shape), role=Role.SEED)
        session.parameters.append(param)
        if seed is not None:
            session.env[seed] = param.output()
        seed_params.append(param.name)
    for n in data + params:
        session.value(n)
    seed_set = {s for s in seeds if s is not None}
    try:
        session.convert_ops([op for op in ops if not (set(op.output_names()) & seed_set)])
    except ConversionError as e:
        raise RefusedCaptureError(f"Layer {name}: {e}") from e
    results, state = _forward_results(view, session, outputs)
    forward_results = list(results)
    grads = [p for p in params if p in p_grads and p_grads[p] in session.env]
    input_grads = [i for i, g in enumerate(x_grads) if g is not None and g in session.env]
    grad_results = [ResultName(f"{GRAD_PREFIX}{p}", Role.GRADIENT, p) for p in grads]
    input_grad_results = [ResultName(f"{XGRAD_PREFIX}{i}", Role.INPUT_GRADIENT) for i in input_grads]
    for result, p in zip(grad_results, grads):
        results[result] = session.env[p_grads[p]]
    for result, i in zip(input_grad_results, input_grads):
        results[result] = session.env[x_grads[i]]
    if with_grad and not (grads or input_grads):
        # No gradient reaches a parameter or an input (the outputs are constants, or stop_gradient
        # cuts every path): Paddle's own outputs carry no gradient, so the Layer runs forward only.
        with_grad = False
        session.parameters[:] = [p for p in session.parameters if p.role is not Role.SEED]
    whole = Function(session.parameters, results, name=traced.type_name)
    capture = Capture(inputs=data, params=params, outputs=traced.outputs_structure, num_outputs=len(outputs),
                      forward=whole, grads=grads, input_grads=input_grads, state=state,
                      no_grad_outputs=[i for i, seed in enumerate(seeds) if seed is None])
    if with_grad:
        split: Split = split_backward(whole, seed_params, forward_results, grad_results + input_grad_results)
        capture.forward, capture.backward, capture.saved = split.forward, split.backward, split.saved
    return capture


def _trace(layer, args: list, training: bool, with_grad: bool, name: str):
    """The Layer traced by paddle.jit.to_static (AST): (partial program, its runnable train program
    or None, the program to convert)."""
    # One holder per mode: the translator's program cache is keyed by the inputs only, and a program
    # traced in eval mode has dropout and batch norm in test mode whatever ``is_train`` says. For
    # the same reason one per set of tensors and of frozen parameters: a program traced before a
    # sublayer was added, or with a parameter frozen, would be handed back unchanged.
    # And one per value of the plain attributes: the translator's program took them at its trace
    # (``if self.step % 2 == 0``), and the engine captures again when they change (runner.py).
    tensors = tuple((id(t), t.stop_gradient) for t in [*layer.parameters(), *layer.buffers()])
    plain = tuple((id(sub), attr, type(value), value) for sub, attr, value in python_state(layer))
    key = (id(layer), len(args), training, tensors, plain)
    holder = _HOLDERS.get(key)
    if holder is None or holder.layer.inner is not layer:
        holder = _HOLDERS[key] = _Holder(layer, len(args))
    holder.layer.training = training
    leaving = values_leaving_graph(layer)
    if leaving:
        raise CaptureError(f"Layer {name}: {'; '.join(leaving)} (a tensor's value leaves the graph, which a "
                           f"captured program would freeze at its first call)")
    before = python_state(layer)
    attributes = layer_attributes(layer)
    # Tracing resets every parameter's gradient (the partial program's _set_grad_type sets param.grad
    # to None): gradients accumulated before a new signature's first call would be lost.
    gradients = [(p, p.grad) for p in layer.parameters() if p.grad is not None]
    try:
        # ``is_train`` selects the partial program's backward; what the ops do (dropout, batch norm)
        # follows the Layers' own ``training`` flags, read while tracing. Fleet's tensor-parallel
        # layers trace only with what tensor_parallel_capture.py supplies (harmless for others).
        with tensor_parallel_tracing():
            concrete, partial = holder.layer.forward.get_concrete_program(*args, is_train=with_grad)
            traced = ((partial, partial.train_program, partial.train_program.program) if with_grad
                      else (partial, None, concrete.main_program))
    except CaptureError:
        raise
    except Exception as e:  # the translator's errors: .numpy() in forward, unsupported Python
        raise CaptureError(f"Layer {name}: paddle.jit.to_static (AST) could not translate its forward: "
                           f"{translator_reason(e)}") from e
    finally:
        changed = restore_python_state(before)
        drop_traced_values(attributes)
        for parameter, gradient in gradients:
            if parameter.grad is None:
                parameter._set_grad_ivar(gradient)
    if changed:
        raise CaptureError(f"Layer {name}: its forward changes Python state ({'; '.join(changed)}), which a "
                           f"captured program would not change again, nor let later calls read anew")
    return traced


# Python values a forward may keep in its Layers' attributes (a step counter): changed while tracing,
# they would be frozen in the captured program.
_PLAIN = (bool, int, float, str, type(None))
_LAYER_INTERNALS: set | None = None


def python_state(layer) -> list:
    """(sublayer, attribute, value) of the plain Python attributes (numbers, strings, None) of the
    user-defined Layers in ``layer`` (Paddle's own and Layer's internal attributes left out)."""
    global _LAYER_INTERNALS
    import paddle

    if _LAYER_INTERNALS is None:
        _LAYER_INTERNALS = set(vars(paddle.nn.Layer()))
    state = []
    for sub in [layer, *layer.sublayers()]:
        if type(sub).__module__.startswith("paddle."):
            continue
        for attr, value in vars(sub).items():
            if attr not in _LAYER_INTERNALS and type(value) in _PLAIN:
                state.append((sub, attr, value))
    return state


def watched_attributes(layer) -> list[tuple]:
    """(sublayer, attribute) of the plain Python attributes (``python_state``) that the sublayer's
    class reads as ``self.<attribute>`` somewhere in its source: a captured program took their values
    at its capture (``if self.step % 2 == 0`` chose one branch for good), so the engine keys its
    captures on them. An attribute the class never reads (a counter the training loop keeps on the
    Layer) is left out: it would capture again at every change for nothing. A class without source
    has all its plain attributes watched."""
    read: dict[type, set | None] = {}
    watched = []
    for sub, attr, _ in python_state(layer):
        cls = type(sub)
        if cls not in read:
            try:
                read[cls] = set(re.findall(r"\bself\.(\w+)", inspect.getsource(cls)))
            except (OSError, TypeError):
                read[cls] = None
        if read[cls] is None or attr in read[cls]:
            watched.append((sub, attr))
    return watched


def restore_python_state(before: list) -> list[str]:
    """Puts back the attributes of ``python_state`` that tracing changed (the forward ran once for the
    trace: its side effects are not a call of the user's); ``Class.attribute (old -> new)`` of each."""
    changed = []
    for sub, attr, value in before:
        now = vars(sub).get(attr, value)
        if type(now) is not type(value) or now != value:
            changed.append(f"{type(sub).__name__}.{attr} ({value!r} -> {now!r})")
            setattr(sub, attr, value)
    return changed


def layer_attributes(layer) -> list:
    """(sublayer, its attributes as they are) of the user-defined Layers in ``layer``."""
    return [(sub, dict(vars(sub))) for sub in [layer, *layer.sublayers()]
            if not type(sub).__module__.startswith("paddle.")]


def drop_traced_values(before: list):
    """Puts back the attributes in which tracing left the program's values (``self.losses =
    [...]``, ``self.outputs``, ``self.gtbox = gtbox`` in Paddle's YOLOv3 test model): after the
    trace they held placeholders of a program the engine runs instead, which no later call
    updates, and reading them (``float(model._layers.losses[0])``) failed far from the cause. An
    attribute the trace added is removed; one it replaced gets its value from before."""
    for sub, attributes in before:
        for attr, now in list(vars(sub).items()):
            if not _holds_traced_value(now):
                continue
            if attr in attributes:
                sub.__dict__[attr] = attributes[attr]
            else:
                del sub.__dict__[attr]


def _holds_traced_value(value) -> bool:
    import paddle

    if isinstance(value, (paddle.pir.Value, paddle.static.Variable)):  # PIR's, the legacy IR's
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds_traced_value(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_traced_value(v) for v in value.values())
    return False


def translator_reason(error) -> str:
    """What the translator's error says, with the user's line: its message names the line of the
    converted forward (``File "...", line N, in forward`` with the code marked ``<--- HERE``) and
    ends with the error that stopped it; ``In transformed code:`` alone tells nothing."""
    lines = [line.rstrip() for line in str(error).splitlines() if line.strip()]
    if not lines or not lines[0].strip().startswith("In transformed code"):
        return f"{type(error).__name__}: {lines[0].strip()[:300] if lines else ''}"
    where = ""
    for k, line in enumerate(lines):
        match = re.search(r'File "([^"]+)", line (\d+)', line)
        if match and "/paddle/" not in match.group(1) and "/paddle_ngraph/" not in match.group(1):
            marked = next((lines[j - 1].strip() for j in range(k + 1, len(lines))
                           if "<--- HERE" in lines[j] and j > k + 1), "")
            where = f"{match.group(1)}:{match.group(2)}" + (f" ({marked})" if marked else "")
    last = lines[-1].strip()
    for line in reversed(lines):  # the error: the last line not a source line nor a hint
        text = line.strip()
        if text and not text.startswith(("[Hint", "File ", "~")) and not line.startswith((" " * 8, "\t")):
            last = text
            break
    return f"{type(error).__name__} at {where or 'an unknown line'}: {last[:300]}"


def _program_values(view, ops, partial, runnable):
    """The traced program's outputs, the seeds of their gradients, and the gradients of the inputs
    (None where there is none) and of the parameters, by their names in ``view``."""
    if runnable is None:
        return [view.name_of(v) for v in partial._outputs.var_list], [], [], {}
    shadow = {op.attrs["outputname"]: op.input_names()[0] for op in ops
              if op.type == "builtin.shadow_output" and op.input_names()}
    outputs = [shadow[n] for n in runnable.out_names]
    # An output no gradient reaches (a constant, or computed from stop_gradient values only) has
    # the placeholder instead of a seed: None here, and nothing in the backward reads it.
    seeds = [shadow[n] if n != FAKE else None for n in runnable.o_grad_names]
    x_grads = [shadow.get(n) if n != FAKE else None for n in runnable.x_grad_names]
    p_grads = {p: shadow.get(g) for p, g in zip(runnable.param_names, runnable.p_grad_names) if g != FAKE}
    return outputs, seeds, x_grads, p_grads


def _forward_results(view, session, outputs) -> tuple[dict, list]:
    """The outputs, and the new values of the persistable variables the forward updates (batch
    norm's running statistics), with those variables' names."""
    results = {ResultName(f"{OUT_PREFIX}{i}", Role.OUTPUT): session.value(n) for i, n in enumerate(outputs)}
    state = []
    for var, value in session.env.items():
        info = view.vars.get(var)
        if info is not None and info.persistable and var in session.initial and value.node is not session.initial[var]:
            results[state_result(var)] = value
            state.append(var)
    return results, state
