"""IR op types, one module per op family. Importing this package registers them all.

The families carry the same names as the converters (``frontend/converters/``) and the kernels of
both backends (``backends/interpreter/kernels/``, ``native/cpu/kernels/``). Every op class is
re-exported here, so that users write ``ops.Add`` whatever family defines it. ``checks`` and
``precision`` are shared pieces, not families.
"""
from . import tensor, shape, indexing, elementwise, activation, matmul, conv, pool, norm, loss  # noqa: F401
from . import reduction, optimizer, collective  # noqa: F401
from .tensor import *  # noqa: F401,F403
from .shape import *  # noqa: F401,F403
from .indexing import *  # noqa: F401,F403
from .elementwise import *  # noqa: F401,F403
from .activation import *  # noqa: F401,F403
from .matmul import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .pool import *  # noqa: F401,F403
from .norm import *  # noqa: F401,F403
from .loss import *  # noqa: F401,F403
from .reduction import *  # noqa: F401,F403
from .optimizer import *  # noqa: F401,F403
from .collective import *  # noqa: F401,F403
