"""What a value of a function is, typed on the IR: no module has to know another's naming.

A parameter's role is its ``role`` attribute. A result's role travels with its name: result
names are ``ResultName`` strings that also carry the role and the variable the result belongs
to, so the dict copies the passes make (``{**function.results}``, ``clone_function``) keep
them. A node a pass made for a purpose says so in ``Node.role`` (recompute copies).

The names keep readable prefixes ("state:w", "fetch:loss") so that they are unique and read
well in dumps; nothing decides a role from them.
"""
from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """A str, so that ``role == "parameter"`` and the JSON of a Parameter's attributes are unchanged."""

    # Parameters: what the function takes.
    FEED = "feed"                # a batch input
    PARAMETER = "parameter"      # a trainable weight
    STATE = "state"              # another persistable variable (moments, statistics, the LR); as a
    #                              result: its new value, written back over the variable
    ACCUMULATOR = "accumulator"  # a gradient sum the engine owns between micro-steps; as a result: its new value
    SHARD = "shard"              # ZeRO-1: this rank's slice of a bucket of parameters or optimizer state
    SNAPSHOT = "snapshot"        # local SGD: the parameters at the last synchronization
    SAVED = "saved"              # dygraph: a forward value the backward function takes
    SEED = "seed"                # dygraph: the gradient of an output, where backward starts
    # Results: what the function returns (besides STATE, ACCUMULATOR and SAVED).
    FETCH = "fetch"              # a variable the program fetches
    OUTPUT = "output"            # any other result (a Layer's output, local SGD's loss)
    GRADIENT = "gradient"        # dygraph: the gradient of a parameter
    INPUT_GRADIENT = "input_gradient"  # dygraph: the gradient of a Layer's input
    # Nodes.
    RECOMPUTE_COPY = "recompute_copy"  # a forward node copied into backward (passes/recompute.py)


class ResultName(str):
    """A result's name that also says its ``role`` and the ``variable`` it fetches or writes back."""

    def __new__(cls, name: str, role: Role, variable: str | None = None):
        self = super().__new__(cls, name)
        self.role = Role(role)
        self.variable = variable
        return self

    # repr() stays the plain string's: messages that quote a result name read as before.

    def __getnewargs__(self):  # copy, deepcopy and pickle rebuild it with its role
        return str(self), self.role, self.variable


# The spelling of the names (prefixes for uniqueness and readability only).
FETCH_PREFIX = "fetch:"
STATE_PREFIX = "state:"


def fetch_result(variable: str) -> ResultName:
    return ResultName(FETCH_PREFIX + variable, Role.FETCH, variable)


def state_result(variable: str) -> ResultName:
    """The new value of a persistable variable (or of a function parameter holding one)."""
    return ResultName(STATE_PREFIX + variable, Role.STATE, variable)


def accumulator_result(parameter: str) -> ResultName:
    """An accumulator's new value: named like the accumulator parameter it replaces."""
    return ResultName(parameter, Role.ACCUMULATOR, parameter)


def result_role(name: str) -> Role:
    """A plain string (a name typed by hand, a test's) is an OUTPUT."""
    return getattr(name, "role", Role.OUTPUT)


def result_variable(name: str) -> str | None:
    return getattr(name, "variable", None)


def written_back(function) -> dict[str, str]:
    """Result name -> the parameter it replaces: the new values of state and accumulators whose
    variable is one of the function's parameters (the backend may write them in place)."""
    names = {p.name for p in function.parameters}
    return {r: r.variable for r in function.results
            if result_role(r) in (Role.STATE, Role.ACCUMULATOR) and r.variable in names}
