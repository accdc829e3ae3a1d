"""What the CPU backend does with a function marked for bfloat16 (``precision: bf16``).

Native bf16 matmul and convolution need the CPU's bf16 instructions: avx512_bf16 (Cooper Lake,
Zen 4 and later) or AMX (amx_bf16, Sapphire Rapids). On plain AVX2 the oneDNN that Paddle ships (3.6.2)
has no bf16 matmul or convolution at all: creating the primitive fails ("could not create a primitive
descriptor", measured on a Zen 3); on AVX-512 without avx512_bf16 it emulates them, slower than
float32. And the CPU backend's bf16 kernels are not written yet: with no machine here that can run
them, they could not even be tested. So today the CPU backend runs such a function in
float32 and says why, once per process, on the ``paddle_ngraph`` logger: never a crash, never a
silent slowdown or a silent change of precision. The INTERPRETER honours the marks (it is the
reference of the mixed-precision function).
"""
from __future__ import annotations

import logging

log = logging.getLogger("paddle_ngraph")

BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# Set when the kernels exist: then a CPU with BF16_FLAGS runs the marks natively.
NATIVE_BF16_KERNELS = False
_told = False


def cpu_info(path: str = "/proc/cpuinfo") -> tuple[str, set[str]]:
    """(model name, flags) of the first processor in ``path``; ("unknown", empty) where it cannot
    be read (not Linux)."""
    model, flags = "unknown", set()
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model == "unknown":
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
                if model != "unknown" and flags:
                    break
    except OSError:
        pass
    return model, flags


def native_bf16_support(path: str = "/proc/cpuinfo") -> tuple[bool, str]:
    """(whether this CPU has bf16 instructions, its model name)."""
    model, flags = cpu_info(path)
    return any(flag in flags for flag in BF16_FLAGS), model


def float32_reason(path: str = "/proc/cpuinfo") -> str | None:
    """Why the CPU backend runs ``precision: bf16`` in float32 here; None once it would not."""
    supported, model = native_bf16_support(path)
    if not supported:
        return f"precision bf16 needs avx512_bf16 (this CPU: {model}): running in float32"
    if not NATIVE_BF16_KERNELS:
        return "precision bf16: the CPU backend's bf16 kernels are not implemented yet: running in float32"
    return None


def tell_once(reason: str) -> bool:
    """Logs ``reason`` as a warning the first time in this process; returns whether it did."""
    global _told
    if _told:
        return False
    _told = True
    log.warning("%s", reason)
    return True
