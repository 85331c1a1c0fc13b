"""c10d's stores inside a rank process, simulated: ``HostStore`` is a ``torch.distributed.Store``
whose keys live in the host (runtime/kvstore.py), where a read of a missing key waits in virtual
time; ``TCPStore`` is one served by the process that made it with ``is_master`` (its node's crash
takes it down, its clients retry until a server listens); ``FileStore`` keeps its keys in a file of
the simulated filesystem, read and appended under flock(2) as c10d's FileStore.cpp does, so the
mount's semantics apply to it. No real socket, file or name lookup is ever made."""

from __future__ import annotations

import fcntl
import os
import struct
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Store

from ...errors import StoreGone
from ...port import schema
from ...port.storeops import compare_and_swap
from .host import Asks

HOST_STORE = "simfs/p2p"  # the shared store that carries point-to-point messages
DEFAULT_TIMEOUT = timedelta(seconds=300)  # c10d's kDefaultTimeout (torch/csrc/distributed/c10d/Store.hpp)


def _bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


_DIMS = struct.Struct("!B")  # a tensor message's header: its dtype's name, its number of dimensions, each one's size


def _header(tensor: torch.Tensor) -> bytes:
    name = str(tensor.dtype).removeprefix("torch.").encode()
    return (_DIMS.pack(len(name)) + name + _DIMS.pack(tensor.dim())
            + struct.pack(f"!{tensor.dim()}q", *tensor.shape))


def encode_tensor(tensor: torch.Tensor) -> bytes:
    """A tensor as bytes another rank process decodes (the host never loads them): its dtype's
    name, its shape and its bytes, as plain data (no pickle: a message runs no code)."""
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return _header(tensor) + data


def encoded_size(tensor: torch.Tensor) -> int:
    """The length of ``tensor``'s message: what a receive into it takes, and no more."""
    return len(_header(tensor)) + tensor.numel() * tensor.element_size()


def decode_tensor(data: bytes) -> torch.Tensor:
    """The tensor of a message encode_tensor made; ValueError for anything else."""
    try:
        size = data[0]
        kind = getattr(torch, data[1:1 + size].decode(), None)
        dims = data[1 + size]
        shape = struct.unpack_from(f"!{dims}q", data, 2 + size)
    except (IndexError, UnicodeDecodeError, struct.error):
        raise ValueError("simfs: a point-to-point message that is not a tensor") from None
    if not isinstance(kind, torch.dtype):
        raise ValueError("simfs: a point-to-point message that is not a tensor")
    raw = data[2 + size + 8 * dims:]
    if not raw:
        return torch.empty(shape, dtype=kind)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(kind).reshape(shape)


class _KeyValueStore(Store):
    """The Store interface over one primitive, ``op(name, *args)``, that a subclass gives: where
    its keys live."""

    def __init__(self, op: Callable[..., Any]) -> None:
        super().__init__()
        self._op = op

    def _seconds(self, timeout: timedelta | None = None) -> float:
        default: timedelta = self.timeout  # type: ignore[attr-defined]  # a property of c10d's Store, unstubbed
        return float((timeout or default).total_seconds())

    def _timed_out(self, keys: list[str], timeout: timedelta | None = None) -> dist.DistStoreError:
        ms = int(self._seconds(timeout) * 1000)
        return dist.DistStoreError(f"wait timeout after {ms}ms, keys: {', '.join(keys)} (simfs: virtual time)")

    def set(self, key: str, value: Any) -> None:
        self._op("set", key, _bytes(value))

    def get(self, key: str) -> bytes:
        value: bytes | None = self._op("get", key, self._seconds())
        if value is None:
            raise self._timed_out([key])
        return value

    def add(self, key: str, amount: int) -> int:
        total: int = self._op("add", key, int(amount))
        return total

    def append(self, key: str, value: Any) -> None:
        self._op("append", key, _bytes(value))

    def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
        now: bytes = self._op("compare_set", key, _bytes(expected), _bytes(desired))
        return now

    def check(self, keys: list[str]) -> bool:
        present: bool = self._op("check", list(keys))
        return present

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        if not self._op("wait", list(keys), self._seconds(timeout)):
            raise self._timed_out(list(keys), timeout)

    def delete_key(self, key: str) -> bool:
        deleted: bool = self._op("delete_key", key)
        return deleted

    def num_keys(self) -> int:
        count: int = self._op("num_keys")
        return count

    def multi_get(self, keys: list[str]) -> list[bytes]:
        values: list[bytes] | None = self._op("multi_get", list(keys), self._seconds())
        if values is None:
            raise self._timed_out(list(keys))
        return values

    def multi_set(self, keys: list[str], values: list[Any]) -> None:
        self._op("multi_set", list(keys), [_bytes(v) for v in values])

    def has_extended_api(self) -> bool:
        return True


class HostStore(_KeyValueStore):
    """A store in the host: every rank process that names it shares its keys."""

    def __init__(self, host: Asks, name: str, timeout: timedelta = DEFAULT_TIMEOUT) -> None:
        super().__init__(self._ask_host)
        self._host = host
        self._name = name
        self.set_timeout(timeout)

    def _ask_host(self, op: str, *args: Any) -> Any:
        try:
            return self._host.ask(schema.StoreOp(self._name, op, list(args)))
        except StoreGone as gone:
            raise dist.DistNetworkError(f"Connection reset by peer ({gone}; simfs: its node crashed)") from None


_LOCAL_NAMES = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "")


