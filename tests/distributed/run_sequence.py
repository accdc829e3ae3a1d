"""Several runs of a worker in one job: their argument lists joined by ``--then``.

The workers of tests/distributed (dp_worker.py, sync_bn_worker.py) train each run in turn in the
same processes, so that a job pays Paddle's import and the launcher's start-up once for all of them
(tests/distributed/dp_runs.py builds such jobs).
"""


def split_runs(argv: list[str]) -> list[list[str]]:
    """``argv`` cut at each ``--then``: one argument list per run."""
    runs = [[]]
    for arg in argv:
        if arg == "--then":
            runs.append([])
        else:
            runs[-1].append(arg)
    return runs
