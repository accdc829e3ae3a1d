"""Elastic jobs under mpirun with Open MPI's fault tolerance, for the elastic tests.

Open MPI's start-up has been seen to crash a rank now and then: a segmentation fault of one rank
while the others formed the group, twice in the clean-clone runs of the suite, not reproduced in
25 runs of the same test under load (intermittent crashes of this kind at start-up are reported
to Open MPI, e.g. open-mpi/ompi#11438). The survivors then end with ``LostAtStartError``, as they should
(``test_a_rank_lost_before_the_group_forms_ends_every_survivor_with_the_typed_error`` checks that).
It is not what the other elastic tests are about: ``run_ulfm_job`` starts such a job once more.
A rank lost later, the subject of those tests, is never retried.
"""
from __future__ import annotations

import sys

from ranks import RanksFailed, RankRun, run_ranks

ULFM = ("--with-ft", "ulfm")


def lost_at_start(run: RankRun) -> bool:
    """Whether a rank of the job died before the elastic group was formed: every rank that reported
    an error raised ``LostAtStartError``."""
    errors = [end["error"] for end in run.ends if end is not None and end["error"]]
    return bool(errors) and all("LostAtStartError" in error for error in errors)


def run_ulfm_job(target, nranks: int, *args, check: bool = True, launcher_args: tuple = ULFM, **kwargs) -> RankRun:
    """``run_ranks`` for an elastic job, started once more if a rank died before the group formed."""
    run = run_ranks(target, nranks, *args, check=False, launcher_args=launcher_args, **kwargs)
    if lost_at_start(run):
        print(run.report("a rank died before the elastic group formed (Open MPI's start-up): the job runs again"),
              file=sys.stderr)
        run = run_ranks(target, nranks, *args, check=False, launcher_args=launcher_args, **kwargs)
    if check and (run.returncode != 0 or run.failed_ranks()):
        raise RanksFailed(run.report(f"mpirun -np {nranks} {getattr(target, '__name__', target)}: "
                                     f"rank(s) {run.failed_ranks()} failed"))
    return run
