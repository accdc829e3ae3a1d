"""Runs a test body on N ranks, under the real mpirun of the Open MPI wheel or under
paddle.distributed.launch, and brings back what each rank printed and returned.

``run_ranks(target, nranks, *args)``: ``target`` is a worker script (run as ``__main__`` with
``args`` as its argv) or a module-level function (called with ``args``, pickled, on every rank; its
return value comes back pickled, in ``RankRun.results[rank]``). Each rank runs through ``rank_main.py``,
which keeps the rank's stdout and stderr in files of its own and records how it ended (exit code,
traceback), so that a failure names the rank that failed and shows every rank's output, instead of
the launcher's "one or more processes exited with non-zero status".

Importing this module does not import Paddle (tests import it at collection).
"""
from __future__ import annotations

import dataclasses
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile

from paddle_ngraph.quiet import quiet_env

MPIRUN = os.path.join(os.path.dirname(sys.executable), "mpirun")
RANK_MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank_main.py")
LAUNCHERS = ("mpirun", "launch")
# The test allowed to start ranks now (tests/conftest.py sets it per test: those marked
# ``distributed``); None: the current test is not marked, and run_ranks refuses.
ALLOWED_BY: str | None = "outside pytest"
# Tail of each rank's stdout and stderr in a failure message: enough for a traceback.
SHOWN_CHARS = 3000


@dataclasses.dataclass
class RankRun:
    """One job: the launcher's exit code, and per rank its output, its end and its result."""
    launcher: str
    returncode: int
    rank_stdout: list[str]
    rank_stderr: list[str]
    ends: list[dict | None]  # {"exit": code, "error": traceback or None}; None: the rank never reported
    results: list            # per rank: the target function's return value (None for scripts)
    launcher_output: str     # what mpirun or the launch module itself printed

    @property
    def stdout(self) -> str:
        """Every rank's stdout, rank after rank."""
        return "".join(self.rank_stdout)

    @property
    def stderr(self) -> str:
        """Every rank's stderr, rank after rank, then the launcher's own messages."""
        return "".join(self.rank_stderr) + self.launcher_output

    @property
    def output(self) -> str:
        """All of it: each rank's stdout and stderr, then the launcher's."""
        return "".join(o + e for o, e in zip(self.rank_stdout, self.rank_stderr)) + self.launcher_output

    def failed_ranks(self) -> list[int]:
        return [r for r, end in enumerate(self.ends) if end is None or end["exit"] != 0]

    def report(self, headline: str) -> str:
        parts = [headline]
        for rank, end in enumerate(self.ends):
            if end is None:
                how = "no report (killed, aborted by the launcher or left through os._exit)"
            else:
                how = f"exit code {end['exit']}"
            parts.append(f"---- rank {rank}: {how}")
            if end and end.get("error"):
                parts.append(end["error"].rstrip())
            parts.append(f"stdout: ...{self.rank_stdout[rank][-SHOWN_CHARS:]}")
            parts.append(f"stderr: ...{self.rank_stderr[rank][-SHOWN_CHARS:]}")
        parts.append(f"---- {self.launcher}: exit code {self.returncode}\n{self.launcher_output[-SHOWN_CHARS:]}")
        return "\n".join(parts)


class RanksFailed(AssertionError):
    """A job expected to succeed did not; the message holds every rank's output."""


def _target_spec(target) -> str:
    if callable(target):
        module = sys.modules[target.__module__]
        if "<locals>" in target.__qualname__:
            raise ValueError(f"{target.__qualname__}: only module-level functions can run on ranks")
        return f"{os.path.abspath(module.__file__)}::{target.__qualname__}"
    return os.path.abspath(str(target))


