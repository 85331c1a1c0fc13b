"""A deterministic scheduler in virtual time. Every rank (and every thread a rank starts) is a
greenlet; exactly one runs at a time and hands control back at each simulated operation.
The next task is the one with the earliest wake time; ties are broken by a draw."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

from greenlet import getcurrent, greenlet

from ..choices import ChoiceSource
from ..clock import VirtualClock
from ..tasks.task import BLOCKED, DONE, READY, TASKS, Greenlet, Task
from ..tasks.waitqueue import WaitQueue

_FOREVER = 1e15  # a timeout this long (or infinite) is no timeout: the run's time limit comes first


class Event:
    """A callback due at a virtual time (crash at a time, lag expiry...)."""

    __slots__ = ("fn", "name")

    def __init__(self, fn: Callable[[], None], name: str) -> None:
        self.fn = fn
        self.name = name


class Scheduler:
    """Runs tasks one at a time in virtual time."""

    def __init__(self, choices: ChoiceSource, clock: VirtualClock) -> None:
        self.choices = choices
        self.clock = clock
        self.now = clock.now
        self.limit = float("inf")  # the clock never goes past this (the run's time limit)
        self._times: list[float] = []
        self._buckets: dict[float, list[tuple[Task, int]]] = {}
        self._events: list[tuple[float, int, Event]] = []  # fire before tasks due at the same time
        self._event_seq = 0
        self.tasks: list[Task] = []
        self.mains: dict[int, Task] = {}  # rank -> its main task
        self.threads: dict[int, list[Task]] = {}  # rank -> the threads it started
        self.current: Task | None = None
        self.enter: Callable[[Any], None] | None = None  # called with a task's context when it differs from the last
        self._entered: Any = None
        self.switches = 0
        self._next_tid = 0
        self._loop: Greenlet | None = None
        self._stop: Callable[[], bool] | None = None
        self._tick: Callable[[], None] | None = None

    # -- queueing --------------------------------------------------------------------------
    def _enqueue(self, item: Task, at: float) -> None:
        item.token += 1
        bucket = self._buckets.get(at)
        if bucket is None:
            bucket = self._buckets[at] = []
            heapq.heappush(self._times, at)
        bucket.append((item, item.token))

    def _pick(self) -> Task | Event | None:
        """The next thing to run: an event due no later than any task, else a task among
        those due first (ties drawn). Advances the clock to its time."""
        while True:
            while self._times and not self._buckets[self._times[0]]:
                del self._buckets[heapq.heappop(self._times)]
            task_at = self._times[0] if self._times else None
            if task_at is None and not self._events:
                return None
            due = min(t for t in (task_at, self._events[0][0] if self._events else None) if t is not None)
            if due > self.limit:  # nothing due before the limit: time stops just past it
                self.now = self.clock.now = max(self.now, self.limit + 1e-9)
                return None
            if self._events and (task_at is None or self._events[0][0] <= task_at):
                at, _, event = heapq.heappop(self._events)
                self.now = self.clock.now = max(self.now, at)
                return event
            if task_at is None:
                return None
            bucket = self._buckets[task_at]
            i = self.choices.choose(len(bucket)) if len(bucket) > 1 else 0
            item, token = bucket[i]
            bucket[i] = bucket[-1]
            bucket.pop()
            if token == item.token:
                self.now = self.clock.now = max(self.now, task_at)
                return item

    def call_at(self, at: float, fn: Callable[[], None], name: str) -> Event:
        """Run ``fn`` on the scheduler at virtual time ``at`` (before tasks due then)."""
        event = Event(fn, name)
        self._event_seq += 1
        heapq.heappush(self._events, (max(at, self.now), self._event_seq, event))
        return event

    # -- tasks -----------------------------------------------------------------------------
    @property
    def next_tid(self) -> int:
        """The id the next spawned task gets."""
        return self._next_tid

    def spawn(self, fn: Callable[[], Any], rank: int, context: Any, name: str, *,
              is_main: bool, start_at: float | None = None, gr_context: Any = None, daemon: bool = False) -> Task:
        task = Task(self._next_tid, rank, context, name, is_main)
        task.daemon = daemon
        self._next_tid += 1

        def body() -> None:
            try:
                task.result = fn()
            except BaseException as exc:  # noqa: BLE001 - recorded for the result; never escapes a rank
                task.error = exc
            finally:
                task.state = DONE
                TASKS.pop(glet, None)
                self._wake_all(task.finished)

        glet: Greenlet = greenlet(body, parent=self._loop)
        task.glet = glet
        if gr_context is not None:
            glet.gr_context = gr_context
        TASKS[glet] = task
        self.tasks.append(task)
        if is_main:
            self.mains[rank] = task
        else:
            self.threads.setdefault(rank, []).append(task)
        self._enqueue(task, self.now if start_at is None else max(start_at, self.now))
        return task

    def run(self, stop: Callable[[], bool] | None = None, tick: Callable[[], None] | None = None) -> None:
        """Run until no task or event is due (all done, or the rest blocked forever), or
        until ``stop()`` says so; ``tick()`` is called every 256 switches."""
        loop: Greenlet = getcurrent()
        self._loop = loop
        self._stop, self._tick = stop, tick
        for task in self.tasks:
            glet = task.glet
            assert glet is not None  # set by spawn
            if task.state != DONE and glet.parent is not loop:
                glet.parent = loop
        while True:
            item = self._pick()
            if item is None:
                return
            if isinstance(item, Event):
                item.fn()
                continue
            if item.context is not self._entered:
                self._entered = item.context
                if self.enter is not None:
                    self.enter(item.context)
            self.current = item
            self.switches += 1
            glet = item.glet
            assert glet is not None  # set by spawn
            glet.switch()
            self.current = None
            if stop is not None and stop():
                return
            if tick is not None and not self.switches & 255:
                tick()

    # -- called from tasks -----------------------------------------------------------------
    def _switch_out(self, task: Task) -> None:
        loop = self._loop
        assert loop is not None  # set by run(), the only caller of tasks
        loop.switch()
        if task.interrupts:
            self.interrupted(task)

    def interrupted(self, task: Task) -> None:
        """Run what was delivered to the task while it waited (signal handlers)."""
        while task.interrupts:
            task.interrupts.pop(0)()

    def elapse(self, cost: float) -> None:
        """The running task spent ``cost`` virtual seconds (finite: ValueError otherwise, whoever
        asks); others due earlier run first."""
        if not math.isfinite(cost):
            raise ValueError(f"simfs: a rank spent {cost} virtual seconds; a cost is a finite number")
        task = self.current
        assert task is not None  # called from a task
        if task.interrupts:
            self.interrupted(task)
        if cost <= 0:
            return
        if task.atomic:
            task.owed += cost
            return
        at = self.now + cost
        if self._alone_until(at):
            return
        self._enqueue(task, at)
        self._switch_out(task)

    def _alone_until(self, at: float) -> bool:
        """If nothing else is due before ``at`` (so the loop would pick the running task again
        without a draw), move the clock there and keep running: the same run, without the two
        greenlet switches. Every 256 such steps the loop's stop and tick checks are made too."""
        times = self._times
        while times and not self._buckets[times[0]]:
            del self._buckets[heapq.heappop(times)]
        if (times and times[0] <= at) or (self._events and self._events[0][0] <= at) or at > self.limit:
            return False
        self.switches += 1
        if not self.switches & 255:
            if self._stop is not None and self._stop():
                return False
            if self._tick is not None:
                self._tick()
        self.now = self.clock.now = at
        return True

    def enter_atomic(self) -> None:
        """Start a region where the running task must not be switched out (C++ code such as
        torch.save keeps thread-local state across its calls back into Python)."""
        task = self.current
        assert task is not None  # called from a task
        task.atomic += 1

    def exit_atomic(self) -> None:
        task = self.current
        assert task is not None  # called from a task
        task.atomic -= 1
        if task.atomic == 0 and task.owed:
            owed, task.owed = task.owed, 0.0
            self.elapse(owed)

    def block(self, queue: WaitQueue, timeout: float | None = None) -> bool:
        """Wait until notified (True) or until ``timeout`` virtual seconds pass (False); a NaN
        timeout is a ValueError, whoever asks."""
        if timeout is not None and math.isnan(timeout):
            raise ValueError("simfs: a wait with a timeout of nan virtual seconds")
        task = self.current
        assert task is not None  # called from a task
        if task.interrupts:
            self.interrupted(task)
        task.state = BLOCKED
        task.waiting = queue
        task.woken = False
        task.blocked_since = self.now
        queue.waiters.append(task)
        task.token += 1  # any earlier queue entry is void
        task.deadline = None if timeout is None or timeout >= _FOREVER else self.now + max(timeout, 0.0)
        if task.deadline is not None:
            self._enqueue(task, task.deadline)
        try:
            self._switch_out(task)
        finally:
            if not task.woken and task in queue.waiters:  # timed out, or interrupted
                queue.waiters.remove(task)
            task.state = READY
            task.waiting = None
        return task.woken

    def _wake_all(self, queue: WaitQueue) -> None:
        waiters, queue.waiters = queue.waiters, []
        for task in waiters:
            task.woken = True
            self._enqueue(task, self.now)

    def notify_all(self, queue: WaitQueue) -> None:
        self._wake_all(queue)

    def abandon(self, task: Task, outcome: BaseException | None) -> None:
        """The task is gone (its process died, with ``outcome`` as its error, None for a clean
        exit): it never runs again, not even its ``finally`` blocks, as a killed process runs none.
        Its greenlet is kept until the simulation thread has exited, when it is dropped without
        running (greenlets of a dead thread never run)."""
        if task.state == DONE:
            return
        if task.waiting is not None and task in task.waiting.waiters:
            task.waiting.waiters.remove(task)
        task.waiting = None
        task.state = DONE
        task.token += 1  # its queue entries are void
        task.error = outcome
        task.interrupts.clear()
        if task.glet is not None:
            TASKS.pop(task.glet, None)
        self._wake_all(task.finished)
        if task is self.current:
            assert self._loop is not None  # the current task was switched to by run()
            self._loop.switch()  # never switched back to

    def progressing(self, task: Task) -> bool:
        """True if ``task`` will run again without anyone waking it (ready, or a timed wait)."""
        return task.state == READY or (task.state == BLOCKED and task.deadline is not None)

    def busy_threads(self, rank: int) -> list[Task]:
        """The rank's non-daemon threads that still make progress: what its process's exit waits
        for (threads blocked with nothing to wake them, like idle pool workers, are ended after)."""
        return [t for t in self.threads.get(rank, ()) if not t.daemon and t.state != DONE and self.progressing(t)]

    def live(self) -> list[Task]:
        return [t for t in self.tasks if t.state != DONE]
