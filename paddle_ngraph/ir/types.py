"""Element types and tensor types of the IR.

Shapes are tuples of ints; -1 marks a dimension known only at run time
(typically the batch dimension of a feed).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

DYNAMIC = -1


class DType(enum.Enum):
    bool = "bool"
    uint8 = "uint8"
    int8 = "int8"
    int16 = "int16"
    int32 = "int32"
    int64 = "int64"
    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"
    float64 = "float64"

    @property
    def numpy(self) -> np.dtype:
        # bfloat16 has no NumPy type: it is carried as its raw 16 bits.
        return np.dtype(np.uint16) if self is DType.bfloat16 else np.dtype(self.value)

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.float16, DType.bfloat16, DType.float32, DType.float64)

    @property
    def is_integer(self) -> bool:
        return self in (DType.uint8, DType.int8, DType.int16, DType.int32, DType.int64)

    @classmethod
    def from_numpy(cls, dtype) -> "DType":
        return cls(np.dtype(dtype).name)

    @classmethod
    def parse(cls, value) -> "DType":
        if isinstance(value, DType):
            return value
        if isinstance(value, str):
            return cls(value)
        return cls.from_numpy(value)


# Paddle's phi::DataType enumeration (paddle/phi/common/data_type.h), as the
# engine operator reports input dtypes.
PADDLE_DATATYPE = {
    1: DType.bool, 2: DType.uint8, 3: DType.int8, 5: DType.int16, 7: DType.int32,
    9: DType.int64, 10: DType.float32, 11: DType.float64, 15: DType.float16,
    16: DType.bfloat16,
}
PADDLE_DATATYPE_CODE = {v: k for k, v in PADDLE_DATATYPE.items()}


@dataclass(frozen=True)
class TensorType:
    dtype: DType
    shape: tuple

    def __post_init__(self):
        object.__setattr__(self, "dtype", DType.parse(self.dtype))
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(d >= 0 for d in self.shape)

    def num_elements(self) -> int:
        """Number of elements, counting each dynamic dimension as 1."""
        n = 1
        for d in self.shape:
            n *= max(d, 1)
        return n

    def nbytes(self) -> int:
        return self.num_elements() * self.dtype.itemsize

    def __str__(self) -> str:
        dims = "x".join("?" if d < 0 else str(d) for d in self.shape)
        return f"{self.dtype.value}[{dims}]"


def dims_compatible(a: int, b: int) -> bool:
    return a == b or a < 0 or b < 0


def broadcast_shapes(a: tuple, b: tuple) -> tuple | None:
    """NumPy broadcasting of two shapes with dynamic dims; None if incompatible."""
    out = []
    for i in range(max(len(a), len(b))):
        da = a[len(a) - 1 - i] if i < len(a) else 1
        db = b[len(b) - 1 - i] if i < len(b) else 1
        if da == 1:
            out.append(db)
        elif db == 1:
            out.append(da)
        elif dims_compatible(da, db):
            out.append(da if da >= 0 else db)
        else:
            return None
    return tuple(reversed(out))


def normalize_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis
