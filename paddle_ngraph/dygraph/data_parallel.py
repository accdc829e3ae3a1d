"""``paddle_ngraph.DataParallel``: the drop-in for ``paddle.DataParallel`` that runs the Layer on the engine.

    model = paddle_ngraph.DataParallel(MyNet())      # or fleet.distributed_model with strategy.ngraph
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward(); opt.step(); opt.clear_grad()

The wrapped Layer keeps its parameters (``state_dict`` has the Layer's own keys, as
paddle.DataParallel's); ``model(x)`` runs its forward and, at ``loss.backward()``, its backward
on the engine, with the gradients averaged across the launcher's ranks by the engine's bucketed
AllReduce. In one process it is an accelerator. At construction every rank takes rank 0's
parameters and buffers, so ranks start identical whatever their seeds (as paddle.DataParallel).
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import logging
import types

import paddle

from ..config import Config
from ..config_sources import resolve_config
from ..distributed.agreement import agree
from ..log_level import apply_log_level
from .runner import LayerEngine, _view, check_options
from .tensor_parallel import check_no_sequence_parallelism, initial_broadcasts, sharded

log = logging.getLogger("paddle_ngraph.dygraph")
_TRANSPORTS: dict = {}


def shared_transport(config: Config):
    """One transport per process and kind: every wrapped Layer's collectives go over the same one."""
    from ..distributed import detect_launcher, make_transport
    from ..distributed.bootstrap import pinned_transport

    if pinned_transport() is not None and config.transport in ("auto", "mpi"):
        return pinned_transport()  # an elastic job's current group
    info = detect_launcher()
    key = (config.transport, info.size)
    if key not in _TRANSPORTS:
        transport = make_transport(config.transport, timeout_s=config.timeout_s, info=info)
        if transport.size > 1:
            transport.set_hierarchical(config.hierarchical)
            transport.shared_memory = config.shm_allreduce
        _TRANSPORTS[key] = transport
    return _TRANSPORTS[key]


def check_layer(layer):
    """Refuses, before any step, a Layer that neither the engine nor Paddle can run on CPU: one with
    SyncBatchNorm sublayers. Paddle 3.3.1 registers no CPU kernel for sync_batch_norm, and its
    to_static refuses the op on CPU, so the capture would fail and the eager fallback would then stop
    inside Paddle's kernel lookup at the first forward."""
    from ..errors import ConfigError

    if not isinstance(layer, paddle.nn.Layer):
        raise ConfigError(f"paddle_ngraph.DataParallel wraps a paddle.nn.Layer, got {type(layer).__name__} {layer!r:.80}")
    synced = [name or type(layer).__name__ for name, sub in layer.named_sublayers(include_self=True)
              if isinstance(sub, paddle.nn.SyncBatchNorm)]
    if synced:
        raise ConfigError(
            f"Layer {type(layer).__name__} holds paddle.nn.SyncBatchNorm sublayer(s) {', '.join(synced)}: Paddle "
            f"{paddle.__version__} has no CPU kernel for sync_batch_norm and cannot capture it on CPU, so neither the "
            "engine nor Paddle can run them. Use paddle.nn.BatchNorm2D (each rank normalizes its own batch, as "
            "paddle.DataParallel without SyncBatchNorm), or a static program with sync_batch_norm: true "
            "(statistics over all ranks)")


# paddle.DataParallel's own arguments, taken so that it can be replaced without changing them.
PADDLE_ARGUMENTS = ("strategy", "comm_buffer_size", "last_comm_buffer_size", "find_unused_parameters", "group")


