"""Rank code that attacks the process boundary as an attacker with only job code would (issue 29):
raw system calls through ctypes (rank processes let native code run: the kernel confines them),
simfs's own importable modules, and the descriptors a rank holds. Each returns what it got, so
the test can say what held; the host around it is checked by tests/test_sandbox.py."""

from __future__ import annotations

import ctypes
import errno
import gc
import os
import pickle
import time
from typing import Any

CANARY = os.environ.get("SIMFS_TEST_CANARY", "/nonexistent/canary")


def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _result(value: int) -> int | str:
    """A system call's result, or the name of its errno."""
    return value if value >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


def _link() -> Any:
    from simfs.rank import main as rank

    return next(o for o in gc.get_objects() if isinstance(o, rank.Link))


def _tid() -> int:
    from simfs.tasks.task import current_task

    task = current_task()
    assert task is not None
    return task.tid


# -- class 1: what the host decodes ------------------------------------------------------------------
def returns_an_object_array() -> str:
    """Forges the answer "done" as a pickle holding a numpy array of object dtype, the format the
    host took before: an object array's elements are pointers the host follows."""
    import numpy

    from simfs.port import framing as wire

    forged = pickle.dumps(numpy.array([1, 2], dtype=object))
    wire.send(_link().fd, pickle.dumps(("done", _tid(), forged)))
    time.sleep(60)
    return "unreached"


def forges_an_object_array_in_msgpack() -> str:
    """The same in the host's present format: a tagged array whose dtype names objects."""
    import msgspec

    from simfs import plaindata
    from simfs.port import framing as wire
    from simfs.port import schema

    array = msgspec.msgpack.Ext(plaindata.NDARRAY, msgspec.msgpack.encode(["|O", [1], b"\0" * 8]))
    wire.send(_link().fd, schema.encode(schema.Done(_tid(), msgspec.msgpack.encode(array))))
    time.sleep(60)
    return "unreached"


# -- class 3: other processes' limits ----------------------------------------------------------------
RLIMIT_CPU, RLIMIT_NOFILE, RLIMIT_AS = 0, 7, 9
NR_PRLIMIT64 = {"x86_64": 302, "aarch64": 261}[os.uname().machine]


def _prlimit(pid: int, resource: int, soft: int, hard: int) -> int | str:
    limit = (ctypes.c_uint64 * 2)(soft, hard)
    return _result(_libc().syscall(NR_PRLIMIT64, pid, resource, ctypes.byref(limit), None))


def _read(path: str) -> str:
    """A real file, read below Python (a rank's open() is simulated)."""
    libc = _libc()
    fd = libc.open(path.encode(), os.O_RDONLY)
    if fd < 0:
        return ""
    buffer = ctypes.create_string_buffer(4096)
    got = libc.read(fd, buffer, 4096)
    libc.close(fd)
    return buffer.raw[:max(got, 0)].decode()


def limits_others() -> dict[str, Any]:
    """Rank 0 lowers the host's limits and rank 1's address space; rank 1 reports its own."""
    libc = _libc()
    rank = int(os.environ["RANK"])
    if rank == 0:
        host, me = libc.getppid(), libc.getpid()
        children = {int(p) for p in _read(f"/proc/{host}/task/{host}/children").split()}
        sibling = min(children - {me}) if children - {me} else me + 1
        return {"host cpu": _prlimit(host, RLIMIT_CPU, 1, 1), "host files": _prlimit(host, RLIMIT_NOFILE, 16, 16),
                "sibling memory": _prlimit(sibling, RLIMIT_AS, 1 << 20, 1 << 20), "own": _prlimit(0, RLIMIT_CPU,
                                                                                                  3600, 3600)}
    time.sleep(1)  # a simulated second: rank 0 has had its turn
    limit = (ctypes.c_uint64 * 2)()
    libc.syscall(NR_PRLIMIT64, 0, RLIMIT_AS, None, ctypes.byref(limit))
    return {"own memory": int(limit[0])}


# -- class 4: the console ----------------------------------------------------------------------------
TIOCSTI = 0x5412


