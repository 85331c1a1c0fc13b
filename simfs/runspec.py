"""Replay strings: a short text that rebuilds a cluster and reproduces one of its runs."""

from __future__ import annotations

import ast
import base64
import importlib
import importlib.machinery
import importlib.util
import json
import os
import re
import sys
import sysconfig
import types
import zlib
from collections.abc import Callable
from typing import Any

from .errors import ConfigError
from .profiles import Profile, get

PREFIX = "simfs1:"
# the most a replay string inflates to: a run's spec (its environment, faults, arguments) or a
# finding's (its drawn byte strings, each at most Hypothesis's 8 KiB buffer) is far below it
MAX_SPEC = 8 << 20


def encode(spec: dict[str, Any]) -> str:
    return PREFIX + deflate(spec)


def deflate(spec: dict[str, Any]) -> str:
    """A replay string's body: its spec as compressed JSON, in URL-safe base64 (inflate's inverse)."""
    raw = json.dumps(spec, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


def inflate(body: str) -> bytes:
    """A replay string's body (after its prefix) as the JSON bytes it compresses, inflated no
    further than MAX_SPEC: a short string cannot make the reader hold more. ValueError or
    zlib.error when it is not one."""
    inflater = zlib.decompressobj()
    raw = inflater.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)), MAX_SPEC)
    if inflater.unconsumed_tail:
        raise ValueError(f"it inflates to more than {MAX_SPEC >> 20} MiB, which no replay string holds")
    if not inflater.eof:
        raise ValueError("it is cut short")
    return raw


def imported_preload(names: Any) -> tuple[str, ...]:
    """What a replay string's ``preload`` names that the caller has imported itself: a replay
    imports nothing its caller did not name (the ranks import the others themselves, to the same
    verdict: preloading only saves their time)."""
    if not isinstance(names, list):
        return ()
    return tuple(name for name in names if isinstance(name, str) and sys.modules.get(name) is not None)


REQUIRED = ("job", "nodes", "rpn", "mounts", "local", "seed", "run", "faults", "cwd", "env", "timeout",
            "latency", "bandwidth", "dist")


def json_safe(value: Any) -> bool:
    """True if ``value`` survives a JSON round trip unchanged (so a replay can pass it again)."""
    try:
        same: bool = json.loads(json.dumps(value)) == value
        return same
    except (TypeError, ValueError):
        return False


def decode(text: str) -> dict[str, Any]:
    """The spec inside a replay string, or a ValueError saying what is wrong with it."""
    if not isinstance(text, str) or not text.startswith(PREFIX):
        raise ConfigError(f"not a simfs replay string (it should start with {PREFIX!r}): {str(text)[:40]!r}")
    body = text[len(PREFIX):].strip()
    try:
        spec = json.loads(inflate(body))
    except (ValueError, zlib.error) as exc:
        raise ConfigError(f"corrupt simfs replay string ({exc}); copy it whole from the report") from None
    if not isinstance(spec, dict) or spec.get("v") != 1:
        raise ConfigError("simfs replay string from an incompatible version")
    missing = [key for key in REQUIRED if key not in spec]
    if missing:
        raise ConfigError(f"simfs replay string lacks {missing}; copy it whole from the report")
    return spec


def profile_spec(profile: Profile) -> str | dict[str, Any]:
    """A built-in profile by name; a variant of one as its name plus the changed parameters;
    any other by all its parameters."""
    try:
        base = get(profile.name)
    except ValueError:
        return profile.to_dict()
    if base == profile:
        return profile.name
    changed = {k: v for k, v in profile.to_dict().items() if getattr(base, k) != v}
    return {"base": profile.name, **changed}


def profile_from_spec(spec: str | dict[str, Any]) -> Profile:
    if isinstance(spec, str):
        return get(spec)
    spec = dict(spec)
    base = spec.pop("base", None)
    if base is not None:
        return get(base).replace(**spec)
    return Profile.from_dict(spec, source="replay string")


