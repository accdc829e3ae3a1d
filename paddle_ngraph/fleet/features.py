"""Paddle's own ``DistributedStrategy`` features under ``strategy.ngraph``: what the engine does with each.

Fleet scripts set Paddle's features (``strategy.gradient_merge = True`` with its
``gradient_merge_configs``, ...). Paddle implements most of them as meta optimizers that
rewrite the static program for NCCL, which does not run on CPU. With ``strategy.ngraph``
each feature is either mapped onto what the engine does, with Paddle's semantics and
``*_configs``, or refused with one ``ConfigError`` saying why:

- configuration: ``gradient_merge`` -> ``accumulate_steps``/``accumulate_avg``; ``sharding``
  stage 1 -> ``zero_stage`` 1; ``fp16_allreduce`` -> ``compress: fp16``; ``sync_batch_norm``
  -> ``sync_batch_norm``; ``recompute`` -> ``recompute_checkpoints``; ``localsgd`` and
  ``adaptive_localsgd`` -> ``localsgd_k_steps``, ``localsgd_begin_step``, ``localsgd_adaptive``; ``amp`` with
  ``amp_configs['use_pure_bf16']`` -> ``precision: bf16`` (``amp`` in float16 is refused);
  ``tensor_parallel`` (``tensor_parallel_degree``) or ``hybrid_configs['mp_degree']`` -> ``mp_degree``
  (``tensor_parallel`` in static programs; ``hybrid_configs`` in both: docs/model-parallel.md). Keys set in
  ``strategy.ngraph_configs`` win over these (logged once).
- the inner optimizer, as Paddle's ``LarsOptimizer``/``LambOptimizer`` meta optimizers build
  it: ``lars`` turns Momentum into ``LarsMomentumOptimizer``, ``lamb`` turns Adam into ``Lamb``.

``FEATURES`` is the whole table (README "Paddle's strategy features"), so that a feature Paddle
adds later is refused until someone decides what it means here.
"""
from __future__ import annotations

import logging

from ..errors import ConfigError

log = logging.getLogger("paddle_ngraph.fleet")

# feature -> what strategy.ngraph does with it (None: it is handled below; a string: refused, why)
FEATURES: dict[str, str | None] = {
    "gradient_merge": None,
    "sharding": None,
    "fp16_allreduce": None,
    "sync_batch_norm": None,
    "lars": None,
    "lamb": None,
    "localsgd": None,
    "adaptive_localsgd": None,
    "recompute": None,
    "amp": None,  # bf16 (amp_configs use_pure_bf16) maps onto precision: bf16 (amp_config); float16 is refused
    "dgc": "deep gradient compression is for GPUs; use ngraph_configs compress: bf16 or fp16",
    "pipeline": "pipeline parallelism: paddle_ngraph runs data parallelism",
    "tensor_parallel": None,  # mp_degree, for static programs (tensor_parallel_config); dygraph: hybrid_configs
    "asp": "sparsity (ASP) is for GPUs",
    "qat": "quantization-aware training is not available on the engine",
    "elastic": "elastic training is not available with strategy.ngraph",
    "auto": "strategy.auto would choose Paddle's meta optimizers instead",
    "semi_auto": "auto parallel is not available with strategy.ngraph",
    "auto_search": "auto parallel is not available with strategy.ngraph",
    "heter_ccl_mode": "heterogeneous (GPU/XPU) collectives",
    "is_fl_ps_mode": "parameter-server (federated) mode",
}
# Paddle's meta optimizers whose work the engine does when their feature is mapped.
ABSORBED = {"GradientMergeOptimizer": "gradient_merge", "ShardingOptimizer": "sharding",
            "FP16AllReduceOptimizer": "fp16_allreduce", "LarsOptimizer": "lars", "LambOptimizer": "lamb",
            "RecomputeOptimizer": "recompute", "LocalSGDOptimizer": "localsgd",
            "AdaptiveLocalSGDOptimizer": "adaptive_localsgd", "AMPOptimizer": "amp",
            "TensorParallelOptimizer": "tensor_parallel"}
HYBRID_DEGREES = ("mp_degree", "pp_degree", "dp_degree")
_SAID: set = set()  # conflicts already logged


def enabled(strategy, feature: str) -> bool:
    return getattr(strategy, feature, False) is True