def check_paddle_arguments(given: dict, nranks: int):
    """paddle.DataParallel's arguments: what they ask for is what the engine does or decides itself.
    ``find_unused_parameters`` either way: gradients reached by no rank stay None, those some ranks
    do not reach get zeros there (what Paddle does with True; with False Paddle would fail or wait on
    such a Layer). ``strategy`` (a ParallelStrategy: ranks and endpoints) comes from the launcher;
    ``comm_buffer_size``/``last_comm_buffer_size``: the engine's buckets are ``bucket_mb``. A
    ``group`` must span every rank: the gradients are averaged over all the launcher's ranks."""
    group = given.get("group")
    size = getattr(group, "nranks", None) if group is not None else None
    if size is not None and size != nranks:
        from ..errors import ConfigError

        raise ConfigError(f"paddle_ngraph.DataParallel(group=...): a group of {size} of the {nranks} ranks; the "
                          "engine averages gradients over all the launcher's ranks (group=None)")
    for name in ("comm_buffer_size", "last_comm_buffer_size"):
        if name in given:
            log.info("paddle_ngraph.DataParallel: %s=%s is paddle.DataParallel's; the engine's buckets are "
                     "bucket_mb", name, given[name])


_BY_POSITION = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def input_tensors(value) -> list:
    """The tensors in ``value`` (a tensor, or lists, tuples and dicts of them, nested), in order."""
    if isinstance(value, paddle.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in input_tensors(item)]
    return []


def broadcast_inputs(group, layer_name: str, inputs: tuple, kwargs: dict):
    """Every tensor input, in place, to the values of the first rank of ``group`` (the model-parallel
    group), as Paddle's ``TensorParallel`` does before each forward (``mp_configs.need_broadcast_data``,
    on by default): the shards of one model must see one batch, else the row-parallel AllReduce sums
    partial products of different inputs and the result is no model's. The ranks first compare
    shapes and dtypes (Paddle would resize a tensor; here the tensors are written in place, and a
    mismatched broadcast would fail or hang), and all raise the same ValidationError if they differ.
    Non-tensor inputs are left as they are."""
    from ..errors import ValidationError

    tensors = input_tensors((inputs, kwargs))
    if not tensors:
        return
    mine = [(tuple(t.shape), str(t.dtype)) for t in tensors]
    # One small AllReduce at every step; what each rank has only where they differ.
    key = int.from_bytes(hashlib.sha256(repr(mine).encode()).digest()[:6], "big")
    if not agree(group, key, name="mp_input_signature")[0]:
        everyone = group.allgather_object(mine)
        raise ValidationError(
            f"Layer {layer_name}: the ranks of a model-parallel group must give inputs of the same shapes and dtypes "
            f"(their values are the group's first rank's, as Paddle's TensorParallel broadcasts them); got "
            + "; ".join(f"group rank {i}: {described}" for i, described in enumerate(everyone)))
    with paddle.no_grad():
        for tensor in tensors:
            if tensor.is_contiguous():
                group.broadcast(_view(tensor), root=0)
            else:
                tensor.set_value(group.broadcast(tensor.numpy(), root=0))


def positional_inputs(layer, inputs: tuple, kwargs: dict) -> tuple | None:
    """``inputs`` and ``kwargs`` as one positional tuple by ``layer.forward``'s signature:
    ``model(img, label=label)`` (Paddle's own MNIST test model) is ``model(img, label)``. Only where
    every keyword names a parameter after ``inputs`` that can be given by position and each
    parameter between them left out defaults to None, passed as None (``model(img, im_shape=s)``
    of Paddle's YOLOv3 test model, whose ``gtbox=None, ...`` come before): another default would
    have to be passed as an input. Else None, and the Layer runs eagerly with the keywords as given."""
    try:
        parameters = [p for p in inspect.signature(layer.forward).parameters.values() if p.kind in _BY_POSITION]
    except (TypeError, ValueError):
        return None
    later = parameters[len(inputs):]
    names = [p.name for p in later]
    if not set(kwargs) <= set(names):
        return None
    count = max(names.index(k) for k in kwargs) + 1
    if any(p.name not in kwargs and p.default is not None for p in later[:count]):
        return None
    return tuple(inputs) + tuple(kwargs.get(p.name) for p in later[:count])


