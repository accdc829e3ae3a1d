"""Running a script on N ranks under the real mpirun of the Open MPI wheel."""
import os
import subprocess
import sys

from paddle_ngraph.quiet import quiet_env

VENV_BIN = os.path.dirname(sys.executable)
MPIRUN = os.path.join(VENV_BIN, "mpirun")


def mpirun(nranks: int, script: str, *args, timeout: float = 240, env=None):
    exported = [arg for name in (env or {}) for arg in ("-x", name)]
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(nranks), *exported,
           sys.executable, script, *map(str, args)]
    full_env = quiet_env(OMPI_MCA_rmaps_base_oversubscribe="1", **(env or {}))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)
