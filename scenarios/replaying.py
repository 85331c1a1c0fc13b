"""Replay strings of findings: the target and the example, as compressed JSON data (never
code). Jobs that cannot be imported again (``__main__`` functions, closures, lambdas) are found
in this process only, by the search that made the string."""

from __future__ import annotations

import base64
import json
import os
import sys
import zlib
from collections.abc import Callable
from typing import Any

from simfs import carriers, checks
from simfs.faults import fault_from_dict, fault_to_dict
from simfs.profiles import Profile
from simfs.runspec import (
    deflate,
    hash_mismatch,
    hash_seed,
    imported_preload,
    inflate,
    job_reference,
    profile_from_spec,
    profile_spec,
    resolve_job,
)
from simfs.runtime.dist import LOCKSTEP

from .example import Crash, Example
from .target import Target

PREFIX = "scenarios1:"
_LIVE: dict[str, Callable[..., Any]] = {}  # "live:N" -> a callable of this process
_FROM_FILES: dict[int, tuple[Callable[..., Any], str]] = {}  # id -> a callable and the 'FILE.py:name' it came from


def _reference(fn: Callable[..., Any] | None) -> str | None:
    if fn is None:
        return None
    ref = job_reference(fn)
    if ref is not None and _names(ref, fn):
        return ref
    for key, known in _LIVE.items():
        if known is fn:
            return key
    key = f"live:{len(_LIVE)}:{getattr(fn, '__qualname__', 'callable')}"
    _LIVE[key] = fn
    return key


def remember(target: Target) -> None:
    """Give the target's callables their references now, in this process: a search in a forked
    child then names them as this process does, and their replay strings replay here."""
    for fn in (target.job, target.recover, target.check):
        _reference(fn)


def loaded_from_file(fn: Callable[..., Any], spec: str) -> None:
    """Remember that ``fn`` is the function of the job file spec ``spec`` ('FILE.py:name'): its
    module is named after the file, a name `simfs replay` need not find (the file's directory is not
    on its import path), so its replay command names the file (shell_options)."""
    _FROM_FILES[id(fn)] = (fn, spec)


def shell_options(target: Target) -> list[str]:
    """What `simfs replay`, run from the current directory, needs besides the replay string:
    ``--job FILE.py:function`` (``--recover``, ``--check``) for each of the target's callables that
    came from a job file or that the string names in this process only (a script's ``__main__``
    function); none for those it imports by name, or that no file names (a closure, a lambda)."""
    options: list[str] = []
    for flag, fn in (("--job", target.job), ("--recover", target.recover), ("--check", target.check)):
        spec = _file_spec(fn) if fn is not None else None
        if spec is not None:
            options += [flag, spec]
    return options


def _file_spec(fn: Callable[..., Any]) -> str | None:
    """'FILE.py:name' for a job file's function, or for a function defined at the top level of a
    file whose module cannot be imported again (``__main__``); None otherwise."""
    known = _FROM_FILES.get(id(fn))
    if known is not None and known[0] is fn:
        return known[1]
    reference = _reference(fn)
    if reference is None or not reference.startswith("live:"):
        return None
    name = getattr(fn, "__qualname__", "")
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    file = getattr(module, "__file__", None)
    if not name.isidentifier() or getattr(module, name, None) is not fn or not str(file).endswith(".py"):
        return None
    path, here = os.path.abspath(str(file)), os.getcwd()
    return f"{os.path.relpath(path, here) if os.path.commonpath([path, here]) == here else path}:{name}"


def _names(ref: str, fn: Callable[..., Any]) -> bool:
    """True if ``ref`` leads back to ``fn`` through an imported module (code run with exec or in
    a notebook names a module that cannot be imported again)."""
    module_name, _, qualname = ref.partition(":")
    target: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        target = getattr(target, part, None)
    return target is fn


