"""Training data without network access.

``digits_as_mnist`` turns scikit-learn's bundled handwritten digits (1797
images of 8x8) into MNIST's layout: each pixel scaled 3x to 24x24, centred in
28x28, values in [0, 1]. ``load_mnist_idx`` reads the standard MNIST IDX files.
"""
from __future__ import annotations

import gzip
import os
import struct

import numpy as np

from ..errors import ProgramFileError

_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def load_idx(path: str) -> np.ndarray:
    """Reads one IDX file (optionally gzipped); errors name the file."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ProgramFileError(f"{path}: cannot read IDX file: {e.strerror or e}") from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise ProgramFileError(f"{path}: not an IDX file (bad magic number)")
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ProgramFileError(f"{path}: truncated IDX header")
    shape = struct.unpack(f">{ndim}I", data[4:header])
    dtype = np.dtype(_IDX_DTYPES[data[2]])
    count = int(np.prod(shape)) if shape else 1
    if len(data) - header < count * dtype.itemsize:
        raise ProgramFileError(f"{path}: truncated IDX data: expected {count} items of shape {shape}")
    return np.frombuffer(data, dtype=dtype, count=count, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def load_mnist_idx(images_path: str, labels_path: str) -> tuple[np.ndarray, np.ndarray]:
    images = load_idx(images_path)
    labels = load_idx(labels_path)
    if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
        raise ProgramFileError(f"{images_path}, {labels_path}: expected images [N, rows, cols] and labels [N], "
                               f"got {list(images.shape)} and {list(labels.shape)}")
    x = images.reshape(images.shape[0], -1).astype(np.float32) / 255.0
    return x, labels.astype(np.int64).reshape(-1, 1)


def digits_as_mnist() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images.astype(np.float32) / 16.0           # 8x8, values 0..16
    big = np.kron(images, np.ones((1, 3, 3), dtype=np.float32))  # 24x24
    padded = np.zeros((images.shape[0], 28, 28), dtype=np.float32)
    padded[:, 2:26, 2:26] = big
    return padded.reshape(-1, 784), digits.target.astype(np.int64).reshape(-1, 1)


def shard(x: np.ndarray, y: np.ndarray, batch: int, rank: int, nranks: int, step: int):
    """This rank's part of global batch ``step`` (global batch = nranks * batch), cycling over the data."""
    global_batch = batch * nranks
    start = (step * global_batch) % (len(x) - global_batch + 1)
    lo = start + rank * batch
    return x[lo:lo + batch], y[lo:lo + batch]


def default_data(path: str | None = None):
    """MNIST IDX files in ``path`` (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz]) or the digits."""
    if not path:
        return digits_as_mnist()
    for suffix in ("", ".gz"):
        images = os.path.join(path, "train-images-idx3-ubyte" + suffix)
        labels = os.path.join(path, "train-labels-idx1-ubyte" + suffix)
        if os.path.exists(images) and os.path.exists(labels):
            return load_mnist_idx(images, labels)
    raise ProgramFileError(f"{path}: no train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz] here")
