"""The data loaders: bundled digits in MNIST layout, and IDX files."""
import gzip
import struct

import numpy as np
import pytest

from paddle_ngraph.errors import ProgramFileError
from paddle_ngraph.zoo import digits_as_mnist, load_idx, load_mnist_idx, shard


def write_idx(path, array, code):
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    data = header + array.astype(array.dtype.newbyteorder(">")).tobytes()
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(data)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_round_trip(tmp_path, suffix):
    images = np.random.default_rng(0).integers(0, 256, (5, 28, 28)).astype(np.uint8)
    labels = np.array([3, 1, 4, 1, 5], dtype=np.uint8)
    write_idx(tmp_path / f"img{suffix}", images, 0x08)
    write_idx(tmp_path / f"lbl{suffix}", labels, 0x08)
    x, y = load_mnist_idx(str(tmp_path / f"img{suffix}"), str(tmp_path / f"lbl{suffix}"))
    assert x.shape == (5, 784) and x.dtype == np.float32
    np.testing.assert_allclose(x, images.reshape(5, -1) / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(y.reshape(-1), labels)
    floats = np.arange(6, dtype=np.float32).reshape(2, 3)
    write_idx(tmp_path / "f", floats, 0x0D)
    np.testing.assert_array_equal(load_idx(str(tmp_path / "f")), floats)


def test_idx_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x00\x00\x08\x03\x00\x00\x00\x05")
    with pytest.raises(ProgramFileError, match=str(bad)):
        load_idx(str(bad))
    bad.write_bytes(b"PK\x03\x04")
    with pytest.raises(ProgramFileError, match="magic"):
        load_idx(str(bad))


def test_digits_layout_and_shards():
    x, y = digits_as_mnist()
    assert x.shape == (1797, 784) and y.shape == (1797, 1) and 0 <= x.min() and x.max() <= 1
    a0, b0 = shard(x, y, 16, 0, 2, step=3)
    a1, b1 = shard(x, y, 16, 1, 2, step=3)
    whole, labels = shard(x, y, 32, 0, 1, step=3)
    np.testing.assert_array_equal(np.concatenate([a0, a1]), whole)
    np.testing.assert_array_equal(np.concatenate([b0, b1]), labels)
