"""``simfs.isolated``: run a function (typically many cluster runs) in a forked child process that
the caller supervises. Host state stays untouched by construction, and a child that stops making
progress for ``watchdog`` seconds - even inside C code that holds the GIL, which no thread of the
same process can interrupt - is killed and reported with every thread's stack. The child confines
itself through the kernel (simfs.confinement.confine) before ``fn`` runs: what rank code does past
simfs's Python-level routing is refused, not performed, and what this kernel cannot refuse is
named in a warning."""

from __future__ import annotations

import ctypes
import faulthandler
import mmap
import os
import signal
import struct
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from . import _real, checks, plaindata, relay
from .confinement import Confinement, announce, confine, descriptors, kernel, mappings, prepared_descriptors
from .errors import SimfsError
from .relay import Relay, Shown
from .tasks.process import named_tempdir

_BEAT = struct.Struct("d")
_in_child = [False]  # this process is an isolated child (what it starts inherits it)
# what this isolated child reads beyond simfs.confinement.readable (a job file's directory): a child
# it starts reads it too (the kernel would refuse more than the outer child's anyway)
_readable_here: list[tuple[str, ...]] = [()]
_STACKS = signal.SIGUSR2
_GRACE = 2.0  # seconds a stuck child gets to write its stacks before it is killed
MAX_STACKS = 1 << 20  # bytes of a faulthandler's file the host reads: every thread's stack fits


class Stalled(SimfsError):
    """The isolated child made no progress for longer than its watchdog; ``stacks`` holds every
    thread's stack as faulthandler wrote it just before the child was killed."""

    def __init__(self, message: str, stacks: str) -> None:
        super().__init__(f"{message}\n{stacks}")
        self.stacks = stacks

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return type(self), (str(self).partition("\n")[0], self.stacks)


class ChildFailed(SimfsError):
    """The isolated child raised something that cannot cross the process boundary, or died."""


