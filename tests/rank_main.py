"""One rank of a job started by ranks.run_ranks: ``rank_main.py RUN_DIR TARGET ARGS...``.

TARGET is a script (run as ``__main__``, ``sys.argv = [script, *ARGS]``, its directory first on
sys.path as when Python runs it) or ``FILE::FUNCTION`` (called with the arguments pickled in
RUN_DIR/args.pkl; its return value is pickled to RUN_DIR/rank<r>.result.pkl). The rank's stdout
and stderr go to RUN_DIR/rank<r>.stdout and .stderr (line-buffered, so that a rank killed mid-run
still shows what it printed), and how it ended to RUN_DIR/rank<r>.end.json. A rank that never
writes that file was killed or aborted.
"""
import importlib.util
import json
import os
import pickle
import runpy
import sys
import traceback

TESTS = os.path.dirname(os.path.abspath(__file__))


def this_rank() -> int:
    # A process an elastic group spawned is named by the world rank the group gave it: its own
    # OMPI_COMM_WORLD_RANK counts in the spawn only.
    for name in ("PADDLE_NGRAPH_ELASTIC_WORLD_RANK", "OMPI_COMM_WORLD_RANK", "PADDLE_TRAINER_ID", "PMIX_RANK"):
        if name in os.environ:
            return int(os.environ[name])
    return 0


def redirect_output(run_dir: str, rank: int) -> None:
    for fd, stream, suffix in ((1, sys.stdout, "stdout"), (2, sys.stderr, "stderr")):
        stream.flush()
        target = os.open(os.path.join(run_dir, f"rank{rank}.{suffix}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
        stream.reconfigure(line_buffering=True)


def call_function(spec: str, run_dir: str):
    path, name = spec.split("::")
    sys.path[:0] = [os.path.dirname(path), TESTS]
    module_name = os.path.splitext(os.path.basename(path))[0]
    loaded = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loaded)
    sys.modules[module_name] = module
    loaded.loader.exec_module(module)
    function = module
    for part in name.split("."):
        function = getattr(function, part)
    with open(os.path.join(run_dir, "args.pkl"), "rb") as f:
        args = pickle.load(f)
    return function(*args)


def run_script(path: str, args: list[str]) -> None:
    sys.argv = [path, *args]
    sys.path[0] = os.path.dirname(path)
    runpy.run_path(path, run_name="__main__")


def main() -> int:
    run_dir, target, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    rank = this_rank()
    redirect_output(run_dir, rank)
    end = {"exit": 0, "error": None}
    result = None
    try:
        if "::" in target:
            result = call_function(target, run_dir)
        else:
            run_script(target, args)
    except SystemExit as e:
        code = e.code
        end["exit"] = code if isinstance(code, int) else (0 if code is None else 1)
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - recorded for the test's message, then the rank fails
        end = {"exit": 1, "error": traceback.format_exc()}
        traceback.print_exc()
    if result is not None:
        with open(os.path.join(run_dir, f"rank{rank}.result.pkl"), "wb") as f:
            pickle.dump(result, f)
    with open(os.path.join(run_dir, f"rank{rank}.end.json"), "w") as f:
        json.dump(end, f)
    sys.stdout.flush()
    sys.stderr.flush()
    return end["exit"]


if __name__ == "__main__":
    sys.exit(main())
