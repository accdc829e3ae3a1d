"""One plan behind every answer: ``unsupported_ops`` reports the ops that the plan ``transpile``
executes leaves to Paddle (read back from the engines it made), on every reference model of the
zoo in both IRs, on a program with an op the engine lacks, and on one with control flow."""
import pytest

import paddle_ngraph
from paddle_ngraph.zoo.models import MODELS, build_program

import cflow_models as cm
import fallback_models as fm
from harness import IRS, ir_guard


def programs():
    yield from ((f"zoo:{model}", ir, lambda model=model: build_program(model, "sgd")[:2])
                for ir in IRS for model in MODELS)
    yield from ((f"custom op", ir, lambda: fm.build("custom")[:2]) for ir in IRS)
    yield ("gradient_merge", "legacy", lambda: cm.build("gradient_merge")[:2])
    yield ("while_loop", "legacy", lambda: cm.build("while_loop")[:2])
    yield ("cond", "pir", lambda: cm.build("cond")[:2])


@pytest.mark.parametrize("label, ir, build", [pytest.param(*p, id=f"{p[0]}-{p[1]}") for p in programs()])
def test_unsupported_ops_is_the_executed_plan(label, ir, build):
    with ir_guard(ir):
        main, startup = build()
        reported = paddle_ngraph.unsupported_ops(main, backend="INTERPRETER")
        assert reported == fm.executed_plan(main, startup)
    if label.startswith("zoo:"):
        assert reported == []
    else:
        assert reported and all(r["reason"] for r in reported)