def tcp_store_class(rank: Callable[[], tuple[Asks, str]]) -> type[HostStore]:
    """``torch.distributed.TCPStore`` for the rank ``rank()`` names (what it asks, and its
    hostname): made with ``is_master``, it serves the store from that rank's node; otherwise it
    connects to the server at ``host_name:port``."""

    class TCPStore(HostStore):
        def __init__(self, host_name: str, port: int, world_size: int | None = None, is_master: bool = False,
                     timeout: timedelta = DEFAULT_TIMEOUT, wait_for_workers: bool = True,
                     multi_tenant: bool = False, master_listen_fd: int | None = None,
                     use_libuv: bool = True) -> None:
            host, own_hostname = rank()
            node = own_hostname if host_name in _LOCAL_NAMES else str(host_name)
            self.host = str(host_name)
            self.libuvBackend = bool(use_libuv)
            if is_master:
                listening: str | None = host.ask(schema.StoreListen(int(port)))
                if listening is None:
                    raise dist.DistNetworkError(
                        f"The server socket has failed to listen on any local network address. port: {port}, "
                        "useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use (simfs)")
                node, _, chosen = listening.rpartition(":")
                port = int(chosen)
            self.port = int(port)
            address = f"{node}:{port}"
            super().__init__(host, address, timeout)
            seconds = timeout.total_seconds()
            if not host.ask(schema.StoreConnect(address, seconds)):
                raise dist.DistStoreError(
                    f"The client socket has timed out after {int(seconds * 1000)}ms while trying to connect to "
                    f"({host_name}, {port}) (simfs: no server listens there in virtual time)")
            if is_master and wait_for_workers and world_size and \
                    not host.ask(schema.StoreClients(address, int(world_size), seconds)):
                raise dist.DistStoreError(f"Timed out after {int(seconds * 1000)}ms waiting for "
                                              f"{world_size} workers to connect to the store at {address} (simfs)")

    return TCPStore


_SIZE = struct.Struct("<Q")  # FileStore.cpp writes each string as a size_t length and its bytes
POLL = 0.010  # FileStore.cpp: a wait for a key sleeps 10 ms between looks


class FileStore(_KeyValueStore):
    """c10d's FileStore on the rank's (simulated) files: an append-only log of key/value records,
    read and written under an exclusive flock(2); a wait polls every 10 ms of virtual time."""

    def __init__(self, file_name: str, world_size: int = -1) -> None:
        super().__init__(self._on_file)
        self.path = os.fspath(file_name)
        self.num_workers = world_size
        self._cache: dict[str, bytes] = {}
        self._offset = 0
        self.set_timeout(DEFAULT_TIMEOUT)
        self._locked(lambda f: None)  # creates the file, as the constructor of FileStore.cpp does

    def _locked(self, body: Callable[[Any], Any]) -> Any:
        with open(self.path, "a+b") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                self._refresh(f)
                return body(f)
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def _refresh(self, f: Any) -> None:
        f.seek(self._offset)
        data = f.read()
        at = 0
        while at + _SIZE.size <= len(data):
            (klen,) = _SIZE.unpack_from(data, at)
            kend = at + _SIZE.size + klen
            if kend + _SIZE.size > len(data):
                break
            (vlen,) = _SIZE.unpack_from(data, kend)
            end = kend + _SIZE.size + vlen
            if end > len(data):
                break
            key = data[at + _SIZE.size:kend].decode()
            value = data[kend + _SIZE.size:end]
            if value == _DELETED:
                self._cache.pop(key, None)
            else:
                self._cache[key] = value
            at = end
        self._offset += at

    def _write(self, f: Any, key: str, value: bytes) -> None:
        encoded = key.encode()
        f.write(_SIZE.pack(len(encoded)) + encoded + _SIZE.pack(len(value)) + value)
        f.flush()
        self._offset = f.tell()
        if value == _DELETED:
            self._cache.pop(key, None)
        else:
            self._cache[key] = value

    def _on_file(self, op: str, *args: Any) -> Any:
        if op in ("get", "wait", "multi_get"):
            keys = [args[0]] if op == "get" else list(args[0])
            if not self._poll(keys, float(args[1])):
                return False if op == "wait" else None
            values = self._locked(lambda f: [self._cache[k] for k in keys])
            return True if op == "wait" else values[0] if op == "get" else values
        return self._locked(lambda f: self._apply(f, op, args))

    def _poll(self, keys: list[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self._locked(lambda f: all(k in self._cache for k in keys)):
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL)
        return True

    def _apply(self, f: Any, op: str, args: tuple[Any, ...]) -> Any:
        cache = self._cache
        if op == "set":
            self._write(f, args[0], args[1])
            return None
        if op == "add":
            total = int(cache.get(args[0], b"0")) + args[1]
            self._write(f, args[0], str(total).encode())
            return total
        if op == "append":
            self._write(f, args[0], cache.get(args[0], b"") + args[1])
            return None
        if op == "compare_set":
            swap, value = compare_and_swap(cache.get(args[0]), args[1], args[2])
            if swap:
                self._write(f, args[0], value)
            return value
        if op == "check":
            return all(k in cache for k in args[0])
        if op == "delete_key":
            present = args[0] in cache
            if present:
                self._write(f, args[0], _DELETED)
            return present
        if op == "num_keys":
            return len(cache)
        if op == "multi_set":
            for key, value in zip(args[0], args[1]):
                self._write(f, key, value)
            return None
        raise ValueError(f"simfs: no store operation {op!r}")


_DELETED = b"\x00simfs-deleted\x00"  # a record that removes its key
