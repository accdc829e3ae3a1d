"""The configuration of paddle_ngraph, defined once: the frozen dataclass ``Config``.

Each field carries its type (the annotation), its default, and in its metadata the valid
choices, the minimum and the documentation. Everything else derives from it:
``transpile(program, config=None, **overrides)``'s options, the validation of
``strategy.ngraph_configs``, of the ``PADDLE_NGRAPH_<KEY>`` environment variables and of the
YAML file named by ``PADDLE_NGRAPH_CONFIG`` (``paddle_ngraph.config_sources``), and the
documentation: ``configs/defaults.yaml`` and README's table are generated from it by
``tools/gen_config_docs.py`` (drift-tested).

It lives at the package top, not in ``fleet/``, because ``transpile`` takes it too and the
transpiler must not depend on the fleet integration (which depends on the transpiler).
Importing this module imports neither Paddle nor the backends.
"""
import dataclasses
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .distributed.mpi import HIERARCHICAL_MODES
from .distributed.registry import transport_names
from .errors import ConfigError, UnknownConfigKeyError
from .ir.ops.collective import COMPRESSIONS
from .ir.ops.precision import PRECISIONS

TRANSPORTS = transport_names()  # ("auto", "mpi", "ccl", "mlsl", "null"): distributed/registry.py
REDUCTIONS = ("avg", "sum")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# tuple: a list of names (YAML: a list; environment: comma-separated), held as a tuple of strings.
_KINDS = {str: "str", int: "int", float: "number", bool: "bool", tuple: "names"}
_TYPE_NAMES = {"str": "a string", "int": "an integer", "number": "a number", "bool": "true or false",
               "names": "a list of names (strings)"}


def _backends() -> list[str]:
    from .backends import available_backends

    return available_backends()


def _default_backend() -> str:
    from .backends import default_backend

    return default_backend()


