#!/usr/bin/env python
"""Generates docs/OPS.md, the table of supported Paddle ops, from the converter registry.

  python tools/gen_op_table.py           # (re)writes docs/OPS.md
  python tools/gen_op_table.py --check   # exit 1 if docs/OPS.md is not up to date

One row per converter function of ``paddle_ngraph.frontend.OP_TABLE`` (filled by the
``@converter(...)`` registrations of ``frontend/converters/``), in registration order: the
legacy op names and the PIR op names (``pd_op.*``, ``builtin.*``) that map to it, and the
IR op types it can produce. The IR op types are derived from the converter source: the
converter's code and that of the converters-package helpers it references (recursively) are
parsed, and every IR op class they name (``ops.Add``, or a module-level table of op classes
such as ``_BINARY``) is listed, whichever branch uses it.
"""
from __future__ import annotations

import argparse
import ast
import functools
import inspect
import os
import sys
import textwrap
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUTPUT = os.path.join(ROOT, "docs", "OPS.md")
PIR_PREFIXES = ("pd_op.", "builtin.")


def _converters_package():
    from paddle_ngraph.frontend import converters

    return converters.__name__


def _ir_op_type(value):
    """The IR op type of ``value`` if it is an IR op class, else None."""
    from paddle_ngraph.ir.node import Node

    if isinstance(value, type) and issubclass(value, Node) and value is not Node:
        return value.op_type
    return None


def _in_package(obj, package: str) -> bool:
    module = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", "")
    return bool(module) and (module == package or module.startswith(package + "."))


def ir_ops_of(function, package: str | None = None) -> set[str]:
    """IR op types named by ``function`` and by the converters-package functions it references."""
    package = package or _converters_package()
    found: set[str] = set()
    seen, pending = {function}, [function]
    while pending:
        op_types, referenced = _named_by(pending.pop(), package)
        found.update(op_types)
        for helper in referenced:
            if helper not in seen:
                seen.add(helper)
                pending.append(helper)
    return found


@functools.lru_cache(maxsize=None)
def _named_by(function, package: str) -> tuple[frozenset, tuple]:
    """What ``function``'s own source names: IR op types, and converters-package functions.

    Cached: parsing a function's source is the cost of the table (many converters share helpers,
    and the tests render the table several times in one process)."""
    found: set[str] = set()
    referenced: list = []
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    namespace = function.__globals__

    def visit_value(value):
        op_type = _ir_op_type(value)
        if op_type is not None:
            found.add(op_type)
        elif isinstance(value, types.FunctionType) and _in_package(value, package):
            referenced.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                if _ir_op_type(item) is not None:
                    found.add(_ir_op_type(item))
        elif isinstance(value, (list, tuple, set, frozenset)):
            for item in value:
                if _ir_op_type(item) is not None:
                    found.add(_ir_op_type(item))

    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in namespace:
            visit_value(namespace[node.id])
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in namespace:
            owner = namespace[node.value.id]
            # ``ops.Add`` (the IR op package) or ``shape.zeros_like`` (another converters module)
            if isinstance(owner, types.ModuleType) and hasattr(owner, node.attr):
                visit_value(getattr(owner, node.attr))
    return frozenset(found), tuple(referenced)


def rows() -> list[dict]:
    """One row per converter function, in the order of first appearance in OP_TABLE."""
    from paddle_ngraph.frontend import OP_TABLE

    package = _converters_package()
    by_function: dict = {}
    for name, function in OP_TABLE.items():
        by_function.setdefault(function, []).append(name)
    result = []
    for function, names in by_function.items():
        module = function.__module__
        short = module[len(package) + 1:] if module.startswith(package + ".") else module
        result.append({
            "legacy": [n for n in names if not n.startswith(PIR_PREFIXES)],
            "pir": [n for n in names if n.startswith(PIR_PREFIXES)],
            "converter": f"{short}.{function.__name__}",
            "ir_ops": sorted(ir_ops_of(function, package)),
        })
    return result


def _cell(items) -> str:
    return ", ".join(f"`{i}`" for i in items) if items else "—"


def render() -> str:
    from paddle_ngraph.frontend import OP_TABLE, SKIPPED_OPS

    table = rows()
    legacy = sum(len(r["legacy"]) for r in table)
    pir = sum(len(r["pir"]) for r in table)
    lines = [
        "# Supported Paddle ops",
        "",
        "<!-- Generated by tools/gen_op_table.py from paddle_ngraph.frontend.OP_TABLE; do not edit. -->",
        "<!-- Regenerate with: python tools/gen_op_table.py -->",
        "",
        f"{len(OP_TABLE)} Paddle op types ({legacy} legacy, {pir} PIR) handled by {len(table)} converter functions "
        "(module names relative to `paddle_ngraph.frontend.converters`).",
        "",
        "The *IR ops* column is derived from the converter source: every IR op class named by the converter "
        "or by the converters-package helpers it references (recursively), including module-level tables of "
        "op classes. It lists every IR op the converter can produce on any branch; one conversion may produce "
        "fewer.",
        "",
        "| Legacy op(s) | PIR op(s) | Converter | IR ops |",
        "|---|---|---|---|",
    ]
    for r in table:
        lines.append(f"| {_cell(r['legacy'])} | {_cell(r['pir'])} | `{r['converter']}` | {_cell(r['ir_ops'])} |")
    lines += [
        "",
        "## Ops without computation",
        "",
        "Handled by the program decoders (feeds, fetches, parameter declarations, list packing); "
        "they produce no IR op:",
        "",
        _cell(sorted(SKIPPED_OPS)),
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="exit 1 if the output file differs from the generated text")
    p.add_argument("--output", default=DEFAULT_OUTPUT, help="output file (default docs/OPS.md)")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        try:
            with open(args.output, encoding="utf-8") as f:
                current = f.read()
        except FileNotFoundError:
            current = None
        if current != text:
            print(f"{args.output} is out of date; regenerate with: python tools/gen_op_table.py", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date")
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {args.output} ({len(rows())} converters)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    sys.exit(main())
