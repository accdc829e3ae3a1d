"""docs/OPS.md is generated from the converter registry (tools/gen_op_table.py) and up to date."""
import importlib.util
import os

from paddle_ngraph.frontend import OP_TABLE
from paddle_ngraph.ir.node import op_types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_op_table", os.path.join(ROOT, "tools", "gen_op_table.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = load_generator()


def test_docs_ops_md_is_up_to_date(capsys):
    assert gen.main(["--check"]) == 0, "docs/OPS.md is stale: run python tools/gen_op_table.py"


def test_check_fails_on_a_stale_or_missing_file(tmp_path, capsys):
    stale = tmp_path / "OPS.md"
    stale.write_text(gen.render().replace("| `relu` |", "| `relu6` |"), encoding="utf-8")
    assert gen.main(["--check", "--output", str(stale)]) == 1
    assert gen.main(["--check", "--output", str(tmp_path / "missing.md")]) == 1
    assert gen.main(["--output", str(stale)]) == 0
    assert gen.main(["--check", "--output", str(stale)]) == 0


def test_every_op_name_appears_once_and_ir_ops_are_registered():
    rows = gen.rows()
    names = [n for r in rows for n in r["legacy"] + r["pir"]]
    assert sorted(names) == sorted(OP_TABLE)
    assert all(not n.startswith(("pd_op.", "builtin.")) for r in rows for n in r["legacy"])
    registered = set(op_types())
    for r in rows:
        assert set(r["ir_ops"]) <= registered, r


def test_ir_ops_follow_helpers_and_op_tables():
    by_converter = {r["converter"]: set(r["ir_ops"]) for r in gen.rows()}
    assert {"Add", "Subtract", "Multiply", "Divide", "Power"} <= by_converter["elementwise.elementwise"]  # _BINARY
    assert {"MaxPool", "AvgPool", "Transpose"} <= by_converter["pool.pool2d"]  # op chosen by kind; layout helper
    assert "ReduceSum" in by_converter["elementwise.elementwise_add_grad"]  # via helpers.reduce_to_shape
    assert by_converter["activation.relu"] == {"Relu"}
