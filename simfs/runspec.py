"""Replay strings: a short text that rebuilds a cluster and reproduces one of its runs."""

from __future__ import annotations

import base64
import importlib
import json
import zlib
from typing import Any, Callable

from .profiles import Profile, get

PREFIX = "simfs1:"


def encode(spec: dict[str, Any]) -> str:
    raw = json.dumps(spec, separators=(",", ":"), sort_keys=True).encode()
    return PREFIX + base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


REQUIRED = ("job", "nodes", "rpn", "mounts", "local", "seed", "run", "faults", "cwd", "env", "timeout",
            "latency", "bandwidth", "dist")


def json_safe(value: Any) -> bool:
    """True if ``value`` survives a JSON round trip unchanged (so a replay can pass it again)."""
    try:
        return json.loads(json.dumps(value)) == value
    except (TypeError, ValueError):
        return False


def decode(text: str) -> dict[str, Any]:
    """The spec inside a replay string, or a ValueError saying what is wrong with it."""
    if not isinstance(text, str) or not text.startswith(PREFIX):
        raise ValueError(f"not a simfs replay string (it should start with {PREFIX!r}): {str(text)[:40]!r}")
    body = text[len(PREFIX):].strip()
    try:
        raw = zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        spec = json.loads(raw)
    except (ValueError, zlib.error) as exc:
        raise ValueError(f"corrupt simfs replay string ({exc}); copy it whole from the report") from None
    if not isinstance(spec, dict) or spec.get("v") != 1:
        raise ValueError("simfs replay string from an incompatible version")
    missing = [key for key in REQUIRED if key not in spec]
    if missing:
        raise ValueError(f"simfs replay string lacks {missing}; copy it whole from the report")
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


def resolve_job(reference: str) -> Callable[..., Any]:
    module_name, _, qualname = reference.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import the job {reference!r} recorded in the replay string: {exc}") from None
    return target
