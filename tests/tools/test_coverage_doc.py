"""docs/COVERAGE.md matches what tools/coverage.py measures, row by row: every layer, loss and
optimizer row, and the vision models of each kind of block (every family, and within a family each
block type and width pattern: resnet18's basic blocks and resnet50's bottlenecks, grouped and wide
ones, ...). The deeper and wider repeats of those blocks (densenet264, resnet152, resnext152_64x4d,
vgg19, ...; Paddle takes most of a minute to build them) are checked by the full
``python tools/coverage.py --check``."""
import os
import subprocess
import sys

import pytest

from paddle_ngraph.quiet import quiet_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# One constructor per block type and width pattern of each family of paddle.vision.models.
MODELS = ["alexnet", "densenet121", "googlenet", "inception_v3", "mobilenet_v1", "mobilenet_v2", "mobilenet_v3_large",
          "mobilenet_v3_small", "resnet18", "resnet50", "resnext50_32x4d", "resnext50_64x4d", "wide_resnet50_2",
          "shufflenet_v2_swish", "shufflenet_v2_x0_25", "squeezenet1_0", "squeezenet1_1", "vgg11"]


@pytest.mark.slow  # builds every program of these rows in both IRs: about 25 s here
def test_docs_coverage_md_is_up_to_date():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "coverage.py"), "--check", "--models", *MODELS],
                          capture_output=True, text=True, timeout=900, env=quiet_env())
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_help():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "coverage.py"), "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--check" in proc.stdout
