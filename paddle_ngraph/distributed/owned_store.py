"""The Paddle ``TCPStore`` objects this package opens, closed before the interpreter exits.

Rank 0's ``TCPStore`` serves its clients from a libuv loop on a C++ thread. A store still open
when the process exits keeps that thread serving while the C++ runtime destroys the libraries'
static objects; a client that disconnects at that moment (another rank ending at the same time)
makes the thread log and free into state already destroyed. Rank 0 then aborted or segfaulted
after its work was done and saved (under ``paddle.distributed.launch``: 4 of about 20 runs of a
test of three short jobs). Closing the store while the process is whole stops and joins that
thread first.

Every store is held through one :class:`OwnedStore`, so that dropping it at exit drops the last
reference to Paddle's object (its destructor does the stopping). Whatever uses a store from a
thread of its own stops that thread first (``before_closing``): the stall watchdog's threads.
"""
from __future__ import annotations

import atexit
import threading

_OPEN: list["OwnedStore"] = []
_BEFORE_CLOSING: list = []
_LOCK = threading.Lock()


class StoreClosed(RuntimeError):
    """A call on a store this process has closed (it is exiting)."""


class OwnedStore:
    """A Paddle ``TCPStore`` (``set``, ``get``, ``add``, ``wait``, ...) that ``close`` releases."""

    def __init__(self, store, what: str):
        self._store = store
        self.what = what
        with _LOCK:
            _OPEN.append(self)

    def __getattr__(self, name):
        store = self.__dict__.get("_store")
        if store is None:
            raise StoreClosed(f"{self.what}: closed (the process is exiting)")
        return getattr(store, name)

    @property
    def closed(self) -> bool:
        return self._store is None

    def close(self):
        """Drops Paddle's object: on rank 0 its destructor stops and joins the server's thread."""
        self._store = None
        with _LOCK:
            if self in _OPEN:
                _OPEN.remove(self)


def before_closing(stop) -> None:
    """``stop()`` runs at exit before the stores close: for threads that call a store."""
    _BEFORE_CLOSING.append(stop)


@atexit.register
def close_all():
    for stop in list(_BEFORE_CLOSING):
        stop()
    with _LOCK:
        stores = list(_OPEN)
    for store in reversed(stores):
        store.close()