def types_into_the_terminal() -> list[int | str]:
    """Pushes a command into the input queue of the terminal its descriptors 0-2 name."""
    libc = _libc()
    return [_result(libc.ioctl(fd, TIOCSTI, ctypes.c_char_p(b"x"))) for fd in (0, 1, 2)]


def rewrites_the_hosts_stdout() -> list[int | str]:
    """Writes over what the host printed before it (stdout is a file) and cuts it short."""
    libc = _libc()
    text = b"FORGED"
    return [_result(libc.pwrite(1, text, len(text), ctypes.c_long(0))), _result(libc.ftruncate(1, ctypes.c_long(3)))]


def reads_the_hosts_stdin() -> str:
    buffer = ctypes.create_string_buffer(64)
    got = _libc().read(0, buffer, 64)
    return buffer.raw[:got].decode() if got > 0 else f"read returned {got}"


def raises_escape_sequences() -> None:
    raise ValueError("\x1b]0;pwned\x07\x1b[2J\x1b]52;c;cHduZWQ=\x07[bold]markup[/bold]")


# -- class 5: the greenlet child's descriptors ---------------------------------------------------------
def writes_inherited_descriptors() -> list[int]:
    """Greenlet ranks share the child's process: writes to every descriptor 3-63 it inherited
    (simfs's own real write, below its interception), as a job could."""
    from simfs import _real

    written = []
    for fd in range(3, 64):
        try:
            _real.write(fd, b"FORGED by a rank\n")
            written.append(fd)
        except OSError:
            pass
    return written


# -- state that outlives a run: the caller's shared memory, its process group ------------------------------
HOST_MAPS: list[Any] = []  # the caller's shared mappings (mmap.mmap), set by the host before its run


def writes_the_callers_shared_memory() -> list[bytes]:
    """Writes over each of the caller's shared mappings it inherited (its Python objects are the
    rank's copy-on-write; their memory was shared): what each held before."""
    held = []
    for shared in HOST_MAPS:
        held.append(bytes(shared[:6]))
        shared[:6] = b"FORGED"
    return held


def its_session_and_group() -> dict[str, int]:
    """The real session and process group of the process that runs the rank (the C library's
    answer, below simfs's simulated ones)."""
    libc = _libc()
    return {"pid": libc.getpid(), "sid": libc.getsid(0), "pgid": libc.getpgid(0)}


# -- class 6: kernel objects Landlock does not see -------------------------------------------------------
NR = {"x86_64": {"add_key": 248, "shmget": 29, "msgget": 68, "semget": 64, "flock": 73, "mq_open": 240},
      "aarch64": {"add_key": 217, "shmget": 194, "msgget": 186, "semget": 190, "flock": 32, "mq_open": 180}}[
    os.uname().machine]
IPC_PRIVATE, IPC_CREAT = 0, 0o1000
KEY_SPEC_USER_KEYRING = -4


def makes_kernel_objects(path: str, fifo: str) -> dict[str, Any]:
    libc = _libc()
    payload = b"secret"
    out: dict[str, Any] = {
        "key": _result(libc.syscall(NR["add_key"], b"user", b"simfs-sandbox-test", payload, len(payload),
                                    KEY_SPEC_USER_KEYRING)),
        "shm": _result(libc.syscall(NR["shmget"], IPC_PRIVATE, 4096, IPC_CREAT | 0o600)),
        "msg": _result(libc.syscall(NR["msgget"], IPC_PRIVATE, IPC_CREAT | 0o600)),
        "sem": _result(libc.syscall(NR["semget"], IPC_PRIVATE, 1, IPC_CREAT | 0o600)),
        "mq": _result(libc.syscall(NR["mq_open"], b"simfs-sandbox-test", os.O_CREAT | os.O_RDWR, 0o600, None)),
        "fifo": _result(libc.open(fifo.encode(), os.O_RDONLY | os.O_NONBLOCK)),
    }
    fd = libc.open(path.encode(), os.O_RDONLY)
    out["open"] = _result(fd)
    out["flock"] = _result(libc.syscall(NR["flock"], fd, 2 | 4)) if fd >= 0 else "not opened"  # LOCK_EX | LOCK_NB
    return out


