"""The data-parallel runs of dp_worker.py shared by the tests of tests/distributed, and their checks.

Each mpirun or launch job pays Paddle's import on every rank (about 5-10 s here), which was most
of these tests' time. So:

- ``Runs``: a module declares its runs up front (label -> ranks and worker arguments) with
  ``declare_runs`` at import; the first test that asks for a run's output trains every declared run
  that can share its job in one job, whichever module declared it, through the worker's ``--then``
  (run_sequence.py). The others, in this module or another, find theirs done. A run declared twice
  (the same worker, ranks and arguments) trains once.
- ``References`` (``run_reference`` for dp_worker.py): one process of plain Paddle on the
  concatenated batch; each configuration is trained once per session, and every configuration that
  test modules declared and that is still missing is trained in the same process.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from harness import assert_trained_close
from paddle_ngraph.quiet import quiet_env
from ranks import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "dp_worker.py")
OPTIMIZERS = ["sgd", "momentum", "adam"]
LR = {"sgd": 0.03, "momentum": 0.03, "adam": 0.001, "lars": 0.1, "lamb": 0.001}  # as dp_worker.py
# What dp_worker.py writes besides the parameters.
NOT_PARAMETERS = ("losses", "hierarchical", "native", "shm_collectives")


@dataclasses.dataclass(frozen=True)
class Run:
    """One training of dp_worker.py: ``args`` are its options (without --out)."""
    nranks: int
    args: tuple
    launcher: str = "mpirun"
    group: str = ""  # runs of different groups never share a job (a test reading a job's output)

    def option(self, name: str, default):
        return str(self.args[self.args.index(name) + 1] if name in self.args else default)

    def job(self) -> tuple:
        """Runs that may share processes: same ranks and launcher, and what a process decides once,
        when its transport first communicates: the pretended nodes (PADDLE_NGRAPH_NODE_ID) and
        whether the native communicator uses shared memory (shm_allreduce)."""
        return (self.nranks, self.launcher, self.option("--ranks-per-node", 0), self.option("--shm-allreduce", "on"),
                self.group)


# The runs every test module declared (declare_runs), and those trained, session-wide: a job
# trains every declared run that can share it, so that modules do not each pay the ranks' start.
_DECLARED: list[tuple[str, Run]] = []  # (worker, run)
_TRAINED: dict[tuple[str, Run], tuple[Path, object]] = {}  # -> (output directory, job or its failure)


def declare_runs(runs: dict[str, Run], worker: str = WORKER) -> None:
    """Runs a test module will ask for (at its import): trained with the first of their job asked for."""
    _DECLARED.extend((worker, run) for run in runs.values())


class Runs:
    """The runs a test module needs, trained lazily, one job per group of declared runs that can
    share it (``worker``: dp_worker.py or another worker that takes ``--then``). Runs with a
    ``group`` never share a job with another module's runs: a test reads that job's output."""

    def __init__(self, root: Path, runs: dict[str, Run], worker: str = WORKER):
        self.root, self.runs, self.worker = Path(root), runs, worker

    def _trained(self, label: str) -> tuple[Path, object]:
        key = (self.worker, self.runs[label])
        if key not in _TRAINED:
            job = key[1].job()
            own = [(self.worker, run) for run in self.runs.values()]
            others = [] if job[-1] else _DECLARED  # a group: this module's runs only
            keys = [k for k in dict.fromkeys([key, *own, *others])
                    if k[0] == self.worker and k[1].job() == job and k not in _TRAINED]
            argv, outs = [], []
            for _, run in keys:
                out = self.root / f"run{len(_TRAINED) + len(outs)}"
                out.mkdir()
                outs.append(out)
                argv += [*(["--then"] if argv else []), "--out", out, *run.args]
            nranks, launcher = job[:2]
            try:
                done = run_ranks(self.worker, nranks, *argv, launcher=launcher, timeout=240 + 120 * len(keys))
            except Exception as failure:  # each run of the failed job reports its message
                done = failure
            _TRAINED.update((k, (out, done)) for k, out in zip(keys, outs))
        return _TRAINED[key]

    def job(self, label: str):
        """The job (ranks.RankRun) that trained run ``label``."""
        done = self._trained(label)[1]
        if isinstance(done, Exception):
            raise done
        return done

    def __getitem__(self, label: str) -> Path:
        """The output directory of run ``label`` (<optimizer>_rank<r>.npz), trained with its job."""
        out, done = self._trained(label)
        if isinstance(done, Exception):
            raise done
        return out


class References:
    """One process of plain Paddle (``worker --reference``) trains each configuration once per
    session; a miss trains every declared configuration still missing in the same process."""

    def __init__(self, worker: str):
        self.worker, self.declared, self.trained = worker, [], {}

    def declare(self, *args) -> None:
        """A configuration (the worker's arguments, without --out) a test module will ask for."""
        self.declared.append(tuple(map(str, args)))

    def __call__(self, *args) -> Path:
        """The output directory of the configuration ``args``."""
        wanted = tuple(map(str, args))
        if wanted not in self.trained:
            missing = [wanted] + [a for a in dict.fromkeys(self.declared) if a != wanted and a not in self.trained]
            root = Path(tempfile.mkdtemp(prefix="pdng_reference_"))
            outs = [root / str(i) for i in range(len(missing))]
            argv = []
            for config, out in zip(missing, outs):
                out.mkdir()
                argv += [*(["--then"] if argv else []), "--reference", "--out", str(out), *config]
            proc = subprocess.run([sys.executable, self.worker, *argv], capture_output=True, text=True,
                                  timeout=240 + 60 * len(missing), env=quiet_env())
            assert proc.returncode == 0, proc.stderr[-3000:]
            self.trained.update(zip(missing, outs))
        return self.trained[wanted]


REFERENCES = References(WORKER)


def reference_args(world, ir="pir", model="mnist_mlp", steps=20, dtype="float32", optimizers="sgd,momentum,adam",
                   batch=16) -> tuple:
    return ("--world", world, "--ir", ir, "--model", model, "--steps", steps, "--dtype", dtype,
            "--optimizers", optimizers, "--batch", batch)


def declare_reference(world, ir="pir", **options) -> None:
    """A configuration of ``run_reference`` a module will ask for: trained with the first missing one."""
    REFERENCES.declare(*reference_args(world, ir, **options))


def run_reference(tmp, world, ir, **options) -> Path:
    """Plain Paddle in one process on the concatenated batch of ``world`` ranks (``tmp``: unused,
    kept for the callers; the session's cache holds the results)."""
    return REFERENCES(*reference_args(world, ir, **options))


def check(ref_dir, run_dir, nranks, optimizer, dtype="float32"):
    ref = np.load(ref_dir / f"{optimizer}_rank0.npz")
    ranks = [np.load(run_dir / f"{optimizer}_rank{r}.npz") for r in range(nranks)]
    names = [k for k in ref.files if k not in NOT_PARAMETERS]
    assert len(names) >= 4
    for r in ranks[1:]:
        for name in names:
            np.testing.assert_array_equal(r[name], ranks[0][name], err_msg=f"{optimizer}: {name} differs between ranks")
    # Each rank's loss is the mean over its shard; their average is the global batch's loss.
    mean_loss = np.mean([r["losses"] for r in ranks], axis=0)
    if dtype == "float64":  # exact up to float64 rounding: the algorithm is the same computation
        np.testing.assert_allclose(mean_loss, ref["losses"], rtol=1e-10)
        for name in names:
            np.testing.assert_allclose(ranks[0][name], ref[name], rtol=1e-9, atol=1e-12, err_msg=f"{optimizer}: {name}")
        return
    np.testing.assert_allclose(mean_loss, ref["losses"], rtol=1e-5)
    for name in names:
        assert_trained_close(ranks[0][name], ref[name], optimizer, f"{optimizer}: {name}", lr=LR[optimizer],
                             elementwise=nranks == 1)
