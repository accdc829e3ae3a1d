#!/usr/bin/env bash
# Incremental build of libpdng_cpu.so into paddle_ngraph/ for development (setup.py does the same
# for installs). Serialized with a lock, so that several builds can be started at once.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
exec 9>build/.native.lock 2>/dev/null || { mkdir -p build; exec 9>build/.native.lock; }
flock 9
$PY -c "import setup_native; setup_native.build('build/native', 'paddle_ngraph')"
