"""The reference models of paddle_ngraph/zoo/models.py for the dygraph peers of tools/bench.py.

    torch_model(name, **model_kwargs) -> torch.nn.Module
    paddle_model(name, **model_kwargs) -> paddle.nn.Layer (dygraph)
    torch_loss(logits, y), paddle_loss(logits, y)

Each model is the same architecture as the static builder of the same name (layers, shapes,
trainable parameter count; ``model_kwargs`` as the builder's, e.g. ``dropout=0.0`` for
transformer_layer). ``forward`` takes the feeds of ``FEEDS[name]`` without the label, in that order,
and returns logits [batch, 10]; the loss is the mean cross entropy over ``y`` of shape [batch, 1]
int64. Initialization differs from the static programs (these models are for throughput), but
``state_dict()`` lists the parameters (and batch-norm statistics) in the order of the static
program's ``all_parameters()``, so the static weights can be loaded for a comparison.
"""
from __future__ import annotations

import math

NAMES = ("mnist_mlp", "lenet", "resnet_small", "transformer_layer")
# Benchmark models that are a zoo model with other sizes: name -> (zoo model, its keyword arguments).
# mnist_mlp_wide is the precision mode's MLP, 784-1024-1024-10: products big enough for bf16 to matter.
VARIANTS = {"mnist_mlp_wide": ("mnist_mlp", {"hidden": (1024, 1024)})}


def resolve(name: str) -> tuple[str, dict]:
    """(zoo model, keyword arguments) of a benchmark model name."""
    return VARIANTS.get(name, (name, {}))


def _check(name: str):
    if name not in NAMES:
        raise ValueError(f"unknown model '{name}'; valid: {', '.join(NAMES)}")


# --- torch ----------------------------------------------------------------------------------------------
def torch_model(name: str, **model_kwargs):
    _check(name)  # before importing torch, which may not be installed
    import torch
    import torch.nn.functional as F
    from torch import nn

    class MnistMLP(nn.Module):
        def __init__(self, hidden=(600,)):
            super().__init__()
            widths = [784, *hidden]
            self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:]))
            self.fc = nn.Linear(widths[-1], 10)

        def forward(self, x):
            for layer in self.hidden:
                x = F.relu(layer(x))
            return self.fc(x)

    class LeNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = nn.Conv2d(1, 6, 5, padding=2), nn.Conv2d(6, 16, 5)
            self.fc1, self.fc2, self.fc3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)

        def forward(self, x):
            h = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)        # 6x14x14
            h = F.max_pool2d(F.relu(self.conv2(h)), 2, 2)        # 16x5x5
            h = F.relu(self.fc1(h.reshape(-1, 16 * 5 * 5)))
            return self.fc3(F.relu(self.fc2(h)))

    def conv_bn(cin, cout, kernel, stride=1):
        return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False),
                             nn.BatchNorm2d(cout))

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1, self.conv2 = conv_bn(cin, cout, 3, stride), conv_bn(cout, cout, 3)
            self.skip = nn.Identity() if stride == 1 and cin == cout else conv_bn(cin, cout, 1, stride)

        def forward(self, x):
            return F.relu(self.conv2(F.relu(self.conv1(x))) + self.skip(x))

    class ResNetSmall(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = conv_bn(3, 16, 3)
            self.block1, self.block2 = BasicBlock(16, 16, 1), BasicBlock(16, 32, 2)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            h = self.block2(self.block1(F.relu(self.stem(x))))  # 32x8x8
            return self.fc(F.adaptive_avg_pool2d(h, 1).reshape(-1, 32))

    class TransformerLayer(nn.Module):
        def __init__(self, dropout=0.1, seq_len=16, vocab=100, d_model=32, heads=4, d_ff=64):
            super().__init__()
            self.seq_len, self.heads, self.dk, self.dropout = seq_len, heads, d_model // heads, dropout
            # Parameters are registered in the static builder's creation order (state_dict() order).
            self.position = nn.Parameter(0.02 * torch.randn(seq_len, d_model))
            self.embedding = nn.Embedding(vocab, d_model)
            # No key bias, as in the static builder (it would get an exactly-zero gradient).
            self.q, self.k, self.v = (nn.Linear(d_model, d_model), nn.Linear(d_model, d_model, bias=False),
                                      nn.Linear(d_model, d_model))
            self.out, self.norm1 = nn.Linear(d_model, d_model), nn.LayerNorm(d_model)
            self.ff1, self.norm2, self.ff2 = nn.Linear(d_model, d_ff), nn.LayerNorm(d_model), nn.Linear(d_ff, d_model)
            self.fc = nn.Linear(d_model, 10)

        def split_heads(self, v):  # [B, S, D] -> [B, H, S, dk]
            return v.reshape(-1, self.seq_len, self.heads, self.dk).permute(0, 2, 1, 3)

        def forward(self, tokens):
            x = self.embedding(tokens) + self.position                            # [B, S, D]
            q, k, v = self.split_heads(self.q(x)), self.split_heads(self.k(x)), self.split_heads(self.v(x))
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.dk)
            context = (F.softmax(scores, dim=-1) @ v).permute(0, 2, 1, 3).reshape(-1, self.seq_len, x.shape[-1])
            x = self.norm1(x + F.dropout(self.out(context), self.dropout, self.training))
            ffn = F.dropout(F.gelu(self.ff1(x)), self.dropout, self.training)      # exact (erf) GELU
            x = self.norm2(x + self.ff2(ffn))
            return self.fc(x.mean(dim=1))

    _check(name)
    classes = {"mnist_mlp": MnistMLP, "lenet": LeNet, "resnet_small": ResNetSmall,
               "transformer_layer": TransformerLayer}
    return classes[name](**model_kwargs)