def job_reference(job: Callable[..., Any]) -> str | None:
    """'module:qualname' when the job can be imported again, else None."""
    module = getattr(job, "__module__", None)
    qualname = getattr(job, "__qualname__", "")
    if not module or "<" in qualname or module == "__main__":
        return None
    return f"{module}:{qualname}"


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_OWN_PACKAGES = {"scenarios", "coord", "checkpoint"}  # job libraries shipped with simfs


def _installed_elsewhere(top: str) -> bool:
    """True if a top-level module lives in the Python installation (stdlib or site-packages),
    found without importing it."""
    if top in sys.builtin_module_names or top in getattr(sys, "stdlib_module_names", ()):
        return True
    if top in _OWN_PACKAGES:
        return False
    spec = importlib.util.find_spec(top)
    origin = spec.origin if spec is not None else None
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return origin is not None and any(os.path.realpath(origin).startswith(os.path.realpath(r) + os.sep)
                                      for r in roots)


def _module_file(module_name: str) -> str | None:
    """The source file of a module, found without importing it or its packages (None: not a
    module of Python source that the import system would find)."""
    top, *subs = module_name.split(".")
    spec = importlib.util.find_spec(top)  # a top-level name is found without running anything
    for part in subs:
        locations = spec.submodule_search_locations if spec is not None else None
        if locations is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(part, list(locations))
    origin = spec.origin if spec is not None else None
    return origin if origin is not None and origin.endswith(".py") and os.path.isfile(origin) else None


def _source_defines(module_name: str, qualname: str) -> bool:
    """Whether the module's source defines ``qualname`` as a function (at its top level, or in
    the classes its name goes through), read as text: nothing of it runs."""
    path = _module_file(module_name)
    if path is None:
        return False
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return False
    body: list[ast.stmt] = tree.body
    *classes, function = qualname.split(".")
    for name in classes:
        found = [n for n in body if isinstance(n, ast.ClassDef) and n.name == name]
        if not found:
            return False
        body = found[-1].body
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function for n in body)


def resolve_job(reference: str) -> Callable[..., Any]:
    """The job a replay string names. A replay string is data, never code: it may only name a
    plain function of the user's own code (not of the standard library, builtins or installed
    packages), defined where it is named."""
    module_name, _, qualname = reference.partition(":") if isinstance(reference, str) else ("", "", "")
    if not _NAME.fullmatch(module_name) or not _NAME.fullmatch(qualname):
        raise ConfigError(f"replay string: the job {reference!r} is not 'module:function'")
    if _installed_elsewhere(module_name.split(".")[0]):
        raise ConfigError(f"replay string: the job {reference!r} is not from your own code (the standard "
                          "library, builtins and installed packages are never run from a replay string); "
                          "pass the job: simfs.replay(text, job)")
    if module_name not in sys.modules and not _source_defines(module_name, qualname):
        raise ConfigError(f"replay string: {reference!r} is not a function its module's source defines (a replay "
                          "imports a module only once its file is seen to define the job); pass the job: "
                          "simfs.replay(text, job)")
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"replay string: cannot import the job {reference!r}: {exc}") from None
    if not isinstance(target, types.FunctionType) or (target.__module__, target.__qualname__) != (module_name,
                                                                                                  qualname):
        raise ConfigError(f"replay string: {reference!r} is not a function defined there (a replay runs only "
                          "the job function it recorded); pass the job: simfs.replay(text, job)")
    return target


def hash_seed() -> dict[str, Any]:
    """How this process hashes str (PYTHONHASHSEED), so a replay can tell it iterates sets and
    dicts of str in another order."""
    return {"env": os.environ.get("PYTHONHASHSEED"), "probe": hash("simfs replay hash probe")}


def hash_mismatch(recorded: dict[str, Any] | None) -> str:
    """A note when this process hashes str differently from the recorded run ('' if not)."""
    if not recorded or recorded.get("probe") == hash("simfs replay hash probe"):
        return ""
    seed = recorded.get("env")
    how = (f"set PYTHONHASHSEED={seed} to replay it exactly" if seed is not None else
           "it ran with a random hash seed: run both with the same PYTHONHASHSEED to replay it exactly")
    return ("this process hashes str differently from the recorded run (PYTHONHASHSEED), so sets and dicts "
            f"of str may iterate in another order: {how}")
