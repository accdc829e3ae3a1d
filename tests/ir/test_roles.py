"""Roles typed on the IR (ir/roles.py): they travel with parameters, results and nodes through
copies, clones and JSON, and nothing reads them from a name."""
import copy
import pickle

import pytest

from paddle_ngraph.errors import ValidationError
from paddle_ngraph.ir import Function, Role, clone_function, from_json, ops, to_json
from paddle_ngraph.ir.roles import (accumulator_result, fetch_result, result_role, result_variable, state_result,
                                    written_back)
from paddle_ngraph.passes.rewrite import replace_outputs


def training_like_function():
    """w is updated (a STATE result written back), loss fetched, acc an accumulator."""
    x = ops.Parameter(dtype="float32", shape=(2, 3), name="x")
    w = ops.Parameter(dtype="float32", shape=(3,), name="w", role=Role.PARAMETER)
    acc = ops.Parameter(dtype="float32", shape=(3,), name="grad_sum", role=Role.ACCUMULATOR)
    y = ops.Multiply(x.output(), w.output(), name="y")
    loss = ops.ReduceMean(y.output(), axes=[0, 1], name="loss")
    new_w = ops.Subtract(w.output(), acc.output(), name="new_w")
    results = {fetch_result("loss"): loss.output(), state_result("w"): new_w.output(),
               accumulator_result("grad_sum"): new_w.output(), "plain": y.output()}
    return Function([x, w, acc], results, name="train")


def roles(function):
    return {str(k): (result_role(k), result_variable(k)) for k in function.results}


def test_result_names_keep_their_roles_through_copies_clones_and_json():
    f = training_like_function()
    expected = {"fetch:loss": (Role.FETCH, "loss"), "state:w": (Role.STATE, "w"),
                "grad_sum": (Role.ACCUMULATOR, "grad_sum"), "plain": (Role.OUTPUT, None)}
    assert roles(f) == expected
    assert roles(Function(f.parameters, {**f.results}, name="copy")) == expected
    assert roles(clone_function(f)) == expected
    assert roles(from_json(to_json(f))) == expected
    assert {str(k): result_role(k) for k in copy.deepcopy(f.results)} == {k: r for k, (r, _) in expected.items()}
    name = pickle.loads(pickle.dumps(state_result("w")))
    assert (name, name.role, name.variable) == ("state:w", Role.STATE, "w")
    # Looking a result up by its plain name still works, and keeps the typed key.
    f.results["state:w"] = f.results["fetch:loss"]
    assert result_role(next(k for k in f.results if k == "state:w")) is Role.STATE


def test_written_back_results_are_found_by_role_not_by_name():
    f = training_like_function()
    assert written_back(f) == {"state:w": "w", "grad_sum": "grad_sum"}
    # A hand-made name that only looks like a state result replaces nothing.
    f.results["state:x"] = f.results["plain"]
    assert written_back(f) == {"state:w": "w", "grad_sum": "grad_sum"}


def test_parameter_roles_are_their_attribute_and_survive_json():
    f = training_like_function()
    back = from_json(to_json(f))
    assert [p.role for p in back.parameters] == [Role.FEED, Role.PARAMETER, Role.ACCUMULATOR]
    assert back.parameters[1].attrs["role"] == "parameter"  # the attribute reads as before


def recompute_shaped_function(copy_name, copy_role):
    """``reader`` reads a gradient-like value and a copy of a forward node: a recompute copy
    (by role) must come after the other input, so that it runs as late as possible."""
    x = ops.Parameter(dtype="float32", shape=(3,), name="x")
    forward = ops.Relu(x.output(), name="forward")
    duplicate = ops.Relu(x.output(), name=copy_name)
    duplicate.role = copy_role
    gradient = ops.Negative(forward.output(), name="gradient")
    reader = ops.Add(duplicate.output(), gradient.output(), name="reader")
    return Function([x], {"out": reader.output()}), duplicate, gradient


def test_recompute_copies_are_ordered_by_role_not_by_name():
    f, duplicate, gradient = recompute_shaped_function("any_name", Role.RECOMPUTE_COPY)
    order = [n.name for n in f.ordered_nodes()]
    assert order.index("any_name") > order.index("gradient")
    f, duplicate, gradient = recompute_shaped_function("recompute/forward", None)
    order = [n.name for n in f.ordered_nodes()]
    assert order.index("recompute/forward") < order.index("gradient")  # creation order: a plain node


def test_a_node_role_survives_clone_and_json():
    f, _, _ = recompute_shaped_function("copy", Role.RECOMPUTE_COPY)
    for g in (clone_function(f), from_json(to_json(f))):
        by_name = {n.name: n for n in g.ordered_nodes()}
        assert by_name["copy"].role is Role.RECOMPUTE_COPY and by_name["forward"].role is None


def test_a_cyclic_replacement_names_the_function_and_node():
    f = training_like_function()
    y = f.results["plain"]
    loss = f.results["fetch:loss"]
    with pytest.raises(ValidationError, match="function 'train'.*cycle through node '(y|loss)'"):
        replace_outputs(f, {(y.node.id, 0): loss, (loss.node.id, 0): y})
