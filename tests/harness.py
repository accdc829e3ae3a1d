"""Compares our conversion + a backend against Paddle's own executor, in either IR.

``check_against_paddle(build, feeds, ir=...)`` builds a program from ``build``
(called with one static data variable per feed), runs it with
``paddle.static.Executor``, converts it with ``paddle_ngraph.convert`` and runs
the function on a backend; forward outputs and the gradients of every
floating-point feed must match.
"""
from __future__ import annotations

import contextlib

import numpy as np
import paddle

import paddle_ngraph
from paddle_ngraph.backends import get_backend

paddle.enable_static()
IRS = ("legacy", "pir")

# Every backend runs every harness test (tests/conftest.py parametrizes them); the CPU backend is
# checked against Paddle with the same tolerances as the INTERPRETER.
BACKENDS = ("INTERPRETER", "CPU")
DEFAULT_BACKEND = "INTERPRETER"
# Per-backend skips: test-name substring -> why. Keep this short.
BACKEND_SKIPS: dict[str, dict[str, str]] = {"INTERPRETER": {}, "CPU": {}}


def skip_reason(backend: str, test_name: str) -> str | None:
    for pattern, why in BACKEND_SKIPS.get(backend, {}).items():
        if pattern in test_name:
            return f"{backend}: {why}"
    return None


@contextlib.contextmanager
def ir_guard(ir: str):
    guard = paddle.pir_utils.OldIrGuard() if ir == "legacy" else paddle.pir_utils.IrGuard()
    with guard:
        yield


def scope_value(name: str) -> np.ndarray:
    var = paddle.static.global_scope().find_var(name)
    if var is None:
        raise KeyError(f"variable {name} not in the scope")
    return np.array(var.get_tensor())


def run_function(function, feeds: dict, backend: str | None = None, transport=None) -> dict:
    """Runs a converted function; parameters that are not feeds are read from the Paddle scope."""
    inputs = [feeds[p.name] if p.name in feeds else scope_value(p.name) for p in function.parameters]
    outs = get_backend(backend or DEFAULT_BACKEND).compile(function).call(inputs, transport)
    return dict(zip(function.results, (np.array(o, copy=True) for o in outs)))


def check_against_paddle(build, feeds: dict, *, ir: str, grads: bool = True, rtol: float = 1e-5,
                         atol: float = 1e-6, backend: str | None = None, seed: int = 0, sync_batch_norm: bool = False):
    """Returns (reference, ours) lists after asserting they match. ``sync_batch_norm`` converts
    with batch-norm statistics over all ranks (one here: the same values)."""
    rng = np.random.default_rng(seed)
    with ir_guard(ir):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            variables = {}
            for name, value in feeds.items():
                v = paddle.static.data(name, list(value.shape), str(value.dtype))
                if np.issubdtype(value.dtype, np.floating):
                    v.stop_gradient = False
                variables[name] = v
            outs = build(**variables)
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            fetch = list(outs)
            if grads:
                float_outs = [o for o in outs if str(o.dtype) in ("paddle.float32", "paddle.float64")]
                float_ins = [v for n, v in variables.items() if np.issubdtype(feeds[n].dtype, np.floating)]
                if float_outs and float_ins:
                    terms = []
                    for o in float_outs:
                        weight = rng.standard_normal(o.shape if -1 not in o.shape else feeds_shape(o, feeds))
                        w = paddle.assign(weight.astype(str(o.dtype).replace("paddle.", "")))
                        terms.append(static_op(lambda: paddle.sum(o * w), "reduce_sum", {"X": o * w},
                                               {"dim": [], "reduce_all": True, "keep_dim": False}))
                    loss = terms[0]
                    for t in terms[1:]:
                        loss = loss + t
                    fetch += [g for g in paddle.static.gradients([loss], float_ins) if g is not None]
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        reference = exe.run(main, feed=feeds, fetch_list=fetch)
        function = paddle_ngraph.convert(main, fetch_list=fetch, sync_batch_norm=sync_batch_norm)
        results = run_function(function, feeds, backend)
        ours = [results[k] for k in function.results if k.startswith("fetch:")]
        # Same handle fetched twice collapses to one result; expand back by name.
        view = paddle_ngraph.frontend.decode(main)
        by_name = {k[len("fetch:"):]: v for k, v in results.items() if k.startswith("fetch:")}
        ours = [by_name[view.name_of(h)] for h in fetch]
    assert len(reference) == len(ours)
    for i, (ref, got) in enumerate(zip(reference, ours)):
        ref = np.asarray(ref)
        got = np.asarray(got)
        assert ref.shape == got.shape, f"output {i}: shape {got.shape}, Paddle gives {ref.shape}"
        assert ref.dtype == got.dtype, f"output {i}: dtype {got.dtype}, Paddle gives {ref.dtype}"
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, err_msg=f"output {i} ({ir})")
    return reference, ours


