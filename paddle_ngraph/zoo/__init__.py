"""Reference models and data, shared by the demo, the tests and the benchmarks."""
from .data import digits_as_mnist, load_idx, load_mnist_idx, shard
from .models import MODELS, build_program, make_batch, make_optimizer

__all__ = ["digits_as_mnist", "load_idx", "load_mnist_idx", "shard", "MODELS", "build_program", "make_batch", "make_optimizer"]
