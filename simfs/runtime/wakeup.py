"""How late a rank's thread runs again once what it waited for has happened (a collective's last
message, a store key another rank set): the kernel wakes it, and where its CPU runs another task
it waits for that task's slice. Each wait draws its own delay from the run's timing source; the
zero draw is no delay, so a search shrinks towards ranks that all wake at once."""

from __future__ import annotations

from ..choices import ChoiceSource

# kernel/sched/fair.c (EEVDF, Linux 6.6+): sysctl_sched_base_slice = 0.75 ms, scaled by
# 1 + ilog2(min(online CPUs, 8)) (get_update_sysctl_factor, SCHED_TUNABLESCALING_LOG) = 3 ms on
# a node of 8 or more CPUs: a woken thread whose CPU runs another task of its weight waits for
# at most that task's slice (CFS before 6.6: sysctl_sched_wakeup_granularity 1 ms x 4)
SLICE = 3e-3


class Wakeups:
    """Draws each wait's wake-up delay, in [0, SLICE) virtual seconds."""

    def __init__(self, source: ChoiceSource) -> None:
        self._source = source

    def delay(self) -> float:
        return SLICE * self._source.fraction()