def feeds_shape(value, feeds):
    """Shape of an output with a dynamic batch: the batch of the first feed."""
    batch = next(iter(feeds.values())).shape[0]
    return [batch if d == -1 else d for d in value.shape]


def static_op(pir_call, legacy_type: str, inputs: dict, attrs: dict | None = None, outputs=("Out",), dtype=None):
    """Builds one op in either IR: ``pir_call()`` in PIR mode; in legacy mode, where several
    Paddle 3 Python APIs refuse Variables, appends ``legacy_type`` through LayerHelper."""
    if paddle.framework.in_pir_mode():
        return pir_call()
    from paddle.base.layer_helper import LayerHelper

    helper = LayerHelper(legacy_type)
    first = next(iter(inputs.values()))
    first = first[0] if isinstance(first, (list, tuple)) else first
    outs = {slot: helper.create_variable_for_type_inference(dtype or first.dtype) for slot in outputs}
    helper.append_op(type=legacy_type, inputs={k: v if isinstance(v, (list, tuple)) else [v] for k, v in inputs.items()},
                     outputs=outs, attrs=attrs or {})
    result = [outs[s] for s in outputs]
    return result[0] if len(result) == 1 else result


def assert_trained_close(got, ref, optimizer: str, name: str, lr: float, norm_tol: float = 1e-5,
                         elementwise: bool = True):
    """Parameters after training with our engine against Paddle's (or one process's), any backend.

    Each backend sums in its own order (oneDNN's and NumPy's GEMM block K differently from Paddle's
    MKL), so float32 results carry rounding differences of ~1e-7 relative to the values summed. So:
    - the tensor as a whole: ||got - ref|| <= norm_tol * ||ref||;
    - every element within norm_tol of the tensor's largest magnitude (SGD, Momentum: rounding is
      relative to the summands, not to an element that happens to be near zero);
    - Adam: every element within one learning rate. Adam divides each gradient by its running RMS,
      so for weights whose gradient is pure rounding noise (pixels that are always 0, biases
      without effect) it takes lr-sized steps in the noise's direction: rounding differences
      become differences of up to lr in a handful of elements, in any backend.
    ``elementwise=False`` keeps the tensor-level check only: for float32 runs whose summation order
    differs by construction (N ranks against one process), where a ReLU input within rounding of 0
    can flip in one element; those runs are also made in float64 and checked elementwise there.
    """
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape and got.dtype == ref.dtype, f"{name}: {got.dtype}{got.shape} vs {ref.dtype}{ref.shape}"
    scale = float(np.linalg.norm(ref))
    assert np.linalg.norm(got - ref) <= norm_tol * max(scale, 1e-12), \
        f"{name}: ||got - ref|| = {np.linalg.norm(got - ref):.3g} > {norm_tol} * ||ref|| = {norm_tol * scale:.3g}"
    if not elementwise:
        return
    atol = lr if optimizer == "adam" else norm_tol * float(np.max(np.abs(ref), initial=0.0))
    np.testing.assert_allclose(got, ref, rtol=norm_tol, atol=atol, err_msg=name)


def sync_batch_norm_program(main, ir: str = "legacy"):
    """The legacy training program ``main`` with its batch_norm/batch_norm_grad ops made Paddle's
    sync_batch_norm/sync_batch_norm_grad: what ``SyncBatchNorm.convert_sync_batchnorm`` layers emit
    on a GPU build. The CPU wheel cannot build them (legacy: "Operator sync_batch_norm has not been
    registered"; PIR: no kernel, so ``_C_ops.sync_batch_norm_`` refuses every dtype), but they share
    batch_norm's slots and attributes. ``ir="pir"``: Paddle's own translation of that program to PIR
    (pd_op.sync_batch_norm_, pd_op.sync_batch_norm_grad)."""
    for op in main.global_block().ops:
        if op.type in ("batch_norm", "batch_norm_grad"):
            op.desc.set_type("sync_" + op.type)
    if ir == "pir":
        return paddle.pir.translate_to_pir(main.desc)
    return main
