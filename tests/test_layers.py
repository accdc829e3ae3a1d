"""The layering contract of pyproject.toml ([tool.importlinter]), checked with import-linter.

Layers, low to high: errors, ir, frontend, passes, distributed, backends, config,
config_sources, transpiler, dygraph and checkpoint, fleet, api, tools and zoo. A module imports
only from layers below its own (imports inside functions count too); the modules of a package
import each other without cycles; the IR and the passes know neither the frontend nor Paddle.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "paddle_ngraph"
# Compiled from cython/ (setup_native.py): below every layer, and invisible to import-linter,
# which reads .py files only.
NATIVE_MODULES = {"_bridge", "_ccl", "_cpu", "_engine_op"}


def test_imports_keep_the_layering_contract():
    lint_imports = Path(sys.executable).with_name("lint-imports")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([str(lint_imports), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"lint-imports failed:\n{run.stdout}\n{run.stderr}"
    assert "0 broken" in run.stdout, run.stdout


def _names_taken_from_the_package_root(path: Path):
    """(line, name) of every ``from <package root> import name``, ``from <root>.<name> import ...``
    and ``import paddle_ngraph[.<name>]``."""
    depth = len(path.relative_to(PACKAGE).parts)  # the level of a relative import of the root
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):  # ``import paddle_ngraph`` takes the root itself
            for alias in node.names:
                if alias.name == "paddle_ngraph" or alias.name.startswith("paddle_ngraph."):
                    yield node.lineno, alias.name.partition(".")[2].split(".")[0] or "paddle_ngraph"
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            if node.level != depth:
                continue  # relative to a subpackage
            module = node.module
        elif node.module == "paddle_ngraph" or (node.module or "").startswith("paddle_ngraph."):
            module = node.module.partition(".")[2] or None
        else:
            continue
        if module is None:
            yield from ((node.lineno, alias.name) for alias in node.names)
        else:
            yield node.lineno, module.split(".")[0]


def test_only_the_compiled_modules_are_imported_through_the_package_root():
    """The contract ignores ``<module> -> paddle_ngraph`` for the compiled modules' imports
    (pyproject.toml): that must not let through an import of the root's own names, such as
    ``from .. import transpile``, which would run up every layer."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "__init__.py":
            continue
        for line, name in _names_taken_from_the_package_root(path):
            is_module = (PACKAGE / f"{name}.py").exists() or (PACKAGE / name / "__init__.py").exists()
            if not is_module and name not in NATIVE_MODULES:
                found.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert not found, "names imported from the package root instead of their own module:\n" + "\n".join(found)