def _resolve(ref: str | None, given: Callable[..., Any] | None, what: str) -> Callable[..., Any] | None:
    if given is not None or ref is None:
        return given
    if ref.startswith("live:"):
        if ref in _LIVE:
            return _LIVE[ref]
        name = ref.split(":", 2)[2]
        raise ValueError(f"this replay string's {what} {name!r} was not importable (a __main__ function, closure or "
                         f"lambda) and is not in this process; pass it: scenarios.replay(text, {what}=...), or "
                         f"from the shell: simfs replay --{what} FILE.py:function TEXT")
    return resolve_job(ref)


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def _down_until(value: object) -> float | None:
    """A crash's ``down_until`` (absent in strings from before it existed)."""
    return None if value is None else checks.seconds("replay string", "down_until", value)


def encode(target: Target, example: Example) -> str:
    crash = example.crash
    spec = {
        "v": 1, "job": _reference(target.job), "recover": _reference(target.recover),
        "check": _reference(target.check), "nodes": target.nodes, "rpn": target.ranks_per_node,
        "carrier": target.carrier, "preload": list(target.preload), "profile": profile_spec(target.profile),
        "schedule": _b64(example.schedule),
        "lifetimes": _b64(example.lifetimes), "faults": [fault_to_dict(f) for f in example.faults],
        "crash": None if crash is None else {
            "fault": None if crash.fault is None else fault_to_dict(crash.fault), "pick": crash.pick,
            "exact": crash.exact, "down_until": crash.down_until},
        "rschedule": _b64(example.recover_schedule), "rlifetimes": _b64(example.recover_lifetimes),
        "timing": _b64(example.timing), "rtiming": _b64(example.recover_timing), "collectives": target.collectives,
        "hash": hash_seed(),
    }
    return PREFIX + deflate(spec)


def decode(text: str, job: Callable[..., Any] | None = None, recover: Callable[..., Any] | None = None,
           check: Callable[..., Any] | None = None) -> tuple[Target, Example, str]:
    """The target and example of a replay string, and a note if str hashing differs."""
    if not isinstance(text, str) or not text.strip().startswith(PREFIX):
        raise ValueError(f"not a scenarios replay string (it should start with {PREFIX!r}): {str(text)[:40]!r}")
    body = text.strip()[len(PREFIX):]
    try:
        spec = json.loads(inflate(body))
        crash = spec["crash"]
        example = Example(
            schedule=_bytes(spec["schedule"]), lifetimes=_bytes(spec["lifetimes"]),
            faults=tuple(fault_from_dict(f) for f in spec["faults"]),
            crash=None if crash is None else Crash(
                None if crash["fault"] is None else fault_from_dict(crash["fault"]), int(crash["pick"]),
                bool(crash["exact"]), _down_until(crash.get("down_until"))),
            recover_schedule=_bytes(spec["rschedule"]), recover_lifetimes=_bytes(spec["rlifetimes"]),
            timing=_bytes(spec.get("timing")), recover_timing=_bytes(spec.get("rtiming")))
        profile: Profile = profile_from_spec(spec["profile"])
        nodes, rpn = int(spec["nodes"]), int(spec["rpn"])
        carrier = str(spec.get("carrier", carriers.BEFORE_CARRIERS))
        preload = imported_preload(spec.get("preload", []))
        collectives = str(spec.get("collectives", LOCKSTEP))  # strings from before gloo's algorithms
        refs = spec["job"], spec["recover"], spec["check"]
    except (ValueError, KeyError, TypeError, zlib.error) as exc:
        raise ValueError(f"corrupt scenarios replay string ({type(exc).__name__}: {exc}); copy it whole") from None
    resolved_job = _resolve(refs[0], job, "job")
    if resolved_job is None:
        raise ValueError("this replay string names no job")
    target = Target(resolved_job, nodes, rpn, profile, recover=_resolve(refs[1], recover, "recover"),
                    check=_resolve(refs[2], check, "check"), carrier=carrier, preload=preload,
                    collectives=collectives)
    return target, example, hash_mismatch(spec.get("hash"))
