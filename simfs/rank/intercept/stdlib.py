"""Standard-library pieces that reach the real machine underneath os: shutil's fast paths,
fcntl locks, subprocess and _posixsubprocess, ctypes' memory functions, faulthandler,
importlib.reload, logging handlers that hold real files, and gc.freeze/unfreeze (which act on
the host's objects)."""

from __future__ import annotations

import _posixshmem
import _posixsubprocess
import faulthandler
import fcntl
import gc
import importlib
import logging
import multiprocessing.process
import os
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from ...errors import BypassError
from ...tasks.process import FD_BASE
from ...tasks.task import Task
from . import audit
from .registry import host_calls, original, patch, patch_function, refusal


def _rmtree(task: Task, path: Any, ignore_errors: bool = False, onerror: Any = None, *,
            onexc: Any = None, dir_fd: Any = None) -> None:
    """shutil.rmtree over the simulated os calls (the fd-based variant needs dir_fd opens)."""

    def fail(func: Any, name: Any, exc: BaseException) -> None:
        if ignore_errors:
            return
        if onexc is not None:
            onexc(func, name, exc)
        elif onerror is not None:
            onerror(func, name, (type(exc), exc, exc.__traceback__))
        else:
            raise exc

    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise OSError("Cannot call rmtree on a symbolic link")
    except OSError as exc:
        fail(os.path.islink, path, exc)
        return
    try:
        entries = list(os.scandir(path))
    except OSError as exc:
        fail(os.scandir, path, exc)
        entries = []
    for entry in entries:
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        if is_dir:
            _rmtree(task, entry.path, ignore_errors, onerror, onexc=onexc)
            continue
        try:
            os.unlink(entry.path)
        except OSError as exc:
            fail(os.unlink, entry.path, exc)
    try:
        os.rmdir(path)
    except OSError as exc:
        fail(os.rmdir, path, exc)


def _no_sendfile(task: Task, fsrc: Any, fdst: Any) -> None:
    raise shutil._GiveupOnFastCopy()  # type: ignore[attr-defined]  # private: shutil then copies in Python


def _descriptor(fd: Any) -> int:
    return fd if isinstance(fd, int) else fd.fileno()


def _flock(task: Task, fd: Any, operation: int) -> None:
    if _descriptor(fd) < FD_BASE:
        original(fcntl, "flock")(fd, operation)
        return None
    task.context.sys.lock(fd, operation, posix=False)
    return None


def _lockf(task: Task, fd: Any, cmd: int, len: int = 0, start: int = 0, whence: int = 0) -> Any:
    if _descriptor(fd) < FD_BASE:
        return original(fcntl, "lockf")(fd, cmd, len, start, whence)
    task.context.sys.lock(fd, cmd, posix=True)
    return None


def _fcntl(task: Task, fd: Any, cmd: int, arg: Any = 0) -> Any:
    if _descriptor(fd) < FD_BASE:
        return original(fcntl, "fcntl")(fd, cmd, arg)
    return task.context.sys.fcntl(_descriptor(fd), cmd, arg)


def _ioctl(task: Task, fd: Any, *args: Any) -> Any:
    if _descriptor(fd) < FD_BASE:
        return original(fcntl, "ioctl")(fd, *args)
    raise BypassError("fcntl.ioctl", "ioctls on simulated files are not simulated")