class DataParallel(paddle.nn.Layer):
    """Wraps ``layer``; ``configs`` are the keys of ``strategy.ngraph_configs`` (``paddle_ngraph.Config``;
    configs/defaults.yaml), resolved as for static training; zero_stage, accumulate_steps and
    sync_batch_norm are for static programs only. With ``mp_degree`` > 1 every tensor input is first
    set to the model-parallel group's first rank's (``broadcast_inputs``; False leaves each rank its
    own, as Paddle's ``mp_configs.need_broadcast_data = False``). paddle.DataParallel's own arguments (``strategy``,
    also second and positional, ``comm_buffer_size``, ``last_comm_buffer_size``,
    ``find_unused_parameters``, ``group``) are taken too: ``check_paddle_arguments``."""

    def __init__(self, layer, configs: dict | None = None, **options):
        super().__init__()
        paddles = {name: options.pop(name) for name in PADDLE_ARGUMENTS if name in options}
        if configs is not None and not isinstance(configs, dict):
            # paddle.DataParallel(layer, strategy, ...): Paddle's second argument, a ParallelStrategy
            paddles["strategy"] = configs
            configs = None
        config = Config(**resolve_config({**(configs or {}), **options}))
        check_options(config)
        check_layer(layer)
        apply_log_level(config.log_level)
        self._layers = layer
        self._mirror_signature(layer)
        transport = shared_transport(config)
        check_paddle_arguments(paddles, transport.size)
        self._engine = LayerEngine(layer, config, transport)
        self.broadcast_inputs = self._engine.layout.mp_degree > 1
        if self._engine.layout.mp_degree > 1:
            check_no_sequence_parallelism(layer)
        if transport.size > 1:
            self._broadcast_initial(transport)

    def _broadcast_initial(self, transport):
        """Rank 0's parameters and buffers on every rank, in place (the Layer's own tensors). Under
        tensor parallelism, the data-parallel group's first rank's, and for tensors that are not
        shards also the model-parallel group's first rank's (a shard keeps its own values)."""
        tensors = self._engine.named_tensors()
        layout = self._engine.layout
        if layout.mp_degree > 1:
            plan = initial_broadcasts(layout, list(tensors), sharded(self._layers))
        else:
            plan = [((), list(tensors))]
        with paddle.no_grad():
            for group, names in plan:
                among = transport.group(group)
                for name in names:
                    if tensors[name]._is_initialized():
                        among.broadcast(_view(tensors[name]), root=0)

    def _mirror_signature(self, layer):
        """``forward`` with the Layer's argument names, for this wrapper only: paddle.Model (hapi)
        splits each batch into inputs and labels by the names ``inspect.getfullargspec`` finds in
        ``network.forward``, and ``*inputs`` names none (it would call the Layer with no input)."""
        try:
            own = inspect.signature(layer.forward)
        except (TypeError, ValueError):
            return
        wrapper = DataParallel.forward

        def forward(self, *inputs, **kwargs):
            return wrapper(self, *inputs, **kwargs)

        this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        forward.__signature__ = own.replace(parameters=[this, *own.parameters.values()])
        object.__setattr__(self, "forward", types.MethodType(forward, self))

    def forward(self, *inputs, **kwargs):
        if self.broadcast_inputs and self._engine.layout.mp_degree > 1:
            broadcast_inputs(self._engine.transport.group(self._engine.layout.mp_group()),
                             type(self._layers).__name__, inputs, kwargs)
        if kwargs:
            bound = positional_inputs(self._layers, inputs, kwargs)
            if bound is None:
                return self._engine.eager(inputs, "keyword inputs the engine cannot pass by position (it captures "
                                                  "positional tensors)", kwargs)
            inputs = bound
        return self._engine.call(inputs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes in this context accumulate gradients locally, without AllReduce; the
        first backward after it averages the accumulated sums (paddle.DataParallel's semantics).
        As there, what counts is where the forward runs."""
        previous = self._engine.sync_gradients
        self._engine.sync_gradients = False
        try:
            yield
        finally:
            self._engine.sync_gradients = previous

    # paddle.DataParallel's checkpoints have the Layer's own keys.
    def state_dict(self, *args, **kwargs):
        return self._layers.state_dict(*args, **kwargs)

    def set_state_dict(self, state_dict, *args, **kwargs):
        return self._layers.set_state_dict(state_dict, *args, **kwargs)

    set_dict = set_state_dict
    load_dict = set_state_dict

    @property
    def engine(self) -> LayerEngine:
        return self._engine
