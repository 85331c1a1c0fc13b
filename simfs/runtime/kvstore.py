"""Key-value stores in virtual time, as c10d's stores behave (torch/csrc/distributed/c10d/Store.hpp,
TCPStore.cpp): the host keeps them, rank processes reach them by name (simfs/rank/c10d/store.py). A
read of a key not yet set waits in the scheduler until another rank sets it or the store's timeout
passes; a store served by a node's process (a TCPStore's server) is gone with that node. Nothing
here knows torch: keys are strings, values bytes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import StoreGone
from ..port.storeops import compare_and_swap
from ..tasks.waitqueue import WaitQueue
from .scheduler import Scheduler
from .wakeup import Wakeups


class KVStore:
    """One store: its keys, and the ranks waiting for keys to appear."""

    def __init__(self, name: str, sched: Scheduler, home: int | None, wakeups: Wakeups | None = None) -> None:
        self.name = name
        self._wakeups = wakeups
        self.home = home  # the node whose process serves it (None: no node's, e.g. the launcher's)
        self.data: dict[str, bytes] = {}
        self.clients = 0
        self.gone = False  # its server's node crashed
        self.changed = WaitQueue(f"store {name}")
        self._sched = sched

    def _set(self, key: str, value: bytes) -> None:
        self.data[key] = bytes(value)
        self._sched.notify_all(self.changed)

    def set(self, key: str, value: bytes) -> None:
        self._set(key, value)

    def get(self, key: str, timeout: float | None, most: int | None = None) -> bytes | None:
        """The value, once some rank set it (None: not within ``timeout``); ValueError when it is
        longer than ``most`` bytes, what its reader takes (a receive into a tensor of its own size:
        the sender does not choose what the receiver holds)."""
        if most is not None and (type(most) is not int or most < 0):
            raise ValueError(f"simfs: a store read of at most {most!r} bytes")
        values = self.multi_get([key], timeout)
        if values is not None and most is not None and len(values[0]) > most:
            raise ValueError(f"simfs: {key!r} holds a message of {len(values[0]):,} bytes, more than the {most:,} "
                             "its receiver takes (gloo: the sizes of a send and its receive must match)")
        return None if values is None else values[0]

    def add(self, key: str, amount: int) -> int:
        value = int(self.data.get(key, b"0")) + int(amount)
        self._set(key, str(value).encode())
        return value

    def append(self, key: str, value: bytes) -> None:
        self._set(key, self.data.get(key, b"") + bytes(value))

    def compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        swap, value = compare_and_swap(self.data.get(key), bytes(expected), bytes(desired))
        if swap:
            self._set(key, value)
        return value

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)

    def wait(self, keys: list[str], timeout: float | None) -> bool:
        """Block until every key is set (False: ``timeout`` virtual seconds passed first; its
        server's crash: the client's connection is reset at once)."""
        blocked = self._until_set(keys, timeout)
        if blocked is None:
            return False
        self._woken(blocked)
        return True

    def _until_set(self, keys: list[str], timeout: float | None) -> bool | None:
        """Wait until every key is set: whether the caller had to block (None: timed out)."""
        deadline = None if timeout is None else self._sched.now + timeout
        blocked = False
        while not self.check(keys):
            left = None if deadline is None else deadline - self._sched.now
            if left is not None and left <= 0:
                return None
            self._sched.block(self.changed, left)
            blocked = True
            if self.gone:
                raise StoreGone(f"the server of store {self.name} is gone")
        return blocked

    def _woken(self, blocked: bool) -> None:
        """A client that waited for a key runs again after its own wake-up (runtime/wakeup.py)."""
        if blocked and self._wakeups is not None:
            self._sched.elapse(self._wakeups.delay())

    def delete_key(self, key: str) -> bool:
        return self.data.pop(key, None) is not None

    def num_keys(self) -> int:
        return len(self.data)

    def multi_get(self, keys: list[str], timeout: float | None) -> list[bytes] | None:
        """The values as the server sent them, once all were set (None: not within ``timeout``)."""
        blocked = self._until_set(keys, timeout)
        if blocked is None:
            return None
        values = [self.data[k] for k in keys]
        self._woken(blocked)
        return values

    def multi_set(self, keys: list[str], values: list[bytes]) -> None:
        for key, value in zip(keys, values):
            self.data[key] = bytes(value)
        self._sched.notify_all(self.changed)


_EPHEMERAL = 32768  # Documentation/networking/ip-sysctl.rst: ip_local_port_range defaults to 32768 60999
OPS = ("set", "get", "add", "append", "compare_set", "check", "wait", "delete_key", "num_keys", "multi_get",
       "multi_set")


class Stores:
    """The stores of one run, by name; a served one (a TCPStore's) also by its address."""

    def __init__(self, sched: Scheduler, latency: float, node_alive: Callable[[int], bool],
                 wakeups: Wakeups | None = None) -> None:
        self._sched = sched
        self._wakeups = wakeups
        self._latency = latency  # a store round trip costs what a collective's latency does
        self._alive = node_alive
        self._stores: dict[str, KVStore] = {}
        self._listening = WaitQueue("store servers")

    def shared(self, name: str) -> KVStore:
        """A store every rank that names it shares, with no server to lose."""
        store = self._stores.get(name)
        if store is None:
            store = self._stores[name] = KVStore(name, self._sched, None, self._wakeups)
        return store

    def listen(self, node: int, port: int) -> str | None:
        """A server on ``node`` at ``port`` (0: the lowest free one of Linux's ephemeral range,
        ip_local_port_range 32768-60999): its address "node<N>:<port>", or None if another
        server of a live node listens there (EADDRINUSE)."""
        if port == 0:
            port = next(p for p in range(_EPHEMERAL, 61000) if self._served(f"node{node}:{p}") is None)
        address = f"node{node}:{port}"
        if self._served(address) is not None:
            return None
        self._stores[address] = KVStore(address, self._sched, node, self._wakeups)
        self._sched.notify_all(self._listening)
        return address

    def connect(self, address: str, timeout: float | None) -> bool:
        """A client's connection: it retries until a server listens (False: none within
        ``timeout``), as TCPStore's client does."""
        deadline = None if timeout is None else self._sched.now + timeout
        while self._served(address) is None:
            left = None if deadline is None else deadline - self._sched.now
            if left is not None and left <= 0:
                return False
            self._sched.block(self._listening, left)
        store = self._stores[address]
        store.clients += 1
        self._sched.notify_all(store.changed)
        return True

    def wait_for_clients(self, address: str, count: int, timeout: float | None) -> bool:
        store = self.served(address)
        deadline = None if timeout is None else self._sched.now + timeout
        while store.clients < count:
            left = None if deadline is None else deadline - self._sched.now
            if left is not None and left <= 0:
                return False
            self._sched.block(store.changed, left)
        return True

    def node_crashed(self, node: int) -> None:
        """The stores ``node`` served are gone: clients waiting on them learn it now."""
        for store in self._stores.values():
            if store.home == node and not store.gone:
                store.gone = True
                self._sched.notify_all(store.changed)

    def _served(self, address: str) -> KVStore | None:
        store = self._stores.get(address)
        if store is None or (store.home is not None and not self._alive(store.home)):
            return None
        return store

    def served(self, name: str) -> KVStore:
        store = self._served(name)
        if store is None:
            raise StoreGone(f"the server of store {name} is gone")
        return store

    def call(self, name: str, op: str, args: list[Any]) -> Any:
        """One request of a client to store ``name``."""
        if op not in OPS:
            raise ValueError(f"simfs: no store operation {op!r}")
        store = self.served(name)
        self._sched.elapse(self._latency)
        return getattr(store, op)(*args)
