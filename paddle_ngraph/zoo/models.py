"""Reference models as Paddle static programs, buildable in either IR.

Each builder runs inside ``program_guard`` and returns (feeds, loss). Building
inside ``unique_name.guard()`` gives the same variable names every time, so
programs built on different ranks or twice in one process agree.

In legacy mode some Paddle 3 Python APIs (``paddle.matmul``, ``F.gelu``...)
refuse legacy Variables; ``_legacy_op`` appends those ops through LayerHelper.
"""
from __future__ import annotations

import math

import numpy as np
import paddle
import paddle.nn.functional as F

from ..quiet import paddle_minimize_warnings_ignored

# Feed specification of every model: name -> (shape, dtype, exclusive upper bound of integer values).
FEEDS = {
    "mnist_mlp": {"x": ([None, 784], "float32", None), "y": ([None, 1], "int64", 10)},
    "lenet": {"x": ([None, 1, 28, 28], "float32", None), "y": ([None, 1], "int64", 10)},
    "resnet_small": {"x": ([None, 3, 16, 16], "float32", None), "y": ([None, 1], "int64", 10)},
    "transformer_layer": {"tokens": ([None, 16], "int64", 100), "y": ([None, 1], "int64", 10)},
}


def _data(model: str) -> tuple[dict, list]:
    """Declares the model's feeds; returns (feeds as name -> (shape, dtype), variables).

    Floating-point feeds follow ``paddle.get_default_dtype()``, as the parameters do, so that
    ``paddle.set_default_dtype("float64")`` builds the whole model in float64."""
    default = paddle.get_default_dtype()
    spec = {name: (shape, default if dtype == "float32" else dtype) for name, (shape, dtype, _) in FEEDS[model].items()}
    return spec, [paddle.static.data(name, shape, dtype) for name, (shape, dtype) in spec.items()]


def _legacy_op(pir_call, op_type: str, inputs: dict, attrs: dict):
    """``pir_call()`` in PIR mode; in legacy mode appends ``op_type`` (single output ``Out``)."""
    if paddle.framework.in_pir_mode():
        return pir_call()
    from paddle.base.layer_helper import LayerHelper

    helper = LayerHelper(op_type)
    out = helper.create_variable_for_type_inference(next(iter(inputs.values())).dtype)
    helper.append_op(type=op_type, inputs={k: [v] for k, v in inputs.items()}, outputs={"Out": [out]}, attrs=attrs)
    return out


def _matmul(x, y, transpose_y: bool = False):
    return _legacy_op(lambda: paddle.matmul(x, y, transpose_y=transpose_y), "matmul_v2", {"X": x, "Y": y},
                      {"trans_x": False, "trans_y": transpose_y})


def _gelu(x):
    return _legacy_op(lambda: F.gelu(x), "gelu", {"X": x}, {"approximate": False})


def _classification_loss(logits, y):
    return paddle.mean(F.cross_entropy(logits, y))


def mnist_mlp(hidden=(600,)):
    """dist_mnist_mlp of the nGraph documentation: 784-600-10, ReLU, softmax cross-entropy;
    ``hidden`` sets the hidden layers (784-1024-1024-10 is ``hidden=(1024, 1024)``)."""
    feeds, (x, y) = _data("mnist_mlp")
    h, width = x, 784
    for size in hidden:
        h, width = F.relu(paddle.nn.Linear(width, size)(h)), size
    logits = paddle.nn.Linear(width, 10)(h)
    return feeds, _classification_loss(logits, y)


def lenet():
    """LeNet-5 style CNN on 1x28x28: conv(6,5x5,pad 2)-pool-conv(16,5x5)-pool-120-84-10."""
    feeds, (x, y) = _data("lenet")
    h = F.max_pool2d(F.relu(paddle.nn.Conv2D(1, 6, 5, padding=2)(x)), 2, 2)     # 6x14x14
    h = F.max_pool2d(F.relu(paddle.nn.Conv2D(6, 16, 5)(h)), 2, 2)               # 16x5x5
    h = paddle.reshape(h, [-1, 16 * 5 * 5])
    h = F.relu(paddle.nn.Linear(400, 120)(h))
    h = F.relu(paddle.nn.Linear(120, 84)(h))
    return feeds, _classification_loss(paddle.nn.Linear(84, 10)(h), y)


