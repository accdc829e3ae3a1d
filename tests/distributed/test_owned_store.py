"""The TCPStores the package opens are closed before the interpreter exits (distributed/owned_store.py)."""
import os
import socket

import pytest

from paddle_ngraph.distributed import owned_store
from paddle_ngraph.distributed.owned_store import OwnedStore, StoreClosed


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def no_other_stores(monkeypatch):
    """The module's registries, empty for the test (stores other tests left open stay untouched)."""
    monkeypatch.setattr(owned_store, "_OPEN", [])
    monkeypatch.setattr(owned_store, "_BEFORE_CLOSING", [])


def test_closing_rank_zeros_store_stops_its_server_thread(no_other_stores):
    """The server's libuv loop runs on a thread of its own: closing the store joins it, so that it
    no longer runs when the process's static objects are destroyed at exit."""
    from paddle.base import core

    before = _threads()
    store = OwnedStore(core.TCPStore("127.0.0.1", _free_port(), True, 1, 10), "the test's store")
    store.set("key", "value")
    assert bytes(store.get("key")) == b"value"
    assert _threads() > before
    store.close()
    assert _threads() == before
    assert store.closed and owned_store._OPEN == []


def test_a_closed_store_says_what_it_was(no_other_stores):
    from paddle.base import core

    store = OwnedStore(core.TCPStore("127.0.0.1", _free_port(), True, 1, 10), "rank 0: the test's store at here")
    store.close()
    with pytest.raises(StoreClosed, match="rank 0: the test's store at here: closed"):
        store.add("key", 1)


def test_at_exit_the_threads_using_a_store_stop_before_it_closes(no_other_stores):
    from paddle.base import core

    store = OwnedStore(core.TCPStore("127.0.0.1", _free_port(), True, 1, 10), "the test's store")
    seen = []
    owned_store.before_closing(lambda: seen.append(store.add("stopped", 1)))
    owned_store.close_all()
    assert seen == [1], "the hook ran with the store still open"
    assert store.closed
