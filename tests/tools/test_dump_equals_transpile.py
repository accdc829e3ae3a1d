"""paddle-ngraph-dump shows exactly the graph transpile runs: the same segment plan, conversion and
pass pipeline, under the same configuration, on every zoo model in both IRs, a paddle.vision model
and a program with ops left to Paddle."""
import json
import re

import paddle
import pytest

import paddle_ngraph
from paddle_ngraph.ir import to_json
from paddle_ngraph.tools import dump
from paddle_ngraph.zoo import MODELS, build_program
from paddle_ngraph.zoo import vision


def canonical(text: str) -> dict:
    """A function's JSON with the nodes' default names (``<op>_<global id>``, a process-wide counter)
    renumbered in graph order: two conversions of one program differ in nothing else."""
    doc = json.loads(text)
    renamed = {}
    for node in doc["nodes"]:
        if re.fullmatch(rf"{re.escape(node['op'])}_\d+", node["name"]):
            renamed[node["name"]] = f"{node['op']}#{len(renamed)}"
    name = lambda n: renamed.get(n, n)  # noqa: E731
    for node in doc["nodes"]:
        node["name"] = name(node["name"])
        node["inputs"] = [[name(n), i] for n, i in node["inputs"]]
    for result in doc["results"]:
        result["node"] = name(result["node"])
    return doc


def dumped(capsys, spec, ir, argv) -> list[dict]:
    """Each engine segment's function as the tool writes it (--format json, one segment at a time),
    for a program the tool builds itself by calling ``spec`` (module:function) under ``ir``."""
    rc = dump.main([spec, "--ir", ir, "--segments"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    count = int(re.search(r": (\d+) engine segment\(s\)", out).group(1))
    functions = []
    for i in range(count):
        rc = dump.main([spec, "--ir", ir, "--format", "json", "--segment", str(i), *argv])
        out, err = capsys.readouterr()
        assert rc == 0, err
        functions.append(canonical(out))
    return functions


def transpiled(program, **config) -> list[dict]:
    before = {id(e) for e in paddle_ngraph.engines()}
    paddle_ngraph.transpile(program, **config)
    engines = [e for e in paddle_ngraph.engines() if id(e) not in before]
    functions = [canonical(to_json(e.function)) for e in engines]
    paddle_ngraph.release(program)
    return functions


# The programs, built by the tool through module:function (a saved PIR file does not keep every
# variable's persistable flag, so the tool and transpile must see the same in-memory program).
def build_fallback():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [4, 3], "float32")
        h = paddle.logcumsumexp(paddle.nn.Linear(3, 5)(x), axis=1)
        paddle.optimizer.SGD(0.1).minimize(paddle.nn.Linear(5, 1)(h).mean())
    return main


def build_resnet18():
    return vision.build("resnet18")[0]


for _model in MODELS:
    globals()[f"build_{_model}"] = lambda m=_model: build_program(m, "momentum")[0]
PROGRAMS = [*MODELS, "resnet18", "fallback"]
CONFIGS = {"default": ({}, []),
           "accumulate+bf16": ({"accumulate_steps": 2, "precision": "bf16"},
                               ["--set", "accumulate_steps=2", "--precision", "bf16"])}


@pytest.mark.slow  # each transpiles and dumps a whole model twice
@pytest.mark.parametrize("ir", ["legacy", "pir"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_dump_equals_transpile(name, ir, capsys):
    paddle.enable_static()
    guard = paddle.pir_utils.IrGuard if ir == "pir" else paddle.pir_utils.OldIrGuard
    builder = globals()[f"build_{name}"]
    for label, (config, argv) in CONFIGS.items():
        if name == "fallback" and config.get("accumulate_steps"):
            continue  # accumulation needs the whole program on the engine (a ConfigError in both)
        with guard():
            expected = transpiled(builder(), **config)
        got = dumped(capsys, f"{__name__}:build_{name}", ir, argv)
        assert len(got) == len(expected) >= 1, label
        for i, (a, b) in enumerate(zip(got, expected)):
            assert a == b, f"{name} ({ir}, {label}): segment {i} differs"


# --- several ranks: the collectives (buckets, ZeRO-1) as transpile inserts them under mpirun -------------
RANKED = [("mnist_mlp", "pir", {}, []), ("resnet_small", "legacy", {}, []),
          ("mnist_mlp", "legacy", {"zero_stage": 1}, ["--zero-stage", "1"])]


@pytest.mark.distributed
def test_dump_equals_transpile_on_two_ranks(tmp_path, capsys):
    """One mpirun job transpiles each program on 2 ranks and writes rank 0's functions; the tool's
    ``--nranks 2`` must give the same graphs, AllReduce buckets and ZeRO-1 slices included."""
    import os
    import subprocess
    import sys

    from paddle_ngraph.quiet import quiet_env

    mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
    proc = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, __file__,
                           str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env=quiet_env(OMPI_MCA_rmaps_base_oversubscribe="1"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for k, (name, ir, _, argv) in enumerate(RANKED):
        expected = json.loads((tmp_path / f"{k}.json").read_text())
        got = dumped(capsys, f"{__name__}:build_{name}", ir, ["--nranks", "2", *argv])
        assert len(got) == len(expected) >= 1
        assert any(n["op"] in ("AllReduce", "ReduceScatter") for f in got for n in f["nodes"])
        for i, (a, b) in enumerate(zip(got, expected)):
            assert a == b, f"{name} ({ir}, {argv}): segment {i} differs on 2 ranks"


def _transpile_ranked(out_dir: str):
    """Under mpirun: transpiles each program of RANKED on every rank; rank 0 writes its functions."""
    import os

    paddle.enable_static()
    for k, (name, ir, config, _) in enumerate(RANKED):
        guard = paddle.pir_utils.IrGuard if ir == "pir" else paddle.pir_utils.OldIrGuard
        with guard():
            functions = transpiled(globals()[f"build_{name}"](), **config)
        if int(os.environ.get("OMPI_COMM_WORLD_RANK", "0")) == 0:
            with open(os.path.join(out_dir, f"{k}.json"), "w") as f:
                json.dump(functions, f)


if __name__ == "__main__":
    import sys

    _transpile_ranked(sys.argv[1])