def _conv_bn(x, cin, cout, kernel, stride=1):
    conv = paddle.nn.Conv2D(cin, cout, kernel, stride=stride, padding=kernel // 2, bias_attr=False)
    return paddle.nn.BatchNorm2D(cout)(conv(x))


def _basic_block(x, cin, cout, stride):
    h = F.relu(_conv_bn(x, cin, cout, 3, stride))
    h = _conv_bn(h, cout, cout, 3)
    skip = x if stride == 1 and cin == cout else _conv_bn(x, cin, cout, 1, stride)
    return F.relu(h + skip)


def resnet_small():
    """conv3x3(16)-bn-relu, a basic block (identity skip), a stride-2 basic block (1x1 conv+bn
    projection skip), global average pooling, fc10; input 3x16x16."""
    feeds, (x, y) = _data("resnet_small")
    h = F.relu(_conv_bn(x, 3, 16, 3))
    h = _basic_block(h, 16, 16, 1)
    h = _basic_block(h, 16, 32, 2)                                # 32x8x8
    h = paddle.reshape(F.adaptive_avg_pool2d(h, 1), [-1, 32])
    return feeds, _classification_loss(paddle.nn.Linear(32, 10)(h), y)


def transformer_layer(dropout: float = 0.1, seq_len: int = 16, vocab: int = 100, d_model: int = 32,
                      heads: int = 4, d_ff: int = 64):
    """Token + learned position embedding, one post-LN encoder layer (4-head self-attention,
    GELU FFN), mean-pool over tokens, fc10."""
    feeds, (tokens, y) = _data("transformer_layer")
    dk = d_model // heads
    position = paddle.static.create_parameter([seq_len, d_model], "float32", name="position_embedding",
                                              default_initializer=paddle.nn.initializer.Normal(std=0.02))
    x = paddle.nn.Embedding(vocab, d_model)(tokens) + position        # [B, S, D]

    def split_heads(v):  # [B, S, D] -> [B, H, S, dk]
        return paddle.transpose(paddle.reshape(v, [-1, seq_len, heads, dk]), [0, 2, 1, 3])

    # The key projection has no bias: q . (k + b) shifts every score of a query by the same q . b,
    # which the softmax cancels, so a key bias would get an exactly-zero gradient (pure rounding
    # noise, which Adam would amplify into lr-sized steps).
    q = split_heads(paddle.nn.Linear(d_model, d_model)(x))
    k = split_heads(paddle.nn.Linear(d_model, d_model, bias_attr=False)(x))
    v = split_heads(paddle.nn.Linear(d_model, d_model)(x))
    scores = paddle.scale(_matmul(q, k, transpose_y=True), scale=1.0 / math.sqrt(dk))
    context = _matmul(F.softmax(scores, axis=-1), v)                   # [B, H, S, dk]
    context = paddle.reshape(paddle.transpose(context, [0, 2, 1, 3]), [-1, seq_len, d_model])
    attention = F.dropout(paddle.nn.Linear(d_model, d_model)(context), dropout)
    x = paddle.nn.LayerNorm(d_model)(x + attention)
    ffn = F.dropout(_gelu(paddle.nn.Linear(d_model, d_ff)(x)), dropout)
    x = paddle.nn.LayerNorm(d_model)(x + paddle.nn.Linear(d_ff, d_model)(ffn))
    pooled = paddle.mean(x, axis=1)                                    # [B, D]
    return feeds, _classification_loss(paddle.nn.Linear(d_model, 10)(pooled), y)


MODELS = {"mnist_mlp": mnist_mlp, "lenet": lenet, "resnet_small": resnet_small, "transformer_layer": transformer_layer}


def make_batch(model: str, batch: int, rng: np.random.Generator | None = None) -> dict:
    """Random feed dict for ``model``: floats standard normal, integers (labels, token ids) in range."""
    if model not in FEEDS:
        raise ValueError(f"unknown model '{model}'; valid: {', '.join(MODELS)}")
    rng = rng if rng is not None else np.random.default_rng(0)
    out = {}
    for name, (shape, dtype, high) in FEEDS[model].items():
        shape = [batch if d is None else d for d in shape]
        if high is None:
            out[name] = rng.standard_normal(shape).astype(dtype)
        else:
            out[name] = rng.integers(0, high, size=shape).astype(dtype)
    return out


# Recompute checkpoints of each model: the outputs of its layers, as forward ops of these types
# (Paddle's type without the "pd_op." prefix; "relu<add" = a relu reading an add: a residual
# block's output); the first output of each op.
CHECKPOINT_OPS = {"mnist_mlp": ("relu", "linear"), "lenet": ("pool2d",), "resnet_small": ("relu<add",),
                  "transformer_layer": ("layer_norm",)}


def checkpoint_names(model: str, program) -> list[str]:
    """Recompute checkpoints for ``model``'s training ``program`` (either IR): the names, as
    ``transpile(..., recompute_checkpoints=...)`` takes them, of its layer outputs (``CHECKPOINT_OPS``).
    For mnist_mlp the layer outputs are the hidden ReLU and the logits (the output of the last matmul
    and bias add), Paddle's own example (``RecomputeOptimizer._set_checkpoints([fc_1, pred])``)."""
    from ..frontend import FORWARD, decode

    view = decode(program)
    forward = [op for op in view.ops if op.role == FORWARD]
    made_by = {n: op for op in forward for n in op.output_names()}

    def kind(op) -> str:
        t = op.type.replace("pd_op.", "")
        t = t[:-1] if t.endswith("_") else t
        return {"elementwise_add": "add", "matmul_v2": "matmul"}.get(t, t)

    names = []
    for rule in CHECKPOINT_OPS[model]:
        op_kind, _, reads = rule.partition("<")
        for op in forward:
            if rule == "linear":  # a bias add reading a matmul: the last one is the logits
                continue
            if kind(op) == op_kind and (not reads or any(kind(made_by[n]) == reads for n in op.input_names()
                                                         if n in made_by)):
                names.append(op.output_names()[0])
    if "linear" in CHECKPOINT_OPS[model]:
        bias_adds = [op for op in forward if kind(op) == "add"
                     and any(n in made_by and kind(made_by[n]) == "matmul" for n in op.input_names())]
        names.append(bias_adds[-1].output_names()[0])
    order = {n: k for k, op in enumerate(forward) for n in op.output_names()}
    return sorted(dict.fromkeys(names), key=order.get)


def make_optimizer(name: str, lr: float):
    name = name.lower()
    if name == "sgd":
        return paddle.optimizer.SGD(lr)
    if name == "momentum":
        return paddle.optimizer.Momentum(lr, momentum=0.9)
    if name == "adam":
        return paddle.optimizer.Adam(lr)
    # LARS and Lamb with the biases excluded from weight decay (their decay is 0, their step plain).
    if name == "lars":
        return paddle.incubate.optimizer.LarsMomentumOptimizer(lr, 0.9, lars_coeff=0.01, lars_weight_decay=0.0005,
                                                               exclude_from_weight_decay=["b_0"])
    if name == "lamb":
        return paddle.optimizer.Lamb(lr, lamb_weight_decay=0.01, exclude_from_weight_decay_fn=lambda p: "b_0" in p.name)
    raise ValueError(f"unknown optimizer '{name}'; valid: sgd, momentum, adam, lars, lamb")


def build_program(model: str = "mnist_mlp", optimizer: str = "sgd", lr: float = 0.03, seed: int = 1,
                  **model_kwargs):
    """Returns (main, startup, feeds, loss) with backward and the optimizer appended.

    ``model_kwargs`` go to the model builder (e.g. ``dropout=0.0`` for transformer_layer).
    """
    if model not in MODELS:
        raise ValueError(f"unknown model '{model}'; valid: {', '.join(MODELS)}")
    main, startup = paddle.static.Program(), paddle.static.Program()
    main.random_seed = startup.random_seed = seed
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        feeds, loss = MODELS[model](**model_kwargs)
        with paddle_minimize_warnings_ignored():
            make_optimizer(optimizer, lr).minimize(loss)
    return main, startup, feeds, loss
