"""Transports come from one registry (distributed/registry.py): the config key's choices, the names
make_transport builds and the transport auto picks for a launcher all follow what the transport
modules register. Single-process."""
import pytest

from paddle_ngraph import config
from paddle_ngraph.distributed import NullTransport, launcher, make_transport, registry
from paddle_ngraph.distributed.launcher import LaunchInfo
from paddle_ngraph.distributed.registry import TransportSpec, register_transport


def test_the_config_key_accepts_exactly_the_registered_names():
    assert config.TRANSPORTS == registry.transport_names() == ("auto", "mpi", "ccl", "mlsl", "null")
    assert registry.described_transport_names() == "auto, mpi, ccl (alias mlsl), null"
    assert {spec.name: spec.auto_for for spec in registry.transport_specs()} == {
        "mpi": ("mpirun",), "ccl": ("paddle",), "null": ("none",)}
    assert registry.find_transport("mlsl") is registry.find_transport("ccl")
    assert registry.find_transport("tcp") is None


class LoopbackTransport(NullTransport):
    name = "LOOPBACK"

    def __init__(self, info, timeout_s):
        self.info, self.timeout_s = info, timeout_s


@pytest.fixture
def loopback(monkeypatch):
    """A transport registered for the test only: the registry and the launcher table restored after."""
    monkeypatch.setattr(registry, "_SPECS", dict(registry._SPECS))
    monkeypatch.setattr(launcher, "TRANSPORT_OF_LAUNCHER", dict(launcher.TRANSPORT_OF_LAUNCHER))
    return register_transport(TransportSpec("loopback", LoopbackTransport, aliases=("lo",), auto_for=("paddle",)))


def test_a_registered_transport_is_built_by_name_alias_and_auto(loopback):
    info = LaunchInfo("paddle", 1, 2)
    built = make_transport("LO", timeout_s=7.5, info=info)
    assert isinstance(built, LoopbackTransport) and built.info is info and built.timeout_s == 7.5
    assert isinstance(make_transport("auto", info=info), LoopbackTransport)  # auto follows its auto_for
    assert info.auto_transport() == "loopback"
    assert LaunchInfo("paddle", 0, 1).auto_transport() == "null"  # one process needs no communication
    assert registry.transport_names() == ("auto", "mpi", "ccl", "mlsl", "loopback", "lo", "null")
    assert built.native_link() is None  # only through Python, unless the transport says otherwise


def test_a_name_is_registered_once(loopback):
    with pytest.raises(ValueError, match="transport name 'lo' is taken by the 'loopback' transport"):
        register_transport(TransportSpec("other", LoopbackTransport, aliases=("lo",)))
    with pytest.raises(ValueError, match="transport name 'mlsl' is taken by the 'ccl' transport"):
        register_transport(TransportSpec("mlsl", LoopbackTransport))