def refused(strategy) -> list[str]:
    """``strategy.X (why)`` for every enabled feature strategy.ngraph cannot honour."""
    found = [f"strategy.{name} ({why})" for name, why in FEATURES.items() if why and enabled(strategy, name)]
    if enabled(strategy, "amp") and not _amp_bf16(strategy):
        found.append("strategy.amp (mixed precision in float16 is not available on the engine; "
                     "amp_configs['use_pure_bf16'] = True trains in bf16 mixed precision, as ngraph_configs "
                     "precision: bf16)")
    return found


def _amp_bf16(strategy) -> bool:
    return bool(dict(strategy.amp_configs).get("use_pure_bf16", False))


def amp_config(strategy) -> dict:
    """``strategy.amp`` with ``amp_configs['use_pure_bf16']``: ``precision: bf16``, the engine's O1
    mixed precision (passes/mixed_precision.py). Paddle's pure bf16 (O2) would also keep the
    parameters and most activations in bfloat16; the engine keeps them in float32 (master weights)
    and rounds the inputs of matmuls and convolutions only: the compute-bound ops of Paddle's default
    bf16 white list (paddle/amp/amp_lists.py: conv2d, matmul, matmul_v2, mul, linear_v2, ...; its
    max_pool2d_with_index stays float32 here). Custom lists would change that set: refused.
    Loss scaling is for float16's range: bfloat16 has float32's, and Paddle's bf16 AMP uses none."""
    if not (enabled(strategy, "amp") and _amp_bf16(strategy)):
        return {}
    configs = dict(strategy.amp_configs)
    custom = [k for k in ("custom_white_list", "custom_black_list", "custom_black_varnames") if configs.get(k)]
    if custom:
        raise ConfigError(f"strategy.amp with amp_configs {', '.join(f'{k}={list(configs[k])}' for k in custom)}: "
                          f"the engine's bf16 ops are fixed (matmul, conv2d and their gradients); leave these "
                          f"lists empty")
    log.info("strategy.amp with amp_configs['use_pure_bf16']: precision bf16 (O1: matmul and conv inputs rounded "
             "to bf16, float32 accumulation; parameters, optimizer state and other ops float32; the CPU backend "
             "runs it in float32 until it has bf16 kernels, and says so)")
    return {"precision": "bf16"}


def config_overrides(strategy) -> dict:
    """Configuration keys that Paddle's enabled features mean for the engine."""
    overrides = {}
    if enabled(strategy, "gradient_merge"):
        configs = strategy.gradient_merge_configs
        overrides["accumulate_steps"] = int(configs["k_steps"])
        overrides["accumulate_avg"] = bool(configs["avg"])
    if enabled(strategy, "sharding"):
        configs = strategy.sharding_configs
        if int(configs.get("stage", 1)) != 1:
            raise ConfigError(f"strategy.sharding with sharding_configs['stage']={configs['stage']}: the engine shards "
                              f"the optimizer state (stage 1, ZeRO-1) only; set stage 1")
        hybrid = [f"{d}={configs[d]}" for d in HYBRID_DEGREES if int(configs.get(d, 1)) > 1]
        if hybrid or configs.get("hybrid_dp"):
            raise ConfigError(f"strategy.sharding with sharding_configs {', '.join(hybrid) or 'hybrid_dp=True'}: the "
                              f"engine shards over all ranks of plain data parallelism; set them to 1 (False)")
        if configs.get("optimize_offload"):
            raise ConfigError("strategy.sharding with sharding_configs['optimize_offload']=True: offload is for GPU "
                              "memory; set it to False")
        overrides["zero_stage"] = 1
        if int(configs.get("gradient_merge_acc_step", 1)) > 1 and "accumulate_steps" not in overrides:
            overrides["accumulate_steps"] = int(configs["gradient_merge_acc_step"])
    if enabled(strategy, "fp16_allreduce"):
        overrides["compress"] = "fp16"
    if enabled(strategy, "sync_batch_norm"):
        overrides["sync_batch_norm"] = True
    if enabled(strategy, "recompute"):
        overrides.update(recompute_overrides(strategy.recompute_configs))
    overrides.update(localsgd_config(strategy))
    overrides.update(amp_config(strategy))
    overrides.update(tensor_parallel_config(strategy))
    return overrides