def option(default=dataclasses.MISSING, *, doc: str, summary: str, choices: Callable[[], Any] | tuple | None = None,
           case: str | None = None, minimum: float | None = None, exclusive_minimum: bool = False,
           default_factory=dataclasses.MISSING, shown_default=None):
    """A configuration field. ``doc``: the long description (the comment in configs/defaults.yaml);
    ``summary``: README's table cell. ``case`` ("upper"/"lower"): strings are normalized to it
    before the choices are compared. ``shown_default``: the default the documentation shows when
    the real one depends on the build (``default_factory``)."""
    metadata = dict(doc=doc, summary=summary, choices=choices, case=case, minimum=minimum,
                    exclusive_minimum=exclusive_minimum, shown_default=shown_default)
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Config:
    """paddle_ngraph's configuration; every value validated (and normalized: choices are case-
    insensitive) on construction. ``Config.build(values, source)`` names ``source`` in errors."""

    backend: str = option(
        default_factory=_default_backend, shown_default="CPU", choices=_backends, case="upper",
        summary="`CPU`: native kernels; `INTERPRETER`: the NumPy reference (slow)",
        doc="Backend that runs the transpiled function: CPU (native kernels on oneDNN) or INTERPRETER\n"
            "(the NumPy reference, the executable definition of every op; slow).")
    transport: str = option(
        "auto", choices=TRANSPORTS, case="lower",
        summary="`auto`: mpirun -> mpi, paddle launch -> ccl, one process -> null; `mlsl` = `ccl`",
        doc="Transport of the AllReduce between ranks:\n"
            "  auto  - follow the launcher: mpirun -> mpi, paddle.distributed.launch -> ccl, one process -> null\n"
            "  mpi   - Open MPI through mpi4py (jobs started by mpirun only)\n"
            "  ccl   - oneCCL (paddle.distributed.launch or mpirun); mlsl is accepted as an alias of ccl\n"
            "  null  - one process, no communication")
    bucket_mb: float = option(
        32, minimum=0,
        summary="gradient fusion bucket, 0 = one AllReduce per gradient",
        doc="Gradient fusion bucket size in MB (a number >= 0; 0 = one AllReduce per gradient).")
    min_buckets: int = option(
        4, minimum=1,
        summary="the bucket size is lowered so that gradients make at least this many buckets",
        doc="At least this many buckets (an integer >= 1): the bucket size is lowered to total gradient\n"
            "bytes / min_buckets when that is smaller, so that early buckets can travel while the backward\n"
            "pass goes on. 1 = bucket_mb alone decides.")
    reduction: str = option(
        "avg", choices=REDUCTIONS, case="lower",
        summary="how gradients are combined across ranks: `avg` = sum, then one scale by 1/N",
        doc="How gradients are combined across ranks: avg (sum, then one scale by 1/N) or sum.")
    compress: str = option(
        "none", choices=COMPRESSIONS, case="lower",
        summary="`bf16` or `fp16`: float32 gradients travel as 16-bit values (half the bytes), summed and averaged "
                "in float32 in rank order, rounded to 16 bits once: the same bits on every rank (see \"Compressed "
                "allreduce\")",
        doc="Wire format of float32 gradients: none (float32), bf16 or fp16. With bf16/fp16 each rank sends\n"
            "its gradients as 16-bit values (half the bytes); they are summed and averaged in float32 in rank\n"
            "order and the result is rounded to 16 bits once, so every rank gets the same bits. bf16 keeps\n"
            "float32's range with 8 bits of mantissa; fp16 has 11 bits but overflows to inf above 65504\n"
            "(check_finite catches it). Needs reduction sum or avg.")
    precision: str = option(
        "fp32", choices=PRECISIONS, case="lower",
        summary="`bf16`: matmuls and convolutions (forward and backward) round their inputs to bfloat16 and "
                "accumulate in float32; parameters, optimizer state, gradients and all other ops stay float32 "
                "(see \"Mixed precision (bf16)\")",
        doc="Compute precision: fp32 or bf16 (O1 mixed precision). With bf16 the matmuls and convolutions,\n"
            "forward and both backward directions, round their float32 inputs to bfloat16 (round to nearest\n"
            "even) and accumulate the products in float32; their outputs, the parameters (master weights),\n"
            "the optimizer state and updates, the gradients the AllReduce sums, softmax, normalization,\n"
            "losses and reductions stay float32. The INTERPRETER computes so (the reference). The CPU backend\n"
            "has no bf16 kernels yet (they need avx512_bf16 or amx_bf16): it runs float32 and says so once.")
    threads: int = option(
        0, minimum=0,
        summary="compute threads per rank of the CPU backend; 0 = cores / ranks on this node (1 for small steps)",
        doc="Compute threads per rank of the CPU backend (an integer >= 0; 0 = the cores available to the\n"
            "process divided by the ranks on this node, so that ranks do not oversubscribe it, and one for a\n"
            "step of under 32 MFLOP, whose hand-offs between threads would cost more than they save). The\n"
            "INTERPRETER leaves threading to NumPy.")
    check_finite: bool = option(
        False,
        summary="CPU backend: stop at a NaN or Inf in a gradient after its AllReduce, naming step and gradient",
        doc="CPU backend: check every reduced gradient for NaN and Inf after its AllReduce (true or false).\n"
            "A non-finite value stops every rank at that step with the step number and the gradient's name\n"
            "(the reduced values, and so the check's outcome, are the same on every rank).")
    zero_stage: int = option(
        0, choices=(0, 1),
        summary="`1`: shard the optimizer state over the ranks (ZeRO-1, see \"Sharded optimizer state\")",
        doc="ZeRO stage (0 or 1). 1 shards the optimizer state over the ranks: each bucket's gradients are\n"
            "reduce-scattered, each rank updates its 1/N slice of the parameters with its slice of the\n"
            "optimizer state (moments, velocities), and the new parameters are allgathered. Optimizer memory\n"
            "per rank drops by the rank count, traffic stays that of an allreduce. SGD, Momentum and Adam(W)\n"
            "are sliced; other optimizers keep the plain AllReduce. save_checkpoint gathers the full state.")
    mp_degree: int = option(
        1, minimum=1,
        summary="tensor (model) parallelism: ranks per model shard group, mp innermost (see "
                "docs/model-parallel.md); fleet sets it from `tensor_parallel_degree` or `hybrid_configs`",
        doc="Tensor (model) parallel degree (an integer >= 1 that divides the number of ranks). Ranks form\n"
            "groups of mp_degree consecutive ranks that each hold one shard of a model built with\n"
            "paddle.distributed.split (legacy static programs) or fleet.meta_parallel's layers (dygraph);\n"
            "gradients are averaged over the data-parallel group only (the ranks holding the same shard),\n"
            "and with mp_degree = ranks not at all. Fleet sets it from\n"
            "strategy.tensor_parallel_configs['tensor_parallel_degree'] or hybrid_configs['mp_degree'].")
    accumulate_steps: int = option(
        1, minimum=1,
        summary="k > 1: gradients of k `exe.run` micro-batches are summed, averaged and AllReduced once, then one "
                "update (see \"Gradient accumulation\")",
        doc="Gradient accumulation (an integer >= 1). k > 1: each exe.run is a micro-batch; the first k-1 of\n"
            "every k add their gradients into accumulators held by the engine (no AllReduce, no update,\n"
            "parameters unchanged), the k-th adds its own, divides by k, AllReduces and updates once. With a\n"
            "mean loss that equals one step on a batch k times larger (Paddle's gradient_merge with avg), for\n"
            "1/k of the AllReduces. Combines with zero_stage 1 (the k-th micro-step reduce-scatters).")
    accumulate_avg: bool = option(
        True,
        summary="with `accumulate_steps` k > 1: `true` updates with the mean of the k gradients, `false` with "
                "their sum (Paddle's gradient_merge `avg`)",
        doc="With accumulate_steps k > 1: true (the default) updates with the mean of the k micro-batches'\n"
            "gradients, false with their sum, as Paddle's gradient_merge_configs['avg'] (true or false).")
    localsgd_k_steps: int = option(
        0, minimum=0,
        summary="k >= 1: local SGD as Paddle's `strategy.localsgd` (`k_steps`): each rank updates with its own "
                "gradients, parameters are averaged every k steps; 0 = off (see \"Local SGD\")",
        doc="Local SGD (an integer >= 0; 0 = off), as Paddle's LocalSGDOptimizer (strategy.localsgd,\n"
            "localsgd_configs k_steps) defines it: from step localsgd_begin_step + 1 on, each rank updates its\n"
            "parameters with its own gradients (no collective), and every k steps the parameters are averaged\n"
            "over the ranks (param = snapshot - AllReduce_sum(snapshot - param) * (1/N), snapshot = param). Steps\n"
            "1..localsgd_begin_step average the parameters after every update. Batch norm's running statistics\n"
            "are averaged too; optimizer state (momentum velocities) stays each rank's own. SGD and Momentum\n"
            "only, as Paddle. With localsgd_adaptive, the first k (adaptive_localsgd_configs init_k_steps).")
    localsgd_begin_step: int = option(
        1, minimum=0,
        summary="local SGD: steps 1..n average the parameters after every update (Paddle's `begin_step`)",
        doc="Local SGD's begin_step (an integer >= 0; Paddle's localsgd_configs / adaptive_localsgd_configs\n"
            "begin_step, default 1): steps 1..begin_step (counted by the engine, one per exe.run) average\n"
            "the parameters after every update; local steps start at begin_step + 1.")
    localsgd_adaptive: bool = option(
        False,
        summary="local SGD: k recomputed at each averaging from the global loss and the learning rate, as "
                "Paddle's `strategy.adaptive_localsgd`",
        doc="Adaptive local SGD, as Paddle's AdaptiveLocalSGDOptimizer (strategy.adaptive_localsgd), with\n"
            "localsgd_k_steps as its init_k_steps (true or false). At every averaging step after begin_step,\n"
            "k = clip(ceil(sqrt(lr_0 * loss / (lr * loss_0) * init_k_steps)), 1, 16) in float32, with loss the\n"
            "loss averaged over the ranks (an AllReduce of one value) and lr the learning rate at that step,\n"
            "loss_0 and lr_0 those of step 1. Needs localsgd_k_steps >= 1.")
    timeout_s: float = option(
        60, minimum=0, exclusive_minimum=True,
        summary="longest wait of a collective for the other ranks (and the ccl start-up rendezvous); then every "
                "rank stops naming the missing ranks (see \"When something fails\")",
        doc="Seconds a rank waits in a collective (or at start-up, for the ccl transport's rendezvous) for the\n"
            "other ranks (a number > 0). Then the stall watchdog stops every rank with a report naming the\n"
            "missing ranks and the buckets they have not submitted. Raise it if one rank legitimately works\n"
            "alone for longer between steps (e.g. rank 0 evaluating while the others wait for the next step).")
    hierarchical: str = option(
        "auto", choices=HIERARCHICAL_MODES, case="lower",
        summary="mpi transport: `on` = reduce within each node, allreduce among node leaders, broadcast within "
                "the node; `off` = one flat allreduce; `auto` = `on` when ranks span several nodes and some node "
                "has several ranks (see \"Several hosts\")",
        doc="Hierarchical allreduce with the mpi transport: auto, on or off. on: reduce within each node (over\n"
            "shared memory) to one leader, allreduce among the leaders (the only traffic between hosts),\n"
            "broadcast within the node; off: one flat MPI_Allreduce over all ranks. auto: on when the ranks\n"
            "span more than one node and some node has more than one rank. A node is a host name, or the\n"
            "value of PADDLE_NGRAPH_NODE_ID where set (for tests and odd topologies). The ccl transport\n"
            "ignores it (oneCCL chooses topology-aware algorithms itself).")
    shm_allreduce: bool = option(
        True,
        summary="CPU backend, either transport: when every rank runs on one node, AllReduce (and ZeRO-1's "
                "reduce-scatter and all-gather) over shared memory (each rank's buckets mapped by the others, reduced "
                "in place); `false` keeps the transport's own (see \"Shared-memory AllReduce\")",
        doc="The CPU backend's native AllReduce over shared memory among the ranks of one node (true or false),\n"
            "with the mpi and the ccl transport alike: each rank's arena lives in an anonymous shared file that\n"
            "the other ranks map, and a bucket is reduced in place, in 64 KB chunks any rank may take, in rank\n"
            "order (the same bits on every rank). Used only when every rank can map every other's memory (one\n"
            "node, the same user); otherwise, or if any rank sets false, every rank uses the transport's own\n"
            "AllReduce (MPI_Allreduce, or oneCCL's). ZeRO-1's reduce-scatter and all-gather take the same path.")
    fallback: bool = option(
        True,
        summary="ops the engine lacks (and control flow) stay Paddle ops between engine segments; `false` refuses "
                "such programs (see \"Fallback to Paddle\")",
        doc="Ops the engine lacks (and control flow: cond, while_loop) stay Paddle ops between the engine's\n"
            "segments, reading and writing the same variables; each gradient is still averaged across ranks\n"
            "exactly once before its update (true or false). false refuses such a program, listing the ops.")
    sync_batch_norm: bool = option(
        False,
        summary="with several ranks, every training-mode batch norm takes its mean and variance over the batch of "
                "all ranks (see \"Batch norm over all ranks (sync_batch_norm)\"); Paddle's own `sync_batch_norm` ops always do",
        doc="With several ranks, every training-mode batch norm takes its mean and variance over the batch of\n"
            "all ranks, as Paddle's sync_batch_norm defines them (per-channel sums AllReduced in the forward and\n"
            "the backward pass), so N ranks with batch B equal one process with batch N x B, running statistics\n"
            "included (true or false). Paddle's own sync_batch_norm ops are converted so in any case.")
    recompute_checkpoints: tuple = option(
        (),
        summary="forward variables kept for the backward pass; the activations computed before the last of them "
                "are recomputed in backward from the nearest kept ones instead of kept (Paddle's "
                "`recompute_configs['checkpoints']`; see \"Recompute\"); empty = off",
        doc="Recompute (Paddle's strategy.recompute with recompute_configs['checkpoints']): names of forward\n"
            "variables to keep for the backward pass. Forward activations computed before the last checkpoint\n"
            "are not kept: the backward pass recomputes them from the nearest kept values (checkpoints,\n"
            "parameters, feeds) just before it needs them, with the same kernels on the same inputs, so the\n"
            "results are bitwise those without recompute and the CPU backend's memory plan needs a smaller\n"
            "arena. Dropout masks are kept, never redrawn. A list (environment variable: comma-separated);\n"
            "a name that is not a forward variable of the program is a ConfigError at transpile. Empty: off.")
    log_level: str = option(
        "WARNING", choices=LOG_LEVELS, case="upper",
        summary="of the `paddle_ngraph` logger",
        doc="Level of paddle_ngraph's log messages: DEBUG, INFO, WARNING, ERROR or CRITICAL.")

    def __post_init__(self):
        for key, value in _validated(dataclasses.asdict(self), "Config").items():
            object.__setattr__(self, key, value)

    @classmethod
    def build(cls, values: Mapping, source: str, base: "Config | None" = None) -> "Config":
        """``base`` (default: the defaults) with ``values`` over it; errors name ``source``."""
        merged = dict((base if base is not None else cls()).as_dict(), **validate(values, source))
        return cls(**_validated(merged, source))

    def replace(self, source: str = "Config", **overrides) -> "Config":
        return Config.build(overrides, source, base=self)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