# -- class 7: peers' outboxes ---------------------------------------------------------------------------
def tampers_with_outboxes(rounds: int) -> dict[str, Any]:
    """The last rank reopens its peers' read-only outbox descriptors read-write and writes over
    what they posted before each all-reduce; the others all-reduce ones."""
    import torch
    import torch.distributed as dist

    from simfs.runtime.carrier import outbox as box_module

    box = next(o for o in gc.get_objects() if isinstance(o, box_module.Outbox))
    libc = _libc()
    attacker = dist.get_rank() == dist.get_world_size() - 1
    tampering: list[Any] = []
    sums = []
    for _ in range(rounds):
        if attacker:
            for peer, fd in box._readable.items():
                if peer == box.rank:
                    continue
                writable = libc.open(f"/proc/self/fd/{fd}".encode(), os.O_RDWR)
                if writable < 0:
                    tampering.append(("open", _result(writable)))
                    continue
                garbage = torch.full((64,), 1000.0).numpy().tobytes()
                tampering.append(("write", _result(libc.pwrite(writable, garbage, len(garbage), ctypes.c_long(0)))))
                tampering.append(("truncate", _result(libc.ftruncate(writable, ctypes.c_long(0)))))
                libc.close(writable)
        t = torch.ones(64)
        dist.all_reduce(t)
        sums.append(sorted(set(t.tolist())))
    return {"sums": sums, "tampering": sorted(set(map(tuple, tampering)))}


# -- class 8: descendants -------------------------------------------------------------------------------
def forks_sleepers(count: int) -> list[int | str]:
    """Forks ``count`` children below Python (libc's fork); each sleeps a minute."""
    libc = _libc()
    got = []
    for _ in range(count):
        pid = libc.fork()
        if pid == 0:
            libc.sleep(60)
            libc._exit(0)
        got.append(_result(pid))
    return got


def takes_memory(mib: int) -> int:
    """Rank 1 allocates ``mib`` MiB, 64 MiB at a time; rank 0 a little."""
    blocks = [bytearray(64 << 20) for _ in range(mib // 64 if os.environ["RANK"] == "1" else 1)]
    return len(blocks)


def runs_another_program() -> str:
    """Replaces itself with a program that outlives its socket (exec closes it: close-on-exec)."""
    libc = _libc()
    argv = (ctypes.c_char_p * 3)(b"/bin/sleep", b"30", None)
    libc.execv(b"/bin/sleep", argv)
    return f"exec failed: {_result(-1)}"


# -- class 9: forged requests -----------------------------------------------------------------------------
def forges_requests() -> dict[str, Any]:
    from simfs.port import schema

    link = _link()
    out: dict[str, Any] = {}
    for name, call in {"note": lambda: link.ask(schema.Note("noted", "/y", "mine")),
                       "elapse nan": lambda: link.ask(schema.Elapse(float("nan"))),
                       "elapse inf": lambda: link.ask(schema.Elapse(float("inf"))),
                       "block nan": lambda: link.ask(schema.Block(1, "forever", float("nan")))}.items():
        try:
            out[name] = repr(call())
        except Exception as exc:  # noqa: BLE001 - the host's answer, described
            out[name] = type(exc).__name__
    out["time"] = time.time()
    return out


def forges_a_note_as_rank_0() -> str:
    """A trace note with a rank and a node of its choosing: fields the schema's Note does not have."""
    import msgspec


    link = _link()
    link.tell(msgspec.msgpack.encode(["Call", _tid(), "job.py:1 in forge", ["Note", "forged", "/x", "mine", 0, 0]]))
    link.answer(_tid())
    return "answered"


def grows_its_stacks_file_and_dies() -> None:
    """Grows the memfd its faulthandler writes to, sparse, to 256 MiB, then crashes: the host
    reads that file for the crash's stacks."""
    libc = _libc()
    for fd in range(3, 64):
        target = ctypes.create_string_buffer(256)
        if libc.readlink(f"/proc/self/fd/{fd}".encode(), target, 255) > 0 and b"stacks" in target.value:
            libc.ftruncate(fd, ctypes.c_long(256 << 20))
    ctypes.string_at(0)  # SIGSEGV
