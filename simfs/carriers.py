"""How ranks are carried, and the default, stated once for every entry point (simfs.Cluster,
scenarios.explore, a scenario, the pytest plugin, `simfs run` for a job): "process", each rank a
real OS process confined by the kernel, with its own modules, generators and C++ state (c10d runs
in it); "greenlet", every rank a greenlet of one process, sharing them, several times faster
(reports/BENCHMARKS.md, carriers). The built-in library runs the scenarios that check the
filesystem model on greenlets (scenarios/library/_common.py), each saying so."""

from __future__ import annotations

PROCESS = "process"
GREENLET = "greenlet"
CARRIERS = (GREENLET, PROCESS)
DEFAULT = PROCESS
# what ran a replay string, a recorded result or a report written before carriers were recorded
BEFORE_CARRIERS = GREENLET
