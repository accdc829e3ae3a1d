"""Runs passes in order, validating after each, optionally dumping after each.

Like nGraph's pass manager: set ``PADDLE_NGRAPH_DUMP_PASSES=<dir>`` (or pass
``dump_dir``) to get ``<dir>/NN_<pass>.json`` and ``.txt`` after every pass.
A failing pass is reported with its name and the passes that ran before it.
"""
from __future__ import annotations

import os

from ..errors import NgraphError
from ..ir import Function, to_json, to_text
from .base import FunctionPass
from .validate import Validate


class PassManager:
    def __init__(self, passes: list[FunctionPass], validate: bool = True, dump_dir: str | None = None):
        self.passes = list(passes)
        self.validate = validate
        self.dump_dir = dump_dir if dump_dir is not None else os.environ.get("PADDLE_NGRAPH_DUMP_PASSES")

    def run(self, function: Function) -> Function:
        self._dump(function, 0, "input")
        done = []
        for number, p in enumerate(self.passes, start=1):
            try:
                p.run(function)
                if self.validate:
                    Validate().run(function)
            except NgraphError as e:
                before = ", ".join(done) or "none"
                raise type(e)(f"pass '{p.name}' failed (passes run before it: {before}): {e}") from e
            done.append(p.name)
            self._dump(function, number, p.name)
        return function

    def _dump(self, function: Function, number: int, name: str):
        if not self.dump_dir:
            return
        os.makedirs(self.dump_dir, exist_ok=True)
        stem = os.path.join(self.dump_dir, f"{number:02d}_{name}")
        with open(stem + ".json", "w") as f:
            f.write(to_json(function))
        with open(stem + ".txt", "w") as f:
            f.write(to_text(function) + "\n")
