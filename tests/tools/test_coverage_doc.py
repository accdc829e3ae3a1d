"""docs/COVERAGE.md matches what tools/coverage.py measures, row by row (about 2 minutes here:
Paddle builds every program of the table in both IRs)."""
import os
import subprocess
import sys

import pytest

from paddle_ngraph.quiet import quiet_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow  # converts and trains every vision model: about 2 min here
def test_docs_coverage_md_is_up_to_date():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "coverage.py"), "--check"],
                          capture_output=True, text=True, timeout=900, env=quiet_env())
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_help():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "coverage.py"), "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--check" in proc.stdout