FIELDS = {f.name: f for f in dataclasses.fields(Config)}
KEYS = tuple(FIELDS)


def kind(key: str) -> str:
    """"str", "int", "number" or "bool": what values ``key`` takes."""
    return _KINDS[FIELDS[key].type]


def type_name(key: str) -> str:
    return _TYPE_NAMES[kind(key)]


def choices(key: str) -> tuple | None:
    found = FIELDS[key].metadata["choices"]
    return tuple(found() if callable(found) else found) if found is not None else None


def defaults() -> dict:
    return Config().as_dict()


def valid_keys() -> str:
    return ", ".join(sorted(KEYS))


def unknown_keys_error(unknown, source: str, also: str = "") -> UnknownConfigKeyError:
    return UnknownConfigKeyError(f"{source}: unknown key(s) {', '.join(repr(k) for k in unknown)}; "
                                 f"valid keys: {valid_keys()}{also}")


def validate_value(key: str, value, source: str):
    """Returns the normalized value, or raises a ConfigError naming ``source``."""
    if key not in FIELDS:
        raise UnknownConfigKeyError(f"{source}: unknown key '{key}'; valid keys: {valid_keys()}")
    meta, value_kind = FIELDS[key].metadata, kind(key)
    if value_kind == "names":
        return _validate_names(key, value, source)
    if value_kind == "str":
        ok = isinstance(value, str)
    elif value_kind == "bool":
        ok = isinstance(value, (bool, np.bool_))
        value = bool(value) if ok else value
    elif value_kind == "int":  # NumPy's integers too (a value computed by the caller), as Python ints
        ok = isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
        value = int(value) if ok else value
    else:
        ok = (isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
              and math.isfinite(value))
        value = value if not ok or isinstance(value, (int, float)) else float(value)
    if not ok:
        raise ConfigError(f"{source}: '{key}' must be {type_name(key)}, got {type(value).__name__} {value!r}")
    if meta["case"] == "upper":
        value = value.upper()
    elif meta["case"] == "lower":
        value = value.lower()
    valid = choices(key)
    if valid is not None and value not in valid:
        raise ConfigError(f"{source}: unknown {key} {value!r}; valid: {', '.join(map(str, valid))}")
    minimum = meta["minimum"]
    if minimum is not None:
        if value <= minimum if meta["exclusive_minimum"] else value < minimum:
            bound = f"> {minimum:g}" if meta["exclusive_minimum"] else f">= {minimum:g}"
            raise ConfigError(f"{source}: '{key}' must be {bound}, got {value!r}")
    return value


