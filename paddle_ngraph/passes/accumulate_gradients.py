"""Gradient accumulation: the two functions a training step alternates between.

With ``accumulate_steps = k`` the user still calls ``exe.run`` once per micro-batch. Like Paddle's
gradient merge with ``avg=True``, micro-steps 1..k-1 only add their gradients into accumulators
and micro-step k averages them and makes the one update (with its AllReduce), so that k
micro-batches of B with a mean loss equal one step on the batch of kB (``accumulate_avg: false``:
the update takes their sum, as gradient merge with ``avg=False``).

From the training function this builds, on copies (the original is left as it is):

- ``apply`` (``build_apply``, first): forward and backward, each update's gradient (or, where
  clipping processes it, the raw gradient the clipping reads) replaced by ``(acc_in + grad) / k``. The collective passes (AllReduce, compression, or ZeRO-1's
  reduce-scatter, sliced update and allgather) then rewrite this one like any training function,
  so the collectives carry the averaged accumulated gradients and run once per k micro-steps.
- ``accumulate`` (``build_accumulate``, after those passes): forward and backward,
  ``acc_out = acc_in + grad`` for every gradient an optimizer update consumes (the raw one); no update, so no
  parameter or optimizer-state result (the Engine then leaves those variables as they are); state
  the forward pass itself updates (batch norm's running statistics) is kept, as Paddle's gradient
  merge updates it on every micro-batch. It takes the apply variant's Paddle inputs in the same
  order, since one Paddle operator feeds both (ZeRO-1 moves the moments out of them; without an
  update, this variant does not read them).

The accumulators are extra parameters (after the function's own, one per update, named
``ACCUMULATOR_PREFIX + parameter``, ``Role.ACCUMULATOR``) owned by the Engine, zeroed after
each apply step; the accumulate function returns their new values under the same names
(``Role.ACCUMULATOR`` results).

The gradient accumulated is the one the AllReduce pass reduces: the raw gradient backward made
when clipping or regularization processes it before the update (``raw_gradients``, found by
transpiler/gradients.py), else the one the update consumes. Clipping is not linear: Paddle's
gradient merge clips the merged gradient once per update, so the processing ops read the
average of the k raw gradients (and, on several ranks, its AllReduce) as the update reads it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError, ValidationError
from ..ir import Function, clone_function
from ..ir.ops import Add, Constant, Divide, Parameter
from ..ir.ops.optimizer import OptimizerUpdate
from ..ir.roles import Role, accumulator_result, result_role, result_variable

ACCUMULATOR_PREFIX = "@ACCUMULATOR@"


@dataclass
class Accumulation:
    """What the Engine needs besides the apply variant (which it runs as its main function)."""

    steps: int
    accumulate: Function
    accumulators: list[Parameter]  # of the apply variant, in parameter order; ``accumulate`` has equal ones


def _updates(function: Function) -> list[OptimizerUpdate]:
    updates = [n for n in function.ordered_nodes() if isinstance(n, OptimizerUpdate)]
    if not updates:
        raise ConfigError(f"accumulate_steps > 1: function '{function.name}' has no optimizer update "
                          f"(only training programs, after optimizer.minimize, accumulate gradients)")
    return updates


def _add_accumulators(function: Function, raw: dict | None = None) -> list[tuple[OptimizerUpdate, Parameter, object]]:
    """For every update: (update, accumulator parameter, acc + grad), grad its raw gradient in
    ``raw`` (parameter name -> value of ``function``) or else its input. Not yet among the parameters."""
    entries = []
    for update in _updates(function):
        param_name = update.inputs[update.param_input].node.name
        grad = (raw or {}).get(param_name, update.inputs[update.grad_input])
        acc = Parameter(name=ACCUMULATOR_PREFIX + param_name, dtype=grad.dtype.value, shape=tuple(grad.shape),
                        role=Role.ACCUMULATOR)
        entries.append((update, acc, Add(acc.output(), grad, name=f"accumulate_{param_name}").output()))
    names = [update.inputs[update.param_input].node.name for update, _, _ in entries]
    if len(set(names)) != len(names):
        duplicate = next(n for n in names if names.count(n) > 1)
        raise ValidationError(f"accumulate_steps: parameter '{duplicate}' has more "
                              f"than one optimizer update; which gradient to accumulate is ambiguous")
    return entries


def _update_dependent(function: Function) -> set[int]:
    """Ids of the nodes whose value depends on an optimizer update (the updates included)."""
    dependent: set[int] = set()
    for node in function.ordered_nodes():  # inputs before users
        if isinstance(node, OptimizerUpdate) or any(i.node.id in dependent for i in node.inputs):
            dependent.add(node.id)
    return dependent


def _in_copy(raw_gradients: dict | None, copies: dict) -> dict:
    """The raw gradients (parameter name -> value of the original function) as values of its clone."""
    return {name: copies[value.node.id].output(value.index) for name, value in (raw_gradients or {}).items()
            if value.node.id in copies}


def _read_instead(function: Function, old, new, besides) -> None:
    """Every reader of ``old`` but ``besides`` reads ``new``."""
    for node in function.ordered_nodes():
        if node is besides:
            continue
        node.inputs = [new if i.node is old.node and i.index == old.index else i for i in node.inputs]


def build_apply(function: Function, steps: int, average: bool = True,
                raw_gradients: dict | None = None) -> tuple[Function, list[Parameter], dict]:
    """The variant run on every k-th micro-step, before the collective passes rewrite it. Without
    ``average`` the update takes the sum of the k gradients (Paddle's gradient merge, avg=False).
    ``raw_gradients``: parameter name -> its gradient before clipping and regularization (a value
    of ``function``); these are accumulated instead, and what read them reads the merged gradient.
    Returns the variant, its accumulators and those merged gradients (parameter name -> value of the
    variant), which the AllReduce pass reduces as the raw gradients of the variant."""
    copies: dict = {}
    copy = clone_function(function, copies=copies)
    raw = _in_copy(raw_gradients, copies)
    entries = _add_accumulators(copy, raw)
    merged = {}
    for update, acc, summed in entries:
        gradient = summed
        if average:
            # Dividing the sum (not scaling each micro-batch) keeps micro-steps free of any factor.
            count = Constant(steps, dtype=summed.dtype.value, name=f"accumulate_steps_{acc.name}")
            gradient = Divide(summed, count.output(), name=f"average_{acc.name}").output()
        param_name = update.inputs[update.param_input].node.name
        if param_name in raw:
            _read_instead(copy, raw[param_name], gradient, besides=summed.node)
            merged[param_name] = gradient
        else:
            update.inputs[update.grad_input] = gradient
    accumulators = [acc for _, acc, _ in entries]
    return (Function(copy.parameters + accumulators, copy.results, name=f"{function.name}_apply"), accumulators,
            merged)


def build_accumulate(function: Function, inputs: list[str], raw_gradients: dict | None = None) -> Function:
    """The variant run on the other micro-steps. ``inputs``: the Paddle inputs of the apply variant
    after its passes, which both variants must take in the same order (one Paddle operator feeds
    both); the passes may have dropped some (ZeRO-1 moves the moments into the engine), and this
    variant, having no update, does not read those. ``raw_gradients``: as for ``build_apply``."""
    copies: dict = {}
    copy = clone_function(function, copies=copies)
    entries = _add_accumulators(copy, _in_copy(raw_gradients, copies))
    dependent = _update_dependent(copy)
    results = {}
    for name, output in copy.results.items():
        if output.node.id not in dependent:
            results[name] = output
        elif result_role(name) is Role.FETCH:
            raise ValidationError(
                f"accumulate_steps: fetched value '{result_variable(name)}' (node '{output.node.name}', "
                f"{output.node.op_type}) depends on the optimizer update, which micro-steps do not run")
    for _, acc, summed in entries:
        results[accumulator_result(acc.name)] = summed
    by_name = {p.name: p for p in copy.parameters}
    missing = [n for n in inputs if n not in by_name]
    if missing:  # a pass added a Paddle input: the two variants could not share the operator
        raise ValidationError(f"accumulate_steps: the apply variant's inputs {missing} are not inputs of "
                              f"function '{function.name}'")
    return Function([by_name[n] for n in inputs] + [acc for _, acc, _ in entries], results,
                    name=f"{function.name}_accumulate")
