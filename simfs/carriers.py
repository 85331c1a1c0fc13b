"""How ranks are carried, and the default, stated once for every entry point (simfs.Cluster, a
scenario; the searches': scenarios.explore, the pytest plugin, `simfs run` for a job): "process",
each rank a real OS process confined by the kernel, with its own modules, generators and C++ state
(c10d runs in it); "greenlet", every rank a greenlet of one process, sharing them, several times
faster (reports/BENCHMARKS.md, carriers). The built-in library runs the scenarios that check the
filesystem model on greenlets (scenarios/library/_common.py), each saying so."""

from __future__ import annotations

PROCESS = "process"
GREENLET = "greenlet"
CARRIERS = (GREENLET, PROCESS)
DEFAULT = PROCESS
# a search's own choice, per job (scenarios/autocarrier.py): greenlet ranks where the job keeps no
# per-process state, each finding confirmed on rank processes; rank processes where it does
AUTO = "auto"
SEARCHES = (AUTO, *CARRIERS)
SEARCH_DEFAULT = AUTO  # scenarios.explore's, the pytest plugin's and `simfs run`'s for a job
# what ran a replay string, a recorded result or a report written before carriers were recorded
BEFORE_CARRIERS = GREENLET