def _popen_init(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
    """subprocess.Popen refuses inside a rank (however it was imported), before it makes any
    pipe: a real child process would read and write the real disk."""
    from .registry import current

    if current() is not None:
        raise BypassError("subprocess.Popen", "a real child process would read and write the real disk")
    _real_popen_init(self, *args, **kwargs)


_real_popen_init = subprocess.Popen.__init__


def _reload(task: Task, module: Any) -> Any:
    """importlib.reload inside a rank: the module is re-executed; simfs's patches of it are
    then put back (a reloaded os would otherwise reach the real machine)."""
    from .registry import original, verify

    with host_calls():
        reloaded = original(importlib, "reload")(module)
    verify()
    return reloaded


def _faulthandler(name: str) -> Any:
    """faulthandler inside a rank: a per-process setting with no effect on the host (enabling
    it would install real signal handlers in the host process)."""
    def sim(task: Task, *args: Any, **kwargs: Any) -> Any:
        settings = task.context.settings
        if name == "enable":
            settings["faulthandler"] = True
        elif name == "disable":
            settings["faulthandler"] = False
        elif name == "is_enabled":
            return bool(settings.get("faulthandler", False))
        elif name == "dump_traceback":
            import traceback

            out: Any = args[0] if args else kwargs.get("file", sys.stderr)  # whatever file the caller passed
            out.write("".join(traceback.format_stack()))
        return None
    return sim


def _is_real_stream(stream: Any) -> bool:
    """A file object of the host's (neither a rank's nor a console): writing it would change
    the real disk."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return isinstance(fd, int) and 3 <= fd < FD_BASE


def console_fd(stream: Any) -> int | None:
    """1 or 2 for a stream on the console's stdout or stderr, else None."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    return fd if fd in (1, 2) else None


def _emit(task: Task, handler: logging.StreamHandler[Any], record: logging.LogRecord) -> None:
    """logging inside a rank: a FileHandler the host configured writes the rank's records to the
    same path on the rank's simulated machine (as a process that inherited the configuration
    would); a handler on the console's stdout or stderr writes to the rank's (on greenlet ranks,
    which share the host's handlers: a rank process's handlers are its own); a handler holding
    another real file of the host is refused."""
    if isinstance(handler, logging.FileHandler):
        streams = task.context.settings.setdefault("log_files", {})
        stream = streams.get(id(handler))
        if stream is None:
            stream = streams[id(handler)] = open(handler.baseFilename, "a", encoding=handler.encoding,  # noqa: SIM115
                                                 errors=handler.errors)
        try:
            stream.write(handler.format(record) + handler.terminator)
            stream.flush()
        except Exception:  # noqa: BLE001 - as logging does: the handler reports its own failures
            handler.handleError(record)
        return
    console = task.context.console
    fd = console_fd(handler.stream)
    if fd is not None and console.sink is not None:  # a greenlet rank: the host's console, as its own
        try:
            console.write(fd, (handler.format(record) + handler.terminator).encode("utf-8", "backslashreplace"))
        except Exception:  # noqa: BLE001 - as logging does: the handler reports its own failures
            handler.handleError(record)
        return
    if _is_real_stream(handler.stream):
        raise BypassError("logging.StreamHandler.emit", "the handler holds a real file the host opened",
                          "configure logging inside the job")
    original(logging.StreamHandler, "emit")(handler, record)  # a console or an in-memory stream


def _no_socket(task: Task, *args: Any, **kwargs: Any) -> Any:
    raise BypassError("socket", "real network and Unix sockets are not simulated")


def _collector_tuning(task: Task) -> None:
    """gc.freeze()/gc.unfreeze() in a rank: they change only how fast the collector runs, which
    simfs does not model, and the real ones would freeze or thaw the host's objects."""


def _process_memory(owner: Any, name: str) -> Callable[..., Any]:
    """ctypes' raw memory access: refused where ranks share the host's process, the real call in
    a rank process the kernel confines (its memory is its own)."""
    real = getattr(owner, name)

    def sim(task: Task, *args: Any, **kwargs: Any) -> Any:
        if audit.kernel_trusted():
            return real(*args, **kwargs)
        raise BypassError(f"ctypes.{name}", "it reads or writes the host's memory")
    return sim


def install() -> None:
    patch_function(importlib, "reload", _reload)
    for name in ("freeze", "unfreeze"):
        patch_function(gc, name, _collector_tuning)
    # refused before any real descriptor is made (the audit hook sees sockets only once they exist)
    patch_function(socket.socket, "__init__", _no_socket)
    for name in ("socketpair", "fromfd", "create_connection", "create_server"):
        patch_function(socket, name, _no_socket)
    patch_function(multiprocessing.process.BaseProcess, "start",
                   refusal("multiprocessing.Process.start", "a real child process would read and write the real disk",
                           "use threads, or run the work in the job's own process"))
    patch_function(_posixshmem, "shm_open", refusal("shm_open", "it creates real shared memory in /dev/shm"))
    patch_function(_posixshmem, "shm_unlink", refusal("shm_unlink", "it removes real shared memory"))
    patch_function(_posixsubprocess, "fork_exec", refusal("_posixsubprocess.fork_exec",
                                                          "it starts a real process"))
    for name in ("enable", "disable", "is_enabled", "register", "unregister", "dump_traceback",
                 "dump_traceback_later", "cancel_dump_traceback_later"):
        patch_function(faulthandler, name, _faulthandler(name))
    for name in ("memmove", "memset", "string_at", "wstring_at"):
        import ctypes

        patch_function(ctypes, name, _process_memory(ctypes, name))
    import logging.handlers

    for owner in (logging.StreamHandler, logging.FileHandler, logging.handlers.BaseRotatingHandler):
        patch_function(owner, "emit", _emit)
    patch_function(shutil, "rmtree", _rmtree)
    if hasattr(shutil, "_fastcopy_sendfile"):
        patch_function(shutil, "_fastcopy_sendfile", _no_sendfile, scan=False)
    patch_function(fcntl, "flock", _flock)
    patch_function(fcntl, "lockf", _lockf)
    patch_function(fcntl, "fcntl", _fcntl)
    patch_function(fcntl, "ioctl", _ioctl)
    patch(subprocess.Popen, "__init__", _popen_init, scan=False)
