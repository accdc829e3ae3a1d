"""IR op types, one module per family. Importing this package registers them all."""
from . import core, elementwise, matmul, reduction, nn, optimizer, collective  # noqa: F401
from .core import *  # noqa: F401,F403
from .elementwise import *  # noqa: F401,F403
from .matmul import *  # noqa: F401,F403
from .reduction import *  # noqa: F401,F403
from .nn import *  # noqa: F401,F403
from .optimizer import *  # noqa: F401,F403
from .collective import *  # noqa: F401,F403
from . import nn_extra  # noqa: F401
from .nn_extra import *  # noqa: F401,F403
from . import tensor_ops  # noqa: F401
from .tensor_ops import *  # noqa: F401,F403
