"""``fleet.init`` with ``strategy.ngraph``: fleet's tensor-parallel layers also run eagerly on CPU.

Paddle's eager model-parallel ops fail on CPU (no kernels, gloo refuses calc-stream AllReduce);
``dygraph/eager_tensor_parallel.py`` has PyLayers that do the math in Paddle and the collectives
over the engine's transport. They are put in place when ``fleet.init`` builds the hybrid groups
under ``strategy.ngraph`` and taken out again when it runs without the flag, so Paddle's own eager
path is untouched otherwise. The transport is made on the first eager collective (every rank of the
group reaches it), configured by ``strategy.ngraph_configs`` as the engine's.
"""
from __future__ import annotations

from ..config import Config
from ..config_sources import resolve_config
from ..dygraph import eager_tensor_parallel
from ..dygraph.data_parallel import shared_transport
from ..ir.groups import RankLayout
from . import features


def transport_of(strategy):
    """``ranks -> the engine's transport among them``, the job's transport made on first use, with
    this rank's model- and data-parallel groups: some transports (oneCCL) make groups only together,
    on every rank, and every rank reaches its first eager collective at the same point of the
    model's first forward."""
    configs = features.merged_overrides(strategy)
    made = []  # the job's transport, once made (resolving the configuration once)

    def among(ranks):
        if not made:
            config = Config(**resolve_config(configs))
            transport = shared_transport(config)
            if transport.size > 1 and config.mp_degree > 1:
                layout = RankLayout(transport.size, transport.rank, config.mp_degree)
                transport.make_groups([layout.mp_group(), layout.dp_group()])
            made.append(transport)
        return made[0].group(ranks)

    return among


def follow(strategy) -> None:
    """Installs the eager versions for ``strategy.ngraph``, removes them otherwise."""
    if getattr(strategy, "ngraph", False):
        eager_tensor_parallel.install(transport_of(strategy))
    else:
        eager_tensor_parallel.uninstall()
