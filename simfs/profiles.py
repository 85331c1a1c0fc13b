"""Filesystem profiles: the named parameters that make a simulated mount behave like
a local disk, NFS, Lustre or an object-store FUSE mount."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from dataclasses import dataclass, field, fields
from typing import Any, Literal

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

_CHOICES: dict[str, tuple[str, ...]] = {
    "lookupcache": ("all", "positive", "none"),
    "write_back": ("through", "close", "locked"),
    "upload": ("extents", "whole"),
    "create_visible": ("open", "close"),
    "data_durable": ("fsync", "close"),
    "entry_durable": ("dir_fsync", "op"),
    "rename": ("atomic", "copy_delete"),
    "exclusive_create": ("atomic", "racy"),
    "flock": ("cluster", "node", "none"),
    "unlink_open": ("posix", "estale"),
    "crash_order": ("prefix", "omit_one"),
    "change_detection": ("change_attr", "timestamps"),
}


@dataclass(frozen=True)
class Profile:
    """How one simulated mount behaves. Times are virtual seconds, sizes bytes.

    Attribute caching follows Linux NFS: a first fetch gets a ttl in
    ``[acXXmin, acXXmax]`` (the node's cache history is unknown), an unchanged
    revalidation doubles it up to ``acXXmax``, a change resets it to ``acXXmin``.
    """

    name: str = "custom"
    on_node: bool = False  # a disk inside a node, not a network server: a crash of either is a power loss of both
    acregmin: float = 0.0
    acregmax: float = 0.0
    acdirmin: float = 0.0
    acdirmax: float = 0.0
    lookupcache: Literal["all", "positive", "none"] = "none"
    lookup_tied_to_parent: bool = True  # dentries valid only while the parent's attrs are
    positive_ttl: float = math.inf  # upper bound on a cached positive lookup
    negative_ttl: float = math.inf  # upper bound on a cached "not found"
    eexist_drops_entry: bool = True  # a create failing with EEXIST forgets the cached entry (Linux d_drop)
    cto: bool = True  # close-to-open: open() revalidates attributes
    write_back: Literal["through", "close", "locked"] = "through"
    upload: Literal["extents", "whole"] = "extents"
    create_visible: Literal["open", "close"] = "open"
    data_durable: Literal["fsync", "close"] = "fsync"
    entry_durable: Literal["dir_fsync", "op"] = "dir_fsync"
    rename: Literal["atomic", "copy_delete"] = "atomic"
    dir_rename: bool = True
    exclusive_create: Literal["atomic", "racy"] = "atomic"
    flock: Literal["cluster", "node", "none"] = "cluster"
    unlink_open: Literal["posix", "estale"] = "posix"
    silly_rename: bool = False
    crash_order: Literal["prefix", "omit_one"] = "prefix"
    torn_sector: int = 4096  # 0: writes persist whole
    mtime_granularity: float = 0.0
    change_detection: Literal["change_attr", "timestamps"] = "change_attr"
    rpc_latency: float = 2e-6
    local_latency: float = 1e-7
    bandwidth: float = 2e9
    jitter: float = 0.0
    notes: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        for f in fields(self):
            _check_field(f, getattr(self, f.name), self.name)
        for lo, hi in (("acregmin", "acregmax"), ("acdirmin", "acdirmax")):
            if getattr(self, lo) > getattr(self, hi):
                raise ValueError(f"profile {self.name!r}: {lo}={getattr(self, lo)} exceeds {hi}={getattr(self, hi)}")
        if self.bandwidth <= 0:
            raise ValueError(f"profile {self.name!r}: bandwidth must be positive, got {self.bandwidth}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"profile {self.name!r}: jitter must be in [0, 1), got {self.jitter}")

    @property
    def coherent(self) -> bool:
        """True when no node ever sees stale metadata."""
        return self.acregmax == 0 and self.acdirmax == 0 and self.lookupcache == "none"

    def replace(self, **params: Any) -> Profile:
        """A copy with some parameters changed (unknown names are an error)."""
        unknown = sorted(set(params) - {f.name for f in fields(self)})
        if unknown:
            raise TypeError(f"unknown profile parameter(s) {unknown}; known: {param_names()}")
        return dataclasses.replace(self, **params)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "<dict>") -> Profile:
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"{source}: unknown profile parameter(s) {unknown}; known: {param_names()}")
        values = dict(data)
        for f in fields(cls):
            if f.name in values and f.type == "float" and isinstance(values[f.name], int) and not isinstance(values[f.name], bool):
                values[f.name] = float(values[f.name])
        try:
            return cls(**values)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{source}: {exc}") from None

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write this profile as TOML (one flat table of parameters)."""
        lines = [f"# simfs profile {self.name!r}"]
        for key, value in self.to_dict().items():
            lines.append(f"{key} = {_toml_value(value)}")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Profile:
        """Read a profile written by :meth:`save` (or by the cluster probe)."""
        with open(path, "rb") as f:
            try:
                data = tomllib.load(f)
            except tomllib.TOMLDecodeError as exc:
                raise ValueError(f"{os.fspath(path)}: not valid TOML: {exc}") from None
        if "profile" in data and isinstance(data["profile"], dict) and len(data) == 1:
            data = data["profile"]
        return cls.from_dict(data, source=os.fspath(path))


def param_names() -> list[str]:
    return [f.name for f in fields(Profile)]


def _check_field(f: dataclasses.Field, value: Any, profile: str) -> None:
    where = f"profile {profile!r}: parameter {f.name}"
    if f.name in _CHOICES:
        if value not in _CHOICES[f.name]:
            raise ValueError(f"{where} must be one of {list(_CHOICES[f.name])}, got {value!r}")
    elif f.type == "bool":
        if not isinstance(value, bool):
            raise TypeError(f"{where} must be a bool, got {value!r}")
    elif f.type == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
            raise TypeError(f"{where} must be a non-negative number, got {value!r}")
    elif f.type == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise TypeError(f"{where} must be a non-negative integer, got {value!r}")
    elif f.type == "str":
        if not isinstance(value, str):
            raise TypeError(f"{where} must be a string, got {value!r}")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    return '"' + "".join(_toml_char(c) for c in str(value)) + '"'


def _toml_char(c: str) -> str:
    """A character of a TOML basic string (control characters escaped)."""
    if c in ('"', "\\"):
        return "\\" + c
    if c < " " or c == "\x7f":
        return f"\\u{ord(c):04x}"
    return c


_BUILTIN: dict[str, Profile] = {
    "local": Profile(
        name="local", on_node=True,
        crash_order="omit_one",
        notes="a local disk: coherent, entries durable after fsync of the directory, torn writes at 4 KiB",
    ),
    "nfs": Profile(
        name="nfs",
        acregmin=3.0, acregmax=60.0, acdirmin=30.0, acdirmax=60.0,
        lookupcache="all", eexist_drops_entry=False, write_back="close", data_durable="close", entry_durable="op",
        unlink_open="estale", silly_rename=True, crash_order="omit_one",
        mtime_granularity=1.0, rpc_latency=5e-4, bandwidth=1e9, jitter=0.5,
        notes="Linux NFS client defaults (nfs(5)): close-to-open, lookupcache=all, ESTALE, silly rename, "
              "EEXIST leaves a stale negative entry (the makedirs trap)",
    ),
    "lustre": Profile(
        name="lustre",
        write_back="locked", entry_durable="op", flock="node", crash_order="omit_one",
        rpc_latency=3e-4, bandwidth=2e9, jitter=0.5,
        notes="coherent through the lock manager; localflock; client eviction drops dirty data (then EIO)",
    ),
    "objectstore": Profile(
        name="objectstore",
        acregmin=60.0, acregmax=60.0, acdirmin=60.0, acdirmax=60.0,
        lookupcache="all", lookup_tied_to_parent=False, positive_ttl=60.0, negative_ttl=5.0,
        write_back="close", upload="whole", create_visible="close", data_durable="close",
        entry_durable="op", rename="copy_delete", dir_rename=False, exclusive_create="racy",
        flock="none", unlink_open="estale", torn_sector=0, mtime_granularity=1.0,
        rpc_latency=0.02, bandwidth=5e8, jitter=0.5,
        notes="gcsfuse/s3fs-like: objects appear at close, last close wins, rename is copy+delete",
    ),
}


def get(name: str | Profile) -> Profile:
    """A built-in profile by name (a Profile passes through)."""
    if isinstance(name, Profile):
        return name
    try:
        return _BUILTIN[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown profile {name!r}; built-in profiles: {names()}") from None


def names() -> list[str]:
    return list(_BUILTIN)
