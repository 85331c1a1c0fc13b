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


# the draws spread over this many halvings of SLICE (3 ms down to ~0.7 us), each as likely: most
# wake-ups are quick, some wait out a slice, and a race a few operations wide is reached as often
# as one a slice wide
OCTAVES = 12


class Wakeups:
    """Draws each wait's wake-up delay, in [0, SLICE) virtual seconds: 0 for a zero draw, else
    log-uniform from SLICE / 2**OCTAVES up (a smaller draw, a shorter delay)."""

    def __init__(self, source: ChoiceSource) -> None:
        self._source = source

    def delay(self) -> float:
        f = self._source.fraction()
        return SLICE * 2.0 ** (-OCTAVES * (1.0 - f)) if f > 0 else 0.0
