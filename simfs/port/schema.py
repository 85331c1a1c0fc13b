"""Every request a rank makes of the simulated kernel, and every answer, declared once as msgspec
Structs. The kernel serves each request by its type from one handler table; a greenlet rank hands
the request to that table as it is, a rank process sends it over its socket (framing.py) inside a
``Call`` that names the asking thread and where rank code asked. What a rank process sends is
decoded strictly, its free-form fields as simfs.plaindata (no pickle), every text bounded; a
message names no rank: the host knows the sender from the socket it came on. The host's answers
to a rank process are messages of this schema too."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, TypeVar, cast

import msgspec

from .. import plaindata

Name = Annotated[str, msgspec.Meta(max_length=256)]  # an operation, a group, a type's name, a "file:line in fn"
Text = Annotated[str, msgspec.Meta(max_length=1 << 20)]  # a path, an error's message, a traceback
Library = Literal["numpy", "torch"]  # what rank processes are forked with where the host has it (preload.WITH)
MAX_TEXT = 1 << 20
Seconds = float | None  # a timeout in virtual seconds (None: none)

# the system calls a rank may ask for: the public methods of the kernel's Syscalls
# (simfs/runtime/syscalls; tests/test_port_schema.py holds the two lists equal)
CallName = Literal[
    "access", "chdir", "chmod", "chown", "close", "close_held", "descriptors", "dup", "dup2", "exchange", "fchmod",
    "fchown", "fcntl", "fdatasync", "fstat", "fstatvfs", "fsync", "ftruncate", "getcwd", "getcwdb", "holds", "isatty",
    "kind_of", "link", "listdir", "lock", "lseek", "lstat", "mkdir", "open", "open_io", "pread", "pwrite", "read",
    "readlink", "remove", "rename", "replace", "rmdir", "scandir", "stat", "statvfs", "symlink", "sync", "truncate",
    "unlink", "utime", "write",
]
Disposal = Literal["default", "ignore", "handler"]


class _Message(msgspec.Struct, array_like=True, frozen=True, forbid_unknown_fields=True, tag=True):
    """A message of the port: its tag is its class's name; ``PLAIN`` lists the fields that hold
    free-form plain data (simfs.plaindata)."""

    PLAIN: ClassVar[tuple[str, ...]] = ()


class Request(_Message, frozen=True):
    """What a rank asks of the kernel."""


# -- the rank's process: system calls, time, waits, threads, signals, exit ---------------------------
class SystemCall(Request, frozen=True):
    """One of the process's system calls, with the arguments os gave it (``importing``: made by
    the rank's import system; ``umask``: the process's, which the rank sets itself)."""

    PLAIN = ("args", "kwargs")
    name: CallName
    args: list[Any]
    kwargs: dict[str, Any]
    importing: bool = False
    umask: int = 0o022


class CheckDescriptor(Request, frozen=True):
    """Raise EBADF unless ``fd`` is one of the process's simulated descriptors."""

    fd: int


class Elapse(Request, frozen=True):
    """The rank spent ``seconds`` of virtual time (computing, sleeping without a wake-up)."""

    seconds: float


class Block(Request, frozen=True):
    """Wait on the rank's wait queue ``queue`` (its own number for it) until notified, or
    ``timeout``; answered whether it was notified."""

    queue: int
    what: Text  # what it waits for, as the report shows it (a thread's name is the job's)
    timeout: Seconds


class NotifyAll(Request, frozen=True):
    """Wake every waiter of the rank's wait queue ``queue``."""

    queue: int


class Note(Request, frozen=True):
    """A line of the run's trace, in the asking rank's name (``path`` as the rank named it)."""

    PLAIN = ("path",)
    op: Name
    path: Any
    outcome: Text


class Warned(Request, frozen=True):
    """A warning the asking rank showed (what Python's warnings would write to its stderr), kept
    with its output."""

    category: Name
    message: Text
    filename: Text
    lineno: int


class Alive(Request, frozen=True):
    """Whether process ``pid`` of the rank's node is alive."""

    pid: int


class Signal(Request, frozen=True):
    """Send ``signum`` to process ``pid`` of the rank's node."""

    pid: int
    signum: int
    sender: Name


class Disposition(Request, frozen=True):
    """The rank set what ``signum`` does to it."""

    signum: int
    kind: Disposal