def torch_loss(logits, y):
    import torch.nn.functional as F

    return F.cross_entropy(logits, y.reshape(-1))  # y: [batch, 1] -> [batch]


# --- paddle dygraph -------------------------------------------------------------------------------------
def paddle_model(name: str, **model_kwargs):
    import paddle
    import paddle.nn.functional as F
    from paddle import nn

    if not paddle.in_dynamic_mode():
        raise RuntimeError("paddle_model builds dygraph layers: call paddle.disable_static() first")

    class MnistMLP(nn.Layer):
        def __init__(self, hidden=(600,)):
            super().__init__()
            widths = [784, *hidden]
            self.hidden = nn.LayerList([nn.Linear(a, b) for a, b in zip(widths, widths[1:])])
            self.fc = nn.Linear(widths[-1], 10)

        def forward(self, x):
            for layer in self.hidden:
                x = F.relu(layer(x))
            return self.fc(x)

    class LeNet(nn.Layer):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = nn.Conv2D(1, 6, 5, padding=2), nn.Conv2D(6, 16, 5)
            self.fc1, self.fc2, self.fc3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)

        def forward(self, x):
            h = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)        # 6x14x14
            h = F.max_pool2d(F.relu(self.conv2(h)), 2, 2)        # 16x5x5
            h = F.relu(self.fc1(paddle.reshape(h, [-1, 16 * 5 * 5])))
            return self.fc3(F.relu(self.fc2(h)))

    def conv_bn(cin, cout, kernel, stride=1):
        return nn.Sequential(nn.Conv2D(cin, cout, kernel, stride=stride, padding=kernel // 2, bias_attr=False),
                             nn.BatchNorm2D(cout))

    class BasicBlock(nn.Layer):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1, self.conv2 = conv_bn(cin, cout, 3, stride), conv_bn(cout, cout, 3)
            self.skip = nn.Identity() if stride == 1 and cin == cout else conv_bn(cin, cout, 1, stride)

        def forward(self, x):
            return F.relu(self.conv2(F.relu(self.conv1(x))) + self.skip(x))

    class ResNetSmall(nn.Layer):
        def __init__(self):
            super().__init__()
            self.stem = conv_bn(3, 16, 3)
            self.block1, self.block2 = BasicBlock(16, 16, 1), BasicBlock(16, 32, 2)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            h = self.block2(self.block1(F.relu(self.stem(x))))  # 32x8x8
            return self.fc(paddle.reshape(F.adaptive_avg_pool2d(h, 1), [-1, 32]))

    class TransformerLayer(nn.Layer):
        def __init__(self, dropout=0.1, seq_len=16, vocab=100, d_model=32, heads=4, d_ff=64):
            super().__init__()
            self.seq_len, self.heads, self.dk, self.dropout = seq_len, heads, d_model // heads, dropout
            # Parameters are registered in the static builder's creation order (state_dict() order).
            self.position = self.create_parameter([seq_len, d_model],
                                                  default_initializer=nn.initializer.Normal(std=0.02))
            self.embedding = nn.Embedding(vocab, d_model)
            # No key bias, as in the static builder (it would get an exactly-zero gradient).
            self.q, self.k, self.v = (nn.Linear(d_model, d_model), nn.Linear(d_model, d_model, bias_attr=False),
                                      nn.Linear(d_model, d_model))
            self.out, self.norm1 = nn.Linear(d_model, d_model), nn.LayerNorm(d_model)
            self.ff1, self.norm2, self.ff2 = nn.Linear(d_model, d_ff), nn.LayerNorm(d_model), nn.Linear(d_ff, d_model)
            self.fc = nn.Linear(d_model, 10)

        def split_heads(self, v):  # [B, S, D] -> [B, H, S, dk]
            return paddle.transpose(paddle.reshape(v, [-1, self.seq_len, self.heads, self.dk]), [0, 2, 1, 3])

        def forward(self, tokens):
            x = self.embedding(tokens) + self.position                            # [B, S, D]
            q, k, v = self.split_heads(self.q(x)), self.split_heads(self.k(x)), self.split_heads(self.v(x))
            scores = paddle.matmul(q, k, transpose_y=True) / math.sqrt(self.dk)
            context = paddle.transpose(paddle.matmul(F.softmax(scores, axis=-1), v), [0, 2, 1, 3])
            context = paddle.reshape(context, [-1, self.seq_len, x.shape[-1]])
            x = self.norm1(x + F.dropout(self.out(context), self.dropout, training=self.training))
            ffn = F.dropout(F.gelu(self.ff1(x)), self.dropout, training=self.training)  # exact (erf) GELU
            x = self.norm2(x + self.ff2(ffn))
            return self.fc(paddle.mean(x, axis=1))

    _check(name)
    classes = {"mnist_mlp": MnistMLP, "lenet": LeNet, "resnet_small": ResNetSmall,
               "transformer_layer": TransformerLayer}
    return classes[name](**model_kwargs)


def paddle_loss(logits, y):
    import paddle
    import paddle.nn.functional as F

    return paddle.mean(F.cross_entropy(logits, y))  # y: [batch, 1] int64, as the static programs