def _validate_names(key: str, value, source: str) -> tuple:
    """A list of names as a tuple of stripped, distinct strings in their order."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigError(f"{source}: '{key}' must be {type_name(key)}, got {type(value).__name__} {value!r}")
    names = []
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise ConfigError(f"{source}: '{key}' must be {type_name(key)}; got the item {item!r} "
                              f"({type(item).__name__})")
        if item.strip() not in names:
            names.append(item.strip())
    return tuple(names)


def validate(config, source: str) -> dict:
    """Validates a (partial) mapping of configuration values; returns them normalized."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"{source}: must be a dict of configuration values, got {type(config).__name__}; "
                          f"valid keys: {valid_keys()}")
    unknown = [k for k in config if k not in FIELDS]
    if unknown:
        raise unknown_keys_error(unknown, source)
    return {key: validate_value(key, value, source) for key, value in config.items()}


def check_combination(config: Mapping, source: str) -> None:
    """Constraints between keys of a complete configuration."""
    if config["zero_stage"] == 1 and config["compress"] != "none":
        # ZeRO-1's buckets travel by ReduceScatter/AllGather, which the 16-bit scheme does not cover.
        raise ConfigError(f"{source}: compress: {config['compress']!r} cannot be combined with zero_stage 1 (the "
                          f"sharded buckets are reduce-scattered in float32); set one of them")
    if config["mp_degree"] > 1:
        # The gradient passes of these keys average over every rank; with tensor parallelism only
        # the data-parallel group may be averaged over (docs/model-parallel.md).
        clash = [f"{key} {config[key]!r}" for key, off in (("zero_stage", 0), ("localsgd_k_steps", 0),
                                                          ("sync_batch_norm", False)) if config[key] != off]
        if clash:
            raise ConfigError(f"{source}: mp_degree {config['mp_degree']} (tensor parallelism) cannot be combined "
                              f"with {', '.join(clash)} yet")
    if config["localsgd_adaptive"] and not config["localsgd_k_steps"]:
        raise ConfigError(f"{source}: localsgd_adaptive needs localsgd_k_steps >= 1 (its init_k_steps); got "
                          f"localsgd_k_steps 0 (off)")
    if config["localsgd_k_steps"]:
        # Local steps have no gradient AllReduce, which these keys configure, and the optimizer
        # state each rank keeps for its own updates cannot be sharded.
        clash = [f"{key} {config[key]!r}" for key, off in (("zero_stage", 0), ("accumulate_steps", 1),
                                                          ("compress", "none"), ("reduction", "avg"))
                 if config[key] != off]
        if clash:
            raise ConfigError(f"{source}: localsgd_k_steps {config['localsgd_k_steps']} (local SGD) cannot be "
                              f"combined with {', '.join(clash)}: local SGD averages parameters, not gradients, "
                              f"and each rank keeps its whole optimizer state; set localsgd_k_steps 0 or "
                              f"leave these at their defaults")


def _validated(config: dict, source: str) -> dict:
    values = validate(config, source)
    check_combination(values, source)
    return values
