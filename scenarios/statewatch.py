"""Whether an example changed per-process state of the job's modules: names bound at module level
or in a class, and the builtin containers they hold (a module's cache dict, a registry list, a
thread-local's attributes). On greenlet ranks every rank shares that state, on rank processes each
has its own, so a job that changes it can tell the carriers apart and is searched on rank
processes (scenarios/autocarrier.py). simfs's own modules and the search's machinery are not the
job's; of the standard library only public names count (its private names are caches), and the
names simfs already gives each greenlet rank its own (runtime/procglobals.py: sys's streams and
argv, random's generator) are left out. Values are told apart by identity: a name rebound to a new
object at the address of the one it replaced (freed since) looks unchanged, unless it is a dict; the
runs that confirm a greenlet search on rank processes are there for what the watch cannot see."""

from __future__ import annotations

import collections
import sys
import threading
import types
from dataclasses import dataclass
from typing import Any

from simfs.runtime.dictversion import version

# packages whose state is not the job's: simfs's, and what runs the search around the job
NOT_THE_JOBS = frozenset({
    "simfs", "scenarios", "hypothesis", "_hypothesis_globals", "_hypothesis_ftz_detector", "greenlet", "msgspec",
    "xxhash", "rich", "pygments", "markdown_it", "mdurl", "sortedcontainers", "attr", "attrs", "exceptiongroup",
    "pytest", "_pytest", "pluggy", "py", "xdist", "execnet", "coverage", "iniconfig", "packaging",
})
# standard-library modules whose public names are per-process on greenlet ranks already
# (runtime/procglobals.py swaps them) or are the interpreter's caches (linecache.cache)
PER_RANK_ALREADY = frozenset({"sys", "os", "posix", "random", "linecache", "builtins"})
_CONTAINERS = (list, set, bytearray, collections.deque)
_LOCAL = type(threading.local())


def _token(value: Any) -> tuple[int, int]:
    """What a change of this value, or of the builtin container it is, changes: its identity and,
    for a dict, its version tag (PEP 509), for another container its length."""
    kind = type(value)
    if kind is dict or kind is collections.OrderedDict or kind is collections.defaultdict:
        tag = version(value)
        return id(value), tag if tag is not None else len(value)
    if kind in _CONTAINERS:
        return id(value), len(value)
    if issubclass(kind, _LOCAL):  # a module-level threading.local: its attributes of this thread
        return id(value), hash(tuple(map(id, value.__dict__.values())))
    return id(value), -1


def _watched(name: str) -> bool:
    return name.partition(".")[0] not in NOT_THE_JOBS and name not in PER_RANK_ALREADY


@dataclass(frozen=True)
class State:
    """The watched modules imported at one moment, and a token of each of their names."""

    modules: frozenset[str]
    tokens: dict[tuple[str, str], tuple[int, int]]  # (module, name or Class.name) -> token


def snapshot() -> State:
    """Every watched name of every module imported now, with its token."""
    stdlib = sys.stdlib_module_names
    modules: set[str] = set()
    tokens: dict[tuple[str, str], tuple[int, int]] = {}
    for name, module in list(sys.modules.items()):
        if type(module) is not types.ModuleType or not _watched(name):
            continue
        modules.add(name)
        public_only = name.partition(".")[0] in stdlib
        space = vars(module)  # (a plain module: its namespace, whatever its attributes say)
        for attr, value in list(space.items()):
            if attr.startswith("__") or (public_only and attr.startswith("_")):
                continue
            tokens[name, attr] = _token(value)
            if type(value) is type and value.__dict__.get("__module__") == name:  # a class of this module
                for member, inner in list(value.__dict__.items()):
                    if not member.startswith("__"):
                        tokens[name, f"{attr}.{member}"] = _token(inner)
    return State(frozenset(modules), tokens)


def changed(before: State, after: State) -> list[str]:
    """The names bound, rebound, changed in place or deleted between two snapshots, in modules
    imported at both (an import is a cache: what a module binds as it is first imported is no
    change of state), as ``module.name``."""
    both = before.modules & after.modules
    keys = {key for key, token in after.tokens.items() if key[0] in both and before.tokens.get(key) != token}
    keys |= {key for key in before.tokens if key[0] in both and key not in after.tokens}
    return sorted(f"{module}.{name}" for module, name in keys)
