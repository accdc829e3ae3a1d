"""A commit that holds the memory of the state the engines update, instead of copying it.

Copying is what a static program's commit cost (resnet18: 85 MB, 9-16 ms, bound by memory
bandwidth). But the engines update parameters and optimizer state by reading every element of
the old value and writing the new one, which they can as well write elsewhere. So a commit keeps
the scope's current memory of each such variable as the commit's (a second Paddle tensor sharing
it, so that Paddle keeps it alive), and the next step that updates the variable reads it there and
writes the new value into spare memory, which then becomes the variable's memory in the scope
(``DenseTensor._share_data_with``). Two buffers per variable take turns, as the copying commit's
did: the spare is the memory of the commit before (free once this one is made), or new memory at
the first commit.

Only state that engines alone write, every step, qualifies (``eligible``): each engine of the
plain schedule (no accumulation, no ZeRO-1 slices) writes back the same state at every step, and
no op left to Paddle writes it. Everything else a commit copies as before. Between a commit and
the next step, state must not be written from outside in place (``tensor.set`` reuses the
memory): ``detach`` gives the variable memory of its own first.

After a failure, ``restore_held`` puts a commit's memory back into the scope without copying,
and the next step writes elsewhere again.
"""
from __future__ import annotations

from .copying import memory_view


def _fresh_like(tensor):
    """A Paddle tensor of ``tensor``'s shape and dtype, its memory not written (nor touched)."""
    import paddle

    fresh = paddle.base.core.DenseTensor()
    fresh._set_dims(tensor.shape())
    fresh._mutable_data(paddle.CPUPlace(), tensor._dtype())
    return fresh


def _sharing(tensor):
    """A second Paddle tensor holding ``tensor``'s memory (which stays alive while it does)."""
    import paddle

    other = paddle.base.core.DenseTensor()
    other._share_data_with(tensor)
    return other


def _view(tensor):
    return memory_view(tensor._ptr(), tensor._dtype(), tensor.shape())


def _same_layout(a, b) -> bool:
    return a.shape() == b.shape() and a._dtype() == b._dtype()


def eligible(engines) -> set[str]:
    """The variables the engines alone update at every step, in place (see the module docstring)."""
    from ..transpiler.schedules import Schedule

    written, refused = set(), set()
    for engine in engines:
        names = {engine.apply.function.parameters[i].name for _, i in engine.apply.state_writeback}
        if type(engine.schedule) is Schedule and engine.sharded is None:
            written |= names
        else:
            refused |= names
        plan = engine.plan
        for op in (plan.fallback if plan is not None else ()):
            refused.update(op.output_names())
    return written - refused


class HeldState:
    """The held memory of one program's state: ``hold`` at a commit, ``destination``/``written``
    for the engines' next step, ``restore_held``/``detach`` for the rest of ProgramState."""

    def __init__(self, scope_of):
        self._scope_of = scope_of  # () -> the scope the program runs in
        self.names: set[str] = set()  # eligible for the current program (``eligible``)
        self._held: dict = {}     # name -> (Paddle tensor sharing the last commit's memory, its array)
        self._pending: dict = {}  # name -> (Paddle tensor, its array): where the next update goes

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    # --- the engines' side ------------------------------------------------------------------------
    def destination(self, name: str):
        found = self._pending.get(name)
        return found[1] if found is not None else None

    def written(self, names):
        """The step wrote the new values of ``names`` into their destinations: the scope's
        variables take that memory (the commit keeps the old)."""
        scope = self._scope_of()
        for name in names:
            spare, _ = self._pending.pop(name)
            scope.find_var(name).get_tensor()._share_data_with(spare)

    # --- the commit's side -------------------------------------------------------------------------
    def hold(self, name: str, tensor, kept: set):
        """The commit's array of ``tensor`` (the scope's variable ``name``), sharing its memory, or
        None where it cannot be held (the caller copies it). ``kept``: ids of the arrays of the
        last commit; its memory may become the spare once this commit is made."""
        keeper = _sharing(tensor)
        view = _view(keeper)
        if view is None:
            return None
        if name not in self._pending:  # a step wrote elsewhere since the last commit (or none was)
            previous = self._held.get(name)
            if (previous is not None and id(previous[1]) in kept and previous[1].ctypes.data != view.ctypes.data
                    and previous[1].shape == view.shape and previous[1].dtype == view.dtype):
                self._pending[name] = previous  # the last commit's memory: this commit replaces it
            else:
                spare = _fresh_like(keeper)
                self._pending[name] = (spare, _view(spare))
        self._held[name] = (keeper, view)
        return view

    def drop(self, name: str):
        """``name`` is copied from now on (no longer eligible): its memory is made its own again."""
        self.detach(name)
        self._held.pop(name, None)

    def holds(self, name: str, value) -> bool:
        """Whether ``value`` is the array of this rank's last commit of ``name``."""
        held = self._held.get(name)
        return held is not None and held[1] is value

    def restore_held(self, name: str):
        """The scope's variable takes the last commit's memory back (no copy); the next step
        writes elsewhere. The memory it had (what a failed step left) is the spare."""
        keeper, _ = self._held[name]
        tensor = self._scope_of().var(name).get_tensor()
        if tensor._is_initialized() and tensor._ptr() != keeper._ptr() and _same_layout(tensor, keeper):
            spare = _sharing(tensor)
            self._pending[name] = (spare, _view(spare))
        elif name not in self._pending:
            spare = _fresh_like(keeper)
            self._pending[name] = (spare, _view(spare))
        tensor._share_data_with(keeper)

    def detach(self, name: str):
        """Before ``name`` is written from outside: if the scope's variable shares a commit's
        memory, it gets its own (a copy; nothing pending for it)."""
        held = self._held.get(name)
        found = self._scope_of().find_var(name)
        if held is None or found is None:
            self._pending.pop(name, None)
            return
        tensor = found.get_tensor()
        if name in self._pending and tensor._is_initialized() and tensor._ptr() == held[0]._ptr():
            spare, array = self._pending.pop(name)
            array[...] = held[1]
            tensor._share_data_with(spare)
        self._pending.pop(name, None)