class Exit(Request, frozen=True):
    """The process ends (``outcome``: None, or the exception that ends it): never answered."""

    PLAIN = ("outcome",)
    outcome: Any


class Spawn(Request, frozen=True):
    """A new thread of the rank, named ``name``: answered its task's id."""

    name: Text
    daemon: bool


class BusyThreads(Request, frozen=True):
    """The rank's threads that keep its process alive and still make progress (their ids)."""


class Progress(Request, frozen=True):
    """Nothing to do: a sign of progress for the watchdog (a long import reads the real disk)."""


class Imported(Request, frozen=True):
    """The asking rank imported this library itself (its process was forked without it): the host
    preloads it for its later runs (runtime/carrier/preload.py)."""

    library: Library


# -- torch.distributed: the simulated world's groups and collectives ---------------------------------
class DistInit(Request, frozen=True):
    """init_process_group of the rank."""

    timeout: Seconds


class DistDestroy(Request, frozen=True):
    """destroy_process_group of the rank."""


class DistNewGroup(Request, frozen=True):
    """new_group of the rank (``ranks`` None: all of them): answered the group's (name, ranks,
    timeout), or None when the rank is not a member."""

    ranks: list[int] | None
    timeout: Seconds


class DistGroup(Request, frozen=True):
    """A process group c10d made in the rank (every member makes it, under one name)."""

    name: Name
    ranks: list[int]
    timeout: float


class Collective(Request, frozen=True):
    """The rank's next collective of group ``group`` (``root``: the group rank of a rooted one's
    root, -1 for none): answered the payloads that reached the rank, None for the others."""

    PLAIN = ("payload",)
    group: Name
    kind: Name
    payload: Any
    timeout: Seconds
    nbytes: int
    root: int = -1


# -- the stores torch's rendezvous and c10d use --------------------------------------------------------
class StoreShared(Request, frozen=True):
    """Make (or find) the run's shared store ``name``."""

    name: Text


class StoreListen(Request, frozen=True):
    """Serve a TCPStore on ``port`` of the rank's node (0: any): answered its "node:port", or
    None when the port is taken."""

    port: int


class StoreConnect(Request, frozen=True):
    """Connect to the store served at ``address``: answered whether it came within ``timeout``."""

    address: Text
    timeout: Seconds


class StoreClients(Request, frozen=True):
    """Wait until ``count`` clients connected to the store at ``address``: answered whether
    they did within ``timeout``."""

    address: Text
    count: int
    timeout: Seconds


class StoreOp(Request, frozen=True):
    """Operation ``op`` (set, get, add, wait, ...) on store ``store``."""

    PLAIN = ("args",)
    store: Text
    op: Name
    args: list[Any]


# -- what a new rank process is made from ------------------------------------------------------------
class RankSpec(_Message, frozen=True):
    """A rank process's start, sent with the request for it: its process's state (as the host's
    Process had it: environment, working directory, the seed its generators derive from), the
    machine's clock and the real paths its code reads, and its torch.distributed world. The
    process builds its side from this alone: no object of the host's crosses."""

    PLAIN = ("env", "cwd", "seed", "readable")
    tid: int  # its main thread's task
    rank: int
    local_rank: int
    node: int
    world_size: int
    local_world_size: int
    pid: int
    hostname: Name
    env: Any
    cwd: Any
    umask: int
    seed: Any
    run: int
    epoch: float  # the wall time of virtual time 0
    run_start: float
    readable: Any  # the real paths any code of a rank reads (simfs/hostpaths.py), as str
    dist_native: bool  # torch's c10d runs in the rank (simfs/rank/c10d), not simfs's torch.distributed
    dist_initialized: bool
    world_ranks: list[int]
    world_name: Name
    world_timeout: float


# -- a rank process's other words to the host ----------------------------------------------------------
class Hello(_Message, frozen=True):
    """A new rank process confined itself: what the kernel refuses it and what not."""

    landlock_abi: int
    confined: dict[Name, Name]
    unconfined: dict[Name, Text]


class Call(_Message, frozen=True):
    """A request of the rank's thread ``tid``, made at ``where`` in rank code."""

    tid: int
    where: Text
    request: AnyRequest


class Done(_Message, frozen=True):
    """Thread ``tid`` returned ``value`` (plaindata, records allowed)."""

    tid: int
    value: bytes