def isolated(fn: Callable[..., Any], *args: Any, watchdog: float = 60.0, readable: Iterable[str] = (),
             processes: bool = True, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a forked child confined by the kernel: its return value, or its
    exception raised here, as plain data and simfs's records (simfs.plaindata: what the child
    made runs no code here; a value of another class arrives as a Foreign naming it, an exception
    of another class as a RankError, or a ChildFailed with its traceback when ``fn`` raised it).
    Raises Stalled if the child makes no progress for ``watchdog`` real seconds; Ctrl-C stops the
    child and raises KeyboardInterrupt. Warns once (ConfinementWarning) when the kernel cannot
    refuse everything. The child reads only what simfs.confinement.readable lists, and what lies
    beneath ``readable`` (a job file's directory) and the enclosing isolated child's ``readable``;
    with ``processes=False`` it starts no process (no rank process to fork: greenlet ranks, an
    import), as a rank process does not."""
    checks.number("isolated", "watchdog", watchdog, 0.0, 86400.0, lo_open=True, unit=" real seconds")
    readable = (*_readable_here[0], *readable)
    beat = mmap.mmap(-1, _BEAT.size)  # shared with the child: its last sign of life
    _BEAT.pack_into(beat, 0, _real.monotonic())
    with os.fdopen(os.memfd_create("simfs-isolated-stacks"), "w+b") as stacks:  # no file in TMPDIR
        read_end, write_end = os.pipe()
        (out, out_w), (err, err_w) = relay.pipe(), relay.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            _child(fn, args, kwargs, beat, stacks.fileno(), write_end, (out_w, err_w), parent, tuple(readable),
                   "child" if processes else "rank")
        for fd in (write_end, out_w, err_w):
            os.close(fd)
        _own_group(pid)
        console = Relay()
        console.add(out, Shown("stdout"))
        console.add(err, Shown("stderr"))
        try:
            payload = _supervise(pid, read_end, beat, stacks, watchdog, console)
        finally:
            os.close(read_end)
            console.finish(_GRACE)
            beat.close()
    try:
        kind, value, confinement = plaindata.load(payload, records=True)
    except Exception as exc:  # noqa: BLE001 - a forged message: nothing of it is built here
        raise ChildFailed(f"the isolated child sent something the host does not load ({exc}): what ran in the "
                          "child never runs here") from None
    if confinement is not None:
        announce(confinement)
    if kind == "error":
        raise value
    return value


def in_isolated_child() -> bool:
    """Whether this process is simfs.isolated's child (or was forked from one): disposable and
    confined, so what runs here cannot change the caller."""
    return _in_child[0]


def _own_group(pid: int) -> None:
    """Make ``pid`` lead a process group of its own (both parent and child ask, so that it holds
    whichever runs first): the supervisor kills that group, the child and all it started."""
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass  # the child did it already and confined itself (EACCES or EPERM), or it is gone (ESRCH)


def _child(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], beat: mmap.mmap,
           stacks_fd: int, out: int, console: tuple[int, int], parent: int, readable: tuple[str, ...],
           policy: str) -> None:
    _in_child[0] = True
    _readable_here[0] = readable
    code = 0
    confinement: Confinement | None = None
    try:
        _own_group(0)
        kernel.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL)  # the caller gone, the child goes too
        if os.getppid() != parent:
            os._exit(0)
        descriptors.keep_only((out, stacks_fd, *prepared_descriptors()), *console)
        mappings.own_shared(keep=(_address(beat),))  # the caller's shared memory: the child's own copy
        faulthandler.register(_STACKS, file=os.fdopen(os.dup(stacks_fd), "w"), all_threads=True)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            # before any thread starts: the kernel confines the calling thread and what it starts later;
            # the child writes only to descriptors it already holds (the pipe, the stacks file, stdout)
            confinement = confine(kind=policy, extra_readable=readable)
            # a confined child writes no file, and tempfile.gettempdir() tries to write one in each
            # candidate: the one the environment names (dill, which datasets installs and torch imports
            # where it is installed, asks at import)
            tempfile.tempdir = tempfile.tempdir or named_tempdir(os.environ, os.path.isdir)
            threading.Thread(target=_heartbeat, args=(beat,), daemon=True, name="simfs-heartbeat").start()
            result: tuple[str, Any] = ("value", fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
            result = ("error", exc)
        payload = _pickled(result, confinement)
        view = memoryview(payload)
        while view:
            view = view[os.write(out, view):]
    except BaseException:  # noqa: BLE001 - the child must never return into the parent's code
        traceback.print_exc()
        code = 70
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _pickled(result: tuple[str, Any], confinement: Confinement | None) -> bytes:
    """(kind, value, confinement) for the parent, as plain data and simfs's records (a value of
    another class arrives as its stand-in: simfs.plaindata); None: the child could not confine
    itself."""
    kind, value = result
    if kind == "error" and not plaindata.loadable(type(value)):
        value = ChildFailed(f"the isolated call raised:\n{''.join(traceback.format_exception(value))}")
    try:
        return plaindata.dumps((kind, value, confinement))
    except Exception as exc:  # noqa: BLE001 - an unpicklable value or exception is described instead
        what = "".join(traceback.format_exception(value)) if kind == "error" else repr(value)[:2000]
        which = "exception" if kind == "error" else "result"
        failed = ChildFailed(f"the isolated call's {which} cannot be sent back ({exc}):\n{what}")
        return plaindata.dumps(("error", failed, confinement))


def _address(beat: mmap.mmap) -> int:
    """Where the heartbeat is mapped (the one mapping the child shares with its parent)."""
    view = ctypes.c_char.from_buffer(beat)
    try:
        return ctypes.addressof(view)
    finally:
        del view


def _heartbeat(beat: mmap.mmap) -> None:
    """A thread that can run only while no one holds the GIL for long: its beat is the sign of
    life the parent watches."""
    while True:
        _BEAT.pack_into(beat, 0, _real.monotonic())
        _real.sleep(0.1)


def _supervise(pid: int, fd: int, beat: mmap.mmap, stacks: Any, watchdog: float, console: Relay) -> bytes:
    chunks: list[bytes] = []
    started = _real.monotonic()
    try:
        while True:
            ready = _real.readable([fd, *console.fds], 0.1)
            for output in ready:
                console.pump(output)
            if fd in ready:
                data = os.read(fd, 1 << 20)
                if not data:
                    break
                chunks.append(data)
                continue
            # never earlier than the start: a beat the child has not written yet reads as 0
            silent = _real.monotonic() - max(_BEAT.unpack_from(beat, 0)[0], started)
            if silent > watchdog:
                raise Stalled(f"the isolated child made no progress for {silent:.1f}s (watchdog {watchdog:g}s): "
                              "a rank holds the GIL in C code, or simfs itself hangs; its threads were:",
                              _stacks_of(pid, stacks))
    except KeyboardInterrupt:
        interrupted = _after_interrupt(pid, fd, console)  # the child was interrupted too: its partial result
        _kill(pid)
        if interrupted is not None:
            return interrupted
        raise
    except BaseException:
        _kill(pid)
        raise
    _, status = _end(pid)
    if not chunks:
        raise ChildFailed(f"the isolated child died without a result (wait status {status})")
    return b"".join(chunks)


def _after_interrupt(pid: int, fd: int, console: Relay) -> bytes | None:
    """Ctrl-C: the child stops its ranks and sends what it has (a simfs.Interrupted carrying the
    partial result), or is killed after a grace period."""
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return None
    chunks: list[bytes] = []
    deadline = _real.monotonic() + 5.0
    while _real.monotonic() < deadline:
        ready = _real.readable([fd, *console.fds], 0.1)
        for output in ready:
            console.pump(output)
        if fd in ready:
            data = os.read(fd, 1 << 20)
            if not data:
                return b"".join(chunks) or None
            chunks.append(data)
    return None


def _stacks_of(pid: int, stacks: Any) -> str:
    """Ask the child's faulthandler for every thread's stack (it writes them even while the GIL
    is held) and read them once they stop growing."""
    if not ask_for_stacks(pid, _STACKS, stacks.fileno()):
        return "(the child was already gone)"
    return read_stacks(stacks.fileno())


def read_stacks(fd: int) -> str:
    """What a faulthandler wrote to ``fd``: its first MAX_STACKS bytes, whatever size the file claims
    (the process that wrote it may have grown it, sparse, to any size)."""
    size = _real.fstat(fd).st_size
    if not size:
        return "(no stacks were written)"
    text = _real.pread(fd, min(size, MAX_STACKS), 0).decode(errors="replace")
    if size > MAX_STACKS:
        text += f"\n... (the file claims {size} bytes; the first {MAX_STACKS} are shown)"
    return text


def ask_for_stacks(pid: int, signum: int, fd: int, grace: float = _GRACE) -> bool:
    """Send ``signum`` (faulthandler.register'ed in ``pid`` to write every thread's stack to
    ``fd``, even while the GIL is held) and wait until the file stops growing, at most ``grace``
    seconds. False: the process was already gone."""
    try:
        _real.kill(pid, signum)
    except ProcessLookupError:
        return False
    deadline, size = _real.monotonic() + grace, -1
    while _real.monotonic() < deadline:
        _real.sleep(0.05)
        now = _real.fstat(fd).st_size
        if now and now == size:
            break
        size = now
    return True


def _end(pid: int) -> tuple[int, int]:
    """Wait for the child to exit, kill what it started (its process group, while the child's
    unreaped pid still names it), then reap the child: its pid and wait status."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return os.waitpid(pid, 0)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        _end(pid)
    except (ProcessLookupError, ChildProcessError):
        pass


plaindata.register(Stalled, ChildFailed)
