"""A key-value store every rank can reach outside the transport: the stall watchdog's side channel.

A rank stuck inside MPI_Allreduce or a oneCCL collective cannot be asked anything
through that transport, so ranks publish their progress to a Paddle ``TCPStore``
hosted by rank 0 (its server runs on a C++ thread, so it answers even while rank
0's Python and compute threads are blocked).

- Under ``paddle.distributed.launch`` the ccl transport already hosts one at the
  first trainer endpoint: it is reused.
- Otherwise (mpirun), rank 0 opens one on a free port and sends the address to the
  others over MPI, at transpile time, when every rank is known to be there. The host
  is 127.0.0.1 when all ranks share a node, else rank 0's address as seen by the
  hostname resolver, or ``PADDLE_NGRAPH_STORE_HOST`` when set.

Every call goes through :class:`SideChannel`, which serializes the calls of the
watchdog's threads on the one client connection and turns Paddle's errors into
``TransportError`` naming rank 0 as the store's host.
"""
from __future__ import annotations

import os
import socket
import threading

from ..errors import TransportError
from .owned_store import OwnedStore


class SideChannel:
    def __init__(self, store, rank: int, size: int):
        self.store = store
        self.rank = rank
        self.size = size
        self._lock = threading.Lock()

    def _call(self, what: str, fn, *args):
        with self._lock:
            try:
                return fn(*args)
            except Exception as e:  # Paddle raises ValueError/RuntimeError for socket failures
                raise TransportError(f"rank {self.rank}: the side channel (TCPStore on rank 0) failed during "
                                     f"{what}: {str(e).splitlines()[0]}") from None

    def set(self, key: str, value: str):
        self._call(f"set('{key}')", self.store.set, key, value)

    def get(self, key: str) -> str:
        """Blocks until ``key`` exists: only for keys known to be set (see ``exists``)."""
        value = self._call(f"get('{key}')", self.store.get, key)
        return bytes(value).decode() if not isinstance(value, str) else value

    def add(self, key: str, amount: int) -> int:
        return int(self._call(f"add('{key}')", self.store.add, key, amount))

    def exists(self, counter_key: str) -> bool:
        # TCPStore.get waits for a missing key; add(key, 0) reads a counter without waiting.
        return self.add(counter_key, 0) > 0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _store_host(single_node: bool) -> str:
    if os.environ.get("PADDLE_NGRAPH_STORE_HOST"):
        return os.environ["PADDLE_NGRAPH_STORE_HOST"]
    if single_node:
        return "127.0.0.1"
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return socket.gethostname()


def open_side_channel(transport, timeout_s: float) -> SideChannel:
    """Collective: every rank of ``transport`` calls it at the same point (transpile)."""
    from paddle.base import core

    store = getattr(transport, "_store", None)
    if store is not None:
        return SideChannel(store, transport.rank, transport.size)
    from .mpi import import_mpi

    if "OMPI_COMM_WORLD_SIZE" not in os.environ:
        raise TransportError(f"rank {transport.rank}: no side channel for the stall watchdog: the {transport.name} "
                             "transport has no store and the job was not started by mpirun")
    comm = import_mpi().COMM_WORLD
    single_node = os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") == os.environ.get("OMPI_COMM_WORLD_SIZE")
    timeout = int(max(10, timeout_s))
    if transport.rank != 0:
        address = comm.bcast(None, root=0)
        if isinstance(address, str):
            raise TransportError(f"rank {transport.rank}: no side channel for the stall watchdog: rank 0 {address}")
        host, port = address
        store = OwnedStore(core.TCPStore(host, port, False, transport.size, timeout),
                           f"rank {transport.rank}: the side channel's TCPStore at {host}:{port}")
        return SideChannel(store, transport.rank, transport.size)
    host, port = _store_host(single_node), _free_port()
    try:
        server = _start_server(core, host, port, transport.size, timeout)
    except TransportError as e:
        comm.bcast(f"could not open it: {e}", root=0)
        raise
    comm.bcast((host, port), root=0)
    store = OwnedStore(server(), f"rank 0: the side channel's TCPStore at {host}:{port}")
    return SideChannel(store, transport.rank, transport.size)


def _start_server(core, host: str, port: int, size: int, timeout: int):
    """Starts rank 0's TCPStore on a thread and returns once it accepts connections; the returned
    function waits for its constructor, which returns when every rank has connected. The others
    connect only after this: a client that finds no server yet retries after about 3 s (Paddle's
    retry delay), which was most of transpile's time under mpirun."""
    import threading
    import time

    made: dict = {}

    def serve():
        try:
            made["store"] = core.TCPStore(host, port, True, size, timeout)
        except Exception as e:  # noqa: BLE001 - reported on the calling thread
            made["error"] = e

    thread = threading.Thread(target=serve, name="pdng-side-channel", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while "error" not in made:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise TransportError(f"rank 0: the side channel's TCPStore did not listen on {host}:{port} "
                                     f"within {timeout} s") from None
            time.sleep(0.002)
    if "error" in made:
        raise TransportError(f"rank 0: the side channel's TCPStore on {host}:{port} failed: "
                             f"{str(made['error']).splitlines()[0]}")

    def wait():
        thread.join()
        if "error" in made:
            raise TransportError(f"rank 0: the side channel's TCPStore on {host}:{port} failed: "
                                 f"{str(made['error']).splitlines()[0]}")
        return made["store"]
    return wait
