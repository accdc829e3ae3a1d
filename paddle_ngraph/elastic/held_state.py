"""A commit that holds the memory of the state the engines update, instead of copying it.

Copying is what a static program's commit cost (resnet18: 85 MB, 9-16 ms, bound by memory
bandwidth). But the engines update parameters and optimizer state by reading every element of
the old value and writing the new one, which they can as well write elsewhere. So each such
variable gets two buffers (Paddle tensors) that take turns: the scope's variable shares one (the
live one); a commit takes the live buffer's memory as it is, and the next step that updates the
variable reads it there and writes the new value into the other buffer, which the scope's variable
then shares (``DenseTensor._share_data_with``). The other buffer held the commit before, which
this commit replaced. A commit thus costs a few dictionary lookups per variable.

Only state that engines alone write qualifies (``eligible``): what their steps write back, where
no op left to Paddle writes it. Everything else a commit copies as before: under ZeRO-1 the
optimizer state, whose slices the engines hold (gathered whole into the scope for the commit). Between a commit and
the next step, state must not be written from outside in place (``tensor.set`` reuses the
memory): ``detach`` gives the variable the other buffer first, with a copy of the value.

After a failure, ``restore_held`` has the scope's variable share the commit's buffer again (no
copy), and the next step writes into the other one.
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


def eligible(engines) -> set[str]:
    """The variables only engines update (see the module docstring): those their steps write back
    (an accumulating micro-step writes none of them: what it skips stays pending until the update),
    less what an op left to Paddle writes."""
    written, refused = set(), set()
    for engine in engines:
        for variant in engine.schedule.variants:
            parameters = variant.function.parameters
            written |= {parameters[i].name for _, i in variant.state_writeback}
        plan = engine.plan
        for op in (plan.fallback if plan is not None else ()):
            refused.update(op.output_names())
    return written - refused


class _Buffers:
    """One variable's two buffers: Paddle tensors (which keep the memory alive), NumPy arrays of
    their memory, their addresses, and which one the scope's variable shares."""

    __slots__ = ("tensors", "arrays", "addresses", "live")

    def __init__(self, tensors):
        self.tensors = tensors
        self.arrays = [memory_view(t._ptr(), t._dtype(), t.shape()) for t in tensors]
        self.addresses = [t._ptr() for t in tensors]
        self.live = 0

    @property
    def usable(self) -> bool:
        return all(a is not None for a in self.arrays)


class HeldState:
    """The two buffers of each held variable of one program: ``hold`` at a commit,
    ``destination``/``written`` for the engines' next step, ``restore_held``/``detach`` for the
    rest of ProgramState."""

    def __init__(self, scope_of):
        self._scope_of = scope_of  # () -> the scope the program runs in
        self.names: set[str] = set()  # eligible for the current program (``eligible``)
        self._buffers: dict[str, _Buffers] = {}
        # The buffers a variable had before it got new ones: the last commit may still be theirs.
        self._retired: dict[str, _Buffers] = {}
        self._pending: dict[str, _Buffers] = {}  # variables whose next update goes to the other buffer
        self._tensors: dict = {}  # name -> the scope's tensor (its Python handle, looked up once)
        self._tensors_scope = None

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def tensor(self, name: str):
        """The scope's tensor of ``name`` (None: no such variable)."""
        scope = self._scope_of()
        if scope is not self._tensors_scope:
            self._tensors, self._tensors_scope = {}, scope
        found = self._tensors.get(name)
        if found is None:
            var = scope.find_var(name)
            if var is None:
                return None
            found = self._tensors[name] = var.get_tensor()
        return found

    def pending_now(self) -> dict:
        return dict(self._pending)

    def pending_reset(self, pending: dict):
        """Back to what ``pending_now`` returned (a commit failed half-way: the last stays)."""
        self._pending = dict(pending)

    # --- the engines' side ------------------------------------------------------------------------
    def destination(self, name: str):
        found = self._pending.get(name)
        return found.arrays[1 - found.live] if found is not None else None

    def written(self, names):
        """The step wrote the new values of ``names`` into their other buffers: the scope's
        variables share those now (the commit keeps the old)."""
        for name in names:
            buffers = self._pending.pop(name)
            buffers.live = 1 - buffers.live
            self.tensor(name)._share_data_with(buffers.tensors[buffers.live])

    # --- the commit's side -------------------------------------------------------------------------
    def hold(self, name: str, tensor):
        """The commit's array of ``tensor`` (the scope's variable ``name``): its live buffer's, or
        None where it cannot be held (the caller copies it)."""
        buffers = self._buffers.get(name)
        address = tensor._ptr()
        if buffers is None or address != buffers.addresses[buffers.live]:
            if buffers is not None and address == buffers.addresses[1 - buffers.live]:
                buffers.live = 1 - buffers.live
            else:  # the first commit, or the variable was given other memory from outside
                buffers = self._adopt(name, tensor)
                if buffers is None:
                    return None
        self._pending[name] = buffers
        return buffers.arrays[buffers.live]

    def _adopt(self, name: str, tensor):
        """Two buffers for ``name``: the memory the scope's variable has, and new memory."""
        shared = _sharing(tensor)
        buffers = _Buffers([shared, _fresh_like(shared)])
        if not buffers.usable:
            return None
        if name in self._buffers:
            self._retired[name] = self._buffers[name]
        self._buffers[name] = buffers
        return buffers

    def holds(self, name: str, value) -> bool:
        """Whether ``value`` is the array of one of ``name``'s buffers (a commit this rank made)."""
        buffers = self._buffers.get(name)
        return buffers is not None and any(value is a for a in buffers.arrays)

    def restore_held(self, name: str, value):
        """The scope's variable shares the buffer of ``value`` (a commit's array, ``holds``) again:
        no copy. The next step writes into the other buffer."""
        buffers = self._buffers[name]
        buffers.live = 0 if value is buffers.arrays[0] else 1
        tensor = self._scope_of().var(name).get_tensor()
        tensor._share_data_with(buffers.tensors[buffers.live])
        self._pending[name] = buffers

    def detach(self, name: str):
        """Before ``name`` is written from outside: if the scope's variable shares the memory of
        the last commit, it gets the other buffer with a copy of the value (nothing pending)."""
        buffers = self._pending.pop(name, None)
        if buffers is None:
            return
        tensor = self.tensor(name)
        if tensor is not None and tensor._ptr() == buffers.addresses[buffers.live]:
            other = 1 - buffers.live
            buffers.arrays[other][...] = buffers.arrays[buffers.live]
            buffers.live = other
            tensor._share_data_with(buffers.tensors[other])