def _command(launcher: str, nranks: int, argv: list[str], env: dict, log_dir: str,
             launcher_args: tuple = ()) -> list[str]:
    if launcher == "mpirun":
        exported = [arg for name in env for arg in ("-x", name)]
        return [MPIRUN, "--allow-run-as-root", "--oversubscribe", *launcher_args, "-np", str(nranks), *exported,
                sys.executable, *argv]
    if launcher == "launch":
        return [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(nranks),
                "--log_dir", os.path.join(log_dir, "launch"), *launcher_args, *argv]
    raise ValueError(f"launcher {launcher!r}: one of {LAUNCHERS}")


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _collect(launcher, returncode, nranks, run_dir, launcher_output) -> RankRun:
    ends, results = [], []
    for rank in range(nranks):
        end_path = os.path.join(run_dir, f"rank{rank}.end.json")
        ends.append(json.loads(_read(end_path)) if os.path.exists(end_path) else None)
        result_path = os.path.join(run_dir, f"rank{rank}.result.pkl")
        if os.path.exists(result_path):
            with open(result_path, "rb") as f:
                results.append(pickle.load(f))
        else:
            results.append(None)
    return RankRun(launcher=launcher, returncode=returncode,
                   rank_stdout=[_read(os.path.join(run_dir, f"rank{r}.stdout")) for r in range(nranks)],
                   rank_stderr=[_read(os.path.join(run_dir, f"rank{r}.stderr")) for r in range(nranks)],
                   ends=ends, results=results, launcher_output=launcher_output)


def run_ranks(target, nranks: int, *args, launcher: str = "mpirun", env: dict | None = None,
              timeout: float = 240, check: bool = True, launcher_args: tuple = (), joining: int = 0) -> RankRun:
    """Runs ``target`` on ``nranks`` ranks and waits for the job.

    ``check=True``: asserts that the job and every rank exited with 0 (the message names the ranks
    that did not and shows every rank's output). ``check=False`` for the tests of failures, which
    assert on the codes and the output themselves. ``launcher_args``: more options of mpirun
    (``("--with-ft", "ulfm")`` for elastic jobs) or of paddle.distributed.launch (an etcd master's
    ``--master etcd://...``, ``--max_restart``, ...). ``joining``: how many ranks an elastic job spawns
    while it runs; they are collected after the ``nranks`` first, by the world rank the job gives
    them (``nranks``, ``nranks + 1``, ...). On ``timeout`` the whole job is killed and the
    test fails with every rank's output so far.
    """
    if ALLOWED_BY is None:
        raise RanksFailed("this test starts ranks: mark it @pytest.mark.distributed (the fast lane must start none)")
    env = {k: str(v) for k, v in (env or {}).items()}
    run_dir = tempfile.mkdtemp(prefix="pdng_ranks_")
    if callable(target):
        with open(os.path.join(run_dir, "args.pkl"), "wb") as f:
            pickle.dump(args, f)
        argv = [RANK_MAIN, run_dir, _target_spec(target)]
    else:
        argv = [RANK_MAIN, run_dir, _target_spec(target), *map(str, args)]
    cmd = _command(launcher, nranks, argv, env, run_dir, tuple(launcher_args))
    full_env = quiet_env(OMPI_MCA_rmaps_base_oversubscribe="1", **env)
    # A session of its own: on a timeout the launcher and every rank are killed together.
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env,
                           start_new_session=True)
    try:
        launcher_output, _ = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        launcher_output, _ = job.communicate()
        run = _collect(launcher, job.returncode, nranks + joining, run_dir, launcher_output)
        shutil.rmtree(run_dir, ignore_errors=True)
        raise RanksFailed(run.report(f"{launcher} -np {nranks} {argv[2]}: killed after {timeout} s"))
    run = _collect(launcher, job.returncode, nranks + joining, run_dir, launcher_output)
    shutil.rmtree(run_dir, ignore_errors=True)
    if check and (run.returncode != 0 or run.failed_ranks()):
        raise RanksFailed(run.report(f"{launcher} -np {nranks} {argv[2]} {' '.join(argv[3:])}: "
                                     f"rank(s) {run.failed_ranks()} failed"))
    return run