def _hybrid_mp_degree(strategy) -> int:
    try:
        degree = dict(strategy.hybrid_configs).get("mp_degree", 1)
    except Exception:  # pragma: no cover - a Paddle without hybrid_configs
        return 1
    return int(degree) if isinstance(degree, int) else 1


def tensor_parallel_config(strategy) -> dict:
    """``mp_degree`` from ``strategy.tensor_parallel`` with ``tensor_parallel_configs
    ['tensor_parallel_degree']`` (what Paddle's static TensorParallelOptimizer reads), or from
    ``hybrid_configs['mp_degree']``; both set, they must agree. Empty when neither is on."""
    degrees = {}
    if enabled(strategy, "tensor_parallel"):
        degrees["tensor_parallel_configs['tensor_parallel_degree']"] = int(
            dict(strategy.tensor_parallel_configs).get("tensor_parallel_degree", 1))
    if _hybrid_mp_degree(strategy) > 1:
        degrees["hybrid_configs['mp_degree']"] = _hybrid_mp_degree(strategy)
    if len(set(degrees.values())) > 1:
        raise ConfigError(f"strategy {' and '.join(f'{k}={v}' for k, v in degrees.items())} disagree; set one "
                          f"model-parallel degree")
    if not degrees or max(degrees.values()) <= 1:
        return {}
    return {"mp_degree": max(degrees.values())}


def localsgd_config(strategy) -> dict:
    """The keys ``strategy.localsgd`` / ``strategy.adaptive_localsgd`` and their ``*_configs`` map
    onto, one to one: k_steps (adaptive: init_k_steps) -> localsgd_k_steps, begin_step ->
    localsgd_begin_step, adaptive_localsgd -> localsgd_adaptive. Empty when both are off."""
    plain, adaptive = enabled(strategy, "localsgd"), enabled(strategy, "adaptive_localsgd")
    if plain and adaptive:
        raise ConfigError("strategy.localsgd and strategy.adaptive_localsgd are exclusive (Paddle's meta optimizers "
                          "black-list each other); turn one off")
    if not (plain or adaptive):
        return {}
    source = "strategy.adaptive_localsgd_configs" if adaptive else "strategy.localsgd_configs"
    configs = strategy.adaptive_localsgd_configs if adaptive else strategy.localsgd_configs
    k_key = "init_k_steps" if adaptive else "k_steps"
    k, begin = int(configs[k_key]), int(configs["begin_step"])
    if k < 1 or begin < 0:
        raise ConfigError(f"{source}: {k_key} must be >= 1 and begin_step >= 0, got {k_key} {k}, begin_step {begin}")
    return {"localsgd_k_steps": k, "localsgd_begin_step": begin, "localsgd_adaptive": adaptive}


def recompute_overrides(configs) -> dict:
    """``recompute_configs['checkpoints']``: the engine recomputes (passes/recompute.py) instead of
    Paddle's RecomputeOptimizer. No checkpoints: no recompute, as in Paddle. Offloading checkpoints
    to pinned host memory has no meaning on CPU, where they are in host memory already: ignored."""
    if configs.get("enable_offload"):
        log.warning("strategy.recompute_configs['enable_offload']: ignored (the checkpoints are in host memory "
                    "already on CPU)")
    checkpoints = list(configs.get("checkpoints") or [])
    return {"recompute_checkpoints": checkpoints} if checkpoints else {}


def merged_overrides(strategy) -> dict:
    """The mapped features under ``strategy.ngraph_configs``, which win key by key (said once)."""
    mapped = config_overrides(strategy)
    explicit = dict(strategy.ngraph_configs)
    conflicts = sorted(k for k in mapped if k in explicit and explicit[k] != mapped[k])
    said = tuple((k, mapped[k], explicit[k]) for k in conflicts)
    if conflicts and said not in _SAID:
        _SAID.add(said)
        log.warning("strategy.ngraph_configs sets %s, which Paddle's strategy features also set (%s); "
                    "ngraph_configs wins", ", ".join(conflicts),
                    ", ".join(f"{k}={mapped[k]!r}" for k in conflicts))
    return {**mapped, **explicit}


