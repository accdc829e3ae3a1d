"""Ops of a captured Layer that the engine lacks, run by Paddle's executor between engine segments.

A run of such ops (one *Paddle piece*, ``segmented.py``) is copied out of the captured program into
a small PIR program of its own: each value it reads from elsewhere becomes a ``pd_op.data`` feed,
the constants it reads (ops without operands: ``full``, ``full_int_array``) and the
``builtin.combine`` ops packing its vector operands are copied with it, and its ops are cloned as
they are, attributes and all. Paddle's executor runs that program on NumPy feeds and returns NumPy
results: the op runs exactly as Paddle runs it in a static program, custom operators included, with
no per-op table of Python signatures to keep.
"""
from __future__ import annotations

import warnings

import numpy as np
import paddle

from ..errors import ConversionError

_FEEDS = {"pd_op.data", "builtin.parameter"}


class PaddlePiece:
    """``ops``: the OpViews to run, in program order; ``inputs``: the names of the values it reads
    from elsewhere (fed, in this order); ``outputs``: the names of those it makes that others read."""

    def __init__(self, view, ops: list, outputs: list[str], executor):
        self.view = view
        self.ops = ops
        self.outputs = list(outputs)
        self.executor = executor
        self.scope = paddle.static.Scope()
        self.inputs: list[str] = []
        self._feed_names: list[str] = []
        self.program = paddle.static.Program()
        with paddle.base.framework._dygraph_guard(None), paddle.static.program_guard(self.program):
            self._clone()

    def _clone(self):
        mapping = paddle.pir.IrMapping()
        options = paddle.pir.CloneOptions(False, True, True)
        names = self.view.value_names

        def mapped(value):
            if not value.initialized():  # an optional operand left out (interp's size tensors, ...)
                return value
            if mapping.has(value):
                return mapping.look_up(value)
            source = value.get_defining_op()
            kind = source.name() if source is not None else None
            if kind == "builtin.combine" or (kind not in _FEEDS and source is not None and source.num_operands() == 0):
                for operand in source.operands_source():
                    mapped(operand)
                self._cloned(source, mapping, options)
                return mapping.look_up(value)
            name = names.get(value.id)
            if name is None:
                raise ConversionError(f"a value read by {self.ops[0].location()} has no name in the captured program")
            feed = f"pdng_in_{len(self.inputs)}"
            mapping.add(value, paddle.static.data(feed, list(value.shape), value.dtype))
            self.inputs.append(name)
            self._feed_names.append(feed)
            return mapping.look_up(value)

        for op in self.ops:
            for operand in op.native.operands_source():
                mapped(operand)  # what earlier ops of the piece made is mapped already
            self._cloned(op.native, mapping, options)
        made = {}
        for op in self.ops:
            for result in op.native.results():
                name = names.get(result.id)
                if name is not None:
                    made[name] = mapping.look_up(result)
        missing = [n for n in self.outputs if n not in made]
        if missing:
            raise ConversionError(f"the ops left to Paddle ({self.ops[0].location()} ...) do not make "
                                  f"{', '.join(missing)}")
        self._fetch = [made[n] for n in self.outputs]

    @staticmethod
    def _cloned(native, mapping, options):
        clone = native.clone(mapping, options)
        for old, new in zip(native.results(), clone.results()):
            if not mapping.has(old):
                mapping.add(old, new)
        return clone

    def run(self, env: dict, params: dict):
        """Reads its inputs from ``env`` (name -> NumPy array) and puts its outputs there; a new
        value of a parameter or buffer (``params``: name -> view of the Layer's tensor) goes there."""
        feed = {f: env[n] for f, n in zip(self._feed_names, self.inputs)}
        with paddle.base.framework._dygraph_guard(None), warnings.catch_warnings():
            # The feeds are declared with the types the captured program gives them; for some values
            # that is a placeholder (rnn's Reserve: shape [0], float32, where the kernel makes uint8
            # of its own shape). What is fed is what the producing op made, so Paddle's warnings that
            # a feed "should have" the declared shape or dtype, naming internal feeds, are noise.
            warnings.filterwarnings("ignore", message=r"(The fed Variable|The data type of fed Variable) 'pdng_in_",
                                    category=UserWarning)
            results = self.executor.run(self.program, feed=feed, fetch_list=self._fetch, scope=self.scope)
        for name, value in zip(self.outputs, results):
            if name in params:
                np.copyto(params[name], value, casting="no")
            else:
                env[name] = value
