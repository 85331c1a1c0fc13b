"""The real functions, captured before simfs patches anything."""

from __future__ import annotations

import _thread
import builtins
import fcntl as _fcntl
import io
import os
import select as _select
import signal
import time

stat = os.stat
lstat = os.lstat
open = os.open
close = os.close
read = os.read
write = os.write
isatty = os.isatty
listdir = os.listdir
scandir = os.scandir
access = os.access
readlink = os.readlink
statvfs = os.statvfs
getcwd = os.getcwd
fstat = os.fstat
pread = os.pread
preadv = os.preadv
pwritev = os.pwritev
ftruncate = os.ftruncate
memfd_create = os.memfd_create
kill = os.kill
pidfd_send_signal = signal.pidfd_send_signal
waitpid = os.waitpid
waitid = os.waitid
poll = _select.poll
POLLIN = _select.POLLIN
fcntl = _fcntl.fcntl
builtin_open = builtins.open
io_open = io.open
FileIO = io.FileIO
monotonic = time.monotonic
perf_counter = time.perf_counter
sleep = time.sleep
time_time = time.time
allocate_lock = _thread.allocate_lock
start_new_thread = _thread.start_new_thread
sched_yield = os.sched_yield


def readable(fds: list[int], timeout: float | None) -> list[int]:
    """Which of ``fds`` can be read (or are at their end) within ``timeout`` seconds (None: wait
    until one can): poll(2), which, unlike select(2), takes descriptors above 1023."""
    poller = poll()
    for fd in fds:
        poller.register(fd, POLLIN)
    return [fd for fd, _ in poller.poll(None if timeout is None else max(0, int(timeout * 1000)))]