def inner_optimizer(optimizer, strategy):
    """The optimizer the engine's program uses: Paddle's LarsOptimizer/LambOptimizer build it so."""
    from paddle.optimizer import Adam, Momentum

    if enabled(strategy, "lars"):
        if not isinstance(optimizer, Momentum):
            raise ConfigError(f"strategy.lars needs a Momentum optimizer to turn into LARS momentum, got "
                              f"{type(optimizer).__name__}")
        return lars_from(optimizer, strategy.lars_configs)
    if enabled(strategy, "lamb"):
        if not isinstance(optimizer, Adam) or type(optimizer).__name__ == "AdamW":
            raise ConfigError(f"strategy.lamb needs an Adam optimizer to turn into Lamb, got "
                              f"{type(optimizer).__name__}")
        return lamb_from(optimizer, strategy.lamb_configs)
    return optimizer


def lars_from(opt, configs):
    """As paddle/distributed/fleet/meta_optimizers/lars_optimizer.py builds it."""
    from paddle.incubate.optimizer import LarsMomentumOptimizer

    return LarsMomentumOptimizer(
        learning_rate=opt._learning_rate, momentum=opt._momentum, lars_coeff=configs["lars_coeff"],
        lars_weight_decay=configs["lars_weight_decay"], parameter_list=opt._parameter_list,
        regularization=opt.regularization, grad_clip=opt._grad_clip, name=opt._name,
        exclude_from_weight_decay=configs["exclude_from_weight_decay"], epsilon=configs["epsilon"])


def lamb_from(opt, configs):
    """As paddle/distributed/fleet/meta_optimizers/lamb_optimizer.py builds it."""
    import paddle

    excluded = list(configs["exclude_from_weight_decay"])

    def exclude_fn(param):
        return any(param.name.endswith(name) for name in excluded)

    return paddle.optimizer.Lamb(
        learning_rate=opt._learning_rate, lamb_weight_decay=configs["lamb_weight_decay"], beta1=opt._beta1,
        beta2=opt._beta2, epsilon=opt._epsilon, parameters=opt._parameter_list, grad_clip=opt._grad_clip,
        exclude_from_weight_decay_fn=exclude_fn if excluded else None, name=opt._name)


# Degrees of Paddle's hybrid parallelism (hybrid_configs) the engine does not run (mp_degree it
# does, with dp_degree: docs/model-parallel.md).
UNSUPPORTED_DEGREES = ("pp_degree", "sharding_degree", "sep_degree", "cp_degree", "ep_degree",
                       "moe_sharding_degree")


# Switches of hybrid_configs["mp_configs"] that make fleet.meta_parallel's layers run Paddle's own
# overlap PyLayer (an asynchronous AllReduce on Paddle's process group inside backward) or fused
# GPU ops instead of the mp_ops functions the engine captures and replaces: the capture would stop
# inside Paddle's PyLayer with a message that names none of them.
UNSUPPORTED_MP_CONFIGS = ("mp_async_allreduce", "mp_skip_c_identity", "mp_fused_linear_param_grad_add")


def unsupported_mp_configs(strategy) -> list[str]:
    try:
        mp_configs = strategy.hybrid_configs["mp_configs"]
    except Exception:  # pragma: no cover - a Paddle without these configs
        return []
    return [f"strategy.hybrid_configs['mp_configs'].{name}=True" for name in UNSUPPORTED_MP_CONFIGS
            if getattr(mp_configs, name, False)]


def unsupported_features(strategy, dygraph: bool = False) -> list[str]:
    found = refused(strategy)
    try:
        hybrid = strategy.hybrid_configs
        found += [f"strategy.hybrid_configs['{d}']={hybrid[d]}" for d in UNSUPPORTED_DEGREES
                  if d in hybrid and isinstance(hybrid[d], int) and hybrid[d] > 1]
    except Exception:  # pragma: no cover - a Paddle without these configs
        pass
    if dygraph:
        found += unsupported_mp_configs(strategy)
    if dygraph and enabled(strategy, "tensor_parallel"):
        found.append("strategy.tensor_parallel (it configures paddle.distributed.split in static programs; in "
                     "dygraph, fleet.meta_parallel's layers take strategy.hybrid_configs['mp_degree']: "
                     "docs/model-parallel.md)")
    return found


def check_strategy(strategy, dygraph: bool = False) -> None:
    found = unsupported_features(strategy, dygraph)
    if found:
        raise ConfigError(f"strategy.ngraph cannot be combined with {', '.join(found)}; turn these off, or turn "
                          f"strategy.ngraph off (docs/fleet.md, \"Paddle's strategy features\")")