class Raised(_Message, frozen=True):
    """Thread ``tid`` raised: the exception as plaindata (None: it does not cross), its type's
    name, its text, the rank's traceback and where it was raised."""

    tid: int
    error: bytes | None
    type_name: Name
    text: Text
    trace: Text
    where: Text


class Unsendable(_Message, frozen=True):
    """Thread ``tid`` returned a value that cannot cross (its type's name, why)."""

    tid: int
    type_name: Name
    why: Text


# -- the host's answers to a rank process --------------------------------------------------------------
class _Reply(_Message, frozen=True):
    """An answer for thread ``tid``, with the virtual time and the signals delivered to the rank
    meanwhile (for its main thread's handlers)."""

    tid: int
    now: float
    signals: list[int]


class Answer(_Reply, frozen=True):
    """The request's value (plain data); the first answer of a thread is its first turn."""

    value: Any


class Failed(_Reply, frozen=True):
    """The request raised ``error`` (plain data: the exception, rebuilt in the rank)."""

    error: Any


class Native(_Reply, frozen=True):
    """The call is on the real machine (the Python installation, what the import system reads):
    the rank makes it itself, under its confinement."""


AnyRequest = (SystemCall | CheckDescriptor | Elapse | Block | NotifyAll | Note | Warned | Alive | Signal | Disposition
              | Exit | Spawn | BusyThreads | Progress | Imported | DistInit | DistDestroy | DistNewGroup | DistGroup
              | Collective | StoreShared | StoreListen | StoreConnect | StoreClients | StoreOp)
REQUESTS: tuple[type[Request], ...] = AnyRequest.__args__
FromRank = Hello | Call | Done | Raised | Unsendable
ToRank = Answer | Failed | Native

_encode = msgspec.msgpack.Encoder().encode
_from_rank = msgspec.msgpack.Decoder(FromRank, ext_hook=plaindata.ext_hook(records=False)).decode
_to_rank = msgspec.msgpack.Decoder(ToRank, ext_hook=plaindata.ext_hook(records=False)).decode
_spec = msgspec.msgpack.Decoder(RankSpec, ext_hook=plaindata.ext_hook(records=False)).decode
M = TypeVar("M", bound=_Message)


def _wired(message: M) -> M:
    """``message`` with its free-form fields as plain data (itself when they are already)."""
    changed = {}
    for name in message.PLAIN:
        value = getattr(message, name)
        wired = plaindata.wire(value)
        if wired is not value:
            changed[name] = wired
    return msgspec.structs.replace(message, **changed) if changed else message


def call(tid: int, where: str, request: Request) -> bytes:
    """A request of thread ``tid`` as the rank sends it."""
    return _encode(Call(tid, text(where), cast("AnyRequest", _wired(request))))


def spec(start: RankSpec) -> bytes:
    return _encode(_wired(start))


def decode_spec(data: bytes) -> RankSpec:
    return _spec(data)


def answer(tid: int, now: float, signals: list[int], value: Any) -> bytes:
    return _encode(Answer(tid, now, signals, plaindata.wire(value)))


def failed(tid: int, now: float, signals: list[int], error: BaseException) -> bytes:
    return _encode(Failed(tid, now, signals, plaindata.wire(error)))


def native(tid: int, now: float, signals: list[int]) -> bytes:
    return _encode(Native(tid, now, signals))


def encode(message: Hello | Done | Raised | Unsendable) -> bytes:
    return _encode(message)


def decode(data: bytes) -> FromRank:
    """A rank's message, or plaindata.Untrusted saying what is wrong with it."""
    try:
        message: FromRank = _from_rank(data)  # (typed, whichever msgspec release types its decoders)
        return message
    except plaindata.Untrusted:
        raise
    except (msgspec.DecodeError, ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:
        raise plaindata.Untrusted(f"a malformed message ({type(exc).__name__}: {exc})") from None


def decode_answer(data: bytes) -> ToRank:
    """The host's answer (trusted: the rank's own kernel sent it)."""
    answer: ToRank = _to_rank(data)
    return answer


def text(value: str, most: int = MAX_TEXT) -> str:
    """A text as a message carries it: at most ``most`` characters, valid UTF-8 (a character that
    is not, a surrogate of a name decoded with surrogateescape, written as its escape)."""
    if len(value) > most:
        value = value[:most - 40] + f"... ({len(value)} characters in all)"
    if not value.isascii():
        value = value.encode("utf-8", "backslashreplace").decode()
    return value
