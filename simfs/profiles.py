"""Filesystem profiles: the named parameters that make a simulated mount behave like a local
disk, NFS, BeeGFS, Lustre or an object-store FUSE mount.

Every parameter is documented where it is declared (what it models and its domain; see
:func:`describe`), and every built-in profile names, next to each value that differs from the
dataclass default, the kernel function, man page option or document it follows
(``Profile.sources``). The rule: a default follows the Linux kernel or the filesystem's own
documentation, never what makes a demonstration fail."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Literal

from . import plaindata
from .errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

_CHOICES: dict[str, tuple[str, ...]] = {
    "lookupcache": ("all", "positive", "none"),
    "write_back": ("through", "close", "locked"),
    "upload": ("extents", "whole"),
    "create_visible": ("open", "close"),
    "data_durable": ("fsync", "close", "replayed"),
    "entry_durable": ("dir_fsync", "op"),
    "rename": ("atomic", "copy_delete"),
    "exclusive_create": ("atomic", "racy"),
    "flock": ("cluster", "node", "none"),
    "unlink_open": ("posix", "estale"),
    "crash_order": ("prefix", "omit_one"),
    "persistence": ("posix", "ext4", "xfs"),
    "change_detection": ("change_attr", "timestamps"),
    "dir_mtime": ("real", "fixed"),
}

KiB, MiB, GiB, TiB, PiB = (1 << 10), (1 << 20), (1 << 30), (1 << 40), (1 << 50)
JIFFY = 0.004  # one tick of the kernel's coarse clock at CONFIG_HZ=250 (Ubuntu's generic kernels)


def _param(default: Any, doc: str) -> Any:
    """A profile parameter: its default and what it models (shown by ``simfs profiles``)."""
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class Profile:
    """How one simulated mount behaves. Times are virtual seconds, sizes bytes.

    Attribute caching follows Linux NFS: a first fetch gets a ttl in
    ``[acXXmin, acXXmax]`` (the node's cache history is unknown), an unchanged
    revalidation doubles it up to ``acXXmax``, a change resets it to ``acXXmin``.
    """

    name: str = _param("custom", "the profile's name (str)")
    on_node: bool = _param(
        False, "a disk inside a node rather than a network server: a crash of either is a power loss of both (bool)")
    acregmin: float = _param(
        0.0, "shortest lifetime of a file's cached attributes, seconds >= 0 (nfs(5) acregmin; 0: never cached)")
    acregmax: float = _param(
        0.0, "longest lifetime of a file's cached attributes, seconds >= acregmin (nfs(5) acregmax; inf allowed)")
    acdirmin: float = _param(
        0.0, "shortest lifetime of a directory's cached attributes, seconds >= 0 (nfs(5) acdirmin)")
    acdirmax: float = _param(
        0.0, "longest lifetime of a directory's cached attributes, seconds >= acdirmin (nfs(5) acdirmax)")
    lookupcache: Literal["all", "positive", "none"] = _param(
        "none", "which name lookups a node caches: 'all' (found and not-found), 'positive' (found only), "
                "'none' (nfs(5) lookupcache)")
    lookup_tied_to_parent: bool = _param(
        True, "a cached lookup is trusted only while its directory's cached attributes are, and dropped when the "
              "directory is seen to change (Linux NFS: fs/nfs/dir.c nfs_check_verifier); False: entries live "
              "positive_ttl / negative_ttl on their own (per-name caches of FUSE object stores) (bool)")
    positive_ttl: float = _param(
        math.inf, "upper bound on the life of a cached 'found' lookup, seconds >= 0 (inf: bounded by the parent only)")
    negative_ttl: float = _param(
        math.inf, "upper bound on the life of a cached 'not found' lookup, seconds >= 0")
    eexist_drops_entry: bool = _param(
        True, "a failed create/mkdir/symlink (any errno, EEXIST included) forgets the node's cached entry, so the "
              "next stat asks the server (Linux d_drop in fs/nfs/dir.c); False: a cached 'not found' survives "
              "EEXIST, and os.makedirs(exist_ok=True) raises FileExistsError (bool)")
    cto: bool = _param(
        True, "close-to-open: open() asks the server for fresh attributes, stat() does not (nfs(5) cto) (bool)")
    write_back: Literal["through", "close", "locked"] = _param(
        "through", "when written data reaches the server: 'through' at write(), 'close' at close()/fsync() "
                   "(dirty data waits on the node), 'locked' held on the node but recalled by a lock manager "
                   "before another node looks (Lustre LDLM)")
    upload: Literal["extents", "whole"] = _param(
        "extents", "how dirty data is sent: 'extents' as the ranges written, 'whole' the whole object re-uploaded "
                   "(object stores), refused with ESTALE if the object changed since this node opened it")
    create_visible: Literal["open", "close"] = _param(
        "open", "when a new file's name appears to other nodes: at open(O_CREAT) or when it is first uploaded")
    data_durable: Literal["fsync", "close", "replayed"] = _param(
        "fsync", "what makes file data survive a server crash: fsync(), or also close() (an NFS COMMIT), or "
                 "'replayed': the writing client keeps what the server has not committed and sends it again "
                 "when the server restarts, so only a crash of that client (or of the whole cluster) loses it")
    entry_durable: Literal["dir_fsync", "op"] = _param(
        "dir_fsync", "what makes a new, removed or renamed name survive a server crash: fsync of its directory, or "
                     "the operation itself (servers that commit metadata before replying)")
    rename: Literal["atomic", "copy_delete"] = _param(
        "atomic", "rename(2) is one atomic server operation, or a copy then a delete that others can see between")
    dir_rename: bool = _param(
        True, "a directory with entries can be renamed; False: EMFILE, as gcsfuse with rename-dir-limit=0 (bool)")
    exclusive_create: Literal["atomic", "racy"] = _param(
        "atomic", "O_EXCL is checked by the server ('atomic') or by a lookup before the create ('racy')")
    flock: Literal["cluster", "node", "none"] = _param(
        "cluster", "which processes flock()/lockf() exclude: every node's ('cluster'), only the same node's "
                   "('node'), none ('none': locks always succeed)")
    unlink_open: Literal["posix", "estale"] = _param(
        "posix", "a file unlinked by one node while another has it open: kept until the last close ('posix') or "
                 "gone, so the other node's next I/O gets ESTALE ('estale')")
    silly_rename: bool = _param(
        False, "unlinking a file this node has open renames it to a hidden .nfs name until the last close (bool)")
    persistence: Literal["posix", "ext4", "xfs"] = _param(
        "posix", "the persistence model of the server's disk, what a crash keeps of what was not made durable "
                 "(`simfs profiles NAME` lists its rules and sources): 'posix' only what fsync promises; 'ext4' "
                 "(data=ordered, auto_da_alloc) and 'xfs' keep metadata operations in order and commit them all "
                 "at any fsync")
    dirty_expire: float = _param(
        30.0, "seconds data may stay dirty in the disk's page cache: the flusher writes back every file first "
              "dirtied longer ago, after which no crash loses it (Documentation/admin-guide/sysctl/vm.rst "
              "dirty_expire_centisecs, default 3000; fs/fs-writeback.c wb_check_old_data_flush); inf: never")
    dirty_writeback: float = _param(
        5.0, "seconds between the flusher's wakeups, which write back what expired (vm.rst "
             "dirty_writeback_centisecs, default 500; 0 disables periodic writeback, as in the kernel)")
    dirty_background_bytes: float = _param(
        0.1 * GiB, "dirty bytes on the disk past which the flusher writes back at once, oldest dirtied files "
                   "first, until they are below again (vm.rst dirty_background_bytes; mm/page-writeback.c "
                   "balance_dirty_pages -> wb_start_background_writeback). The kernel's default is "
                   "dirty_background_ratio = 10 percent of the dirtyable memory; simfs models no node memory and "
                   "takes 10 percent of 1 GiB, a bound on what a crash can lose and on a run's memory (set 10 "
                   "percent of your node's free and reclaimable memory, or its vm.dirty_background_bytes; inf: "
                   "no threshold)")
    crash_order: Literal["prefix", "omit_one"] = _param(
        "prefix", "which unsynced operations a server crash keeps: a prefix, or a prefix with one omitted (an "
                  "ordered persistence model: of the unsynced writes)")
    torn_sector: int = _param(
        4096, "a write not yet durable tears at this granularity in a crash, bytes >= 0 (0: writes persist whole)")
    mtime_granularity: float = _param(
        0.0, "the server's timestamp tick: mtime and ctime are rounded down to it, seconds >= 0 (0: exact)")
    change_detection: Literal["change_attr", "timestamps"] = _param(
        "change_attr", "how a node tells that a file or directory changed, for its attribute, data and lookup "
                       "caches: a change counter that moves on every change ('change_attr', NFSv4), or mtime, "
                       "ctime and size ('timestamps', NFSv3), which miss a same-size change within one tick of "
                       "mtime_granularity")
    dir_mtime: Literal["real", "fixed"] = _param(
        "real", "a directory's mtime and ctime move when entries are added or removed ('real', POSIX), or stay "
                "at its creation time ('fixed': object-store mounts fake directory times)")
    capacity: float = _param(
        math.inf, "bytes of file data the mount can hold, >= 0 (inf: unlimited); a write past it fails with ENOSPC "
                  "where the data reaches the server (write() where the mount claims space at write, else close() "
                  "and fsync()), and statvfs reports it. Counts file bytes, not blocks, metadata or directories; a "
                  "hole left by an extending truncate or a write past the end takes none")
    rpc_latency: float = _param(2e-6, "virtual seconds per request to the server, >= 0")
    local_latency: float = _param(1e-7, "virtual seconds per operation answered from the node's caches, >= 0")
    bandwidth: float = _param(2e9, "bytes per virtual second of data sent to or from the server, > 0")
    jitter: float = _param(0.0, "relative spread of rpc_latency, in [0, 1) (each request draws its latency)")
    notes: str = field(default="", compare=False, metadata={"doc": "what the profile models, and where it differs "
                                                                   "from the real filesystem"})
    sources: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({}), compare=False,
        metadata={"doc": "parameter name -> the kernel source, man page or document its value follows"})

    def __post_init__(self) -> None:
        for f in fields(self):
            _check_field(f, getattr(self, f.name), self.name)
        for lo, hi in (("acregmin", "acregmax"), ("acdirmin", "acdirmax")):
            if getattr(self, lo) > getattr(self, hi):
                raise ConfigError(f"profile {self.name!r}: {lo}={getattr(self, lo)} exceeds {hi}={getattr(self, hi)}")
        if not 1 <= self.bandwidth <= 1e15:
            raise ConfigError(f"profile {self.name!r}: bandwidth must be a number in [1, 1e15] bytes/s, "
                              f"got {self.bandwidth}")
        for name in ("rpc_latency", "local_latency", "mtime_granularity"):
            if getattr(self, name) > 3600:
                raise ConfigError(f"profile {self.name!r}: {name} must be at most 3600 seconds, "
                                  f"got {getattr(self, name)}")
        if not 0 <= self.jitter < 1:
            raise ConfigError(f"profile {self.name!r}: jitter must be in [0, 1), got {self.jitter}")
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle and deepcopy (a read-only mapping cannot be pickled itself)."""
        return _rebuild, (self.to_dict(), dict(self.sources))

    @property
    def coherent(self) -> bool:
        """True when no node ever sees stale metadata."""
        return self.acregmax == 0 and self.acdirmax == 0 and self.lookupcache == "none"

    def source(self, name: str) -> str | None:
        """Where this profile's value of parameter ``name`` comes from (None: not documented)."""
        return self.sources.get(name)

    def replace(self, **params: Any) -> Profile:
        """A copy with some parameters changed (unknown names are an error). A changed value
        loses the source of the old one unless ``sources={name: ...}`` names its own; the given
        sources are merged into the kept ones."""
        unknown = sorted(set(params) - {f.name for f in fields(self)})
        if unknown:
            raise ConfigError(f"unknown profile parameter(s) {unknown}; known: {param_names()}")
        given = params.pop("sources", None)
        sources = {k: v for k, v in self.sources.items() if k not in params or params[k] == getattr(self, k)}
        if given:
            sources.update(given)
        return dataclasses.replace(self, **params, sources=sources)

    def to_dict(self) -> dict[str, Any]:
        """The parameters (and notes) as plain values; sources are not parameters."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "sources"}

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "<dict>") -> Profile:
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigError(f"{source}: unknown profile parameter(s) {unknown}; known: {param_names()}")
        values = dict(data)
        for f in fields(cls):
            value = values.get(f.name)
            if f.type == "float" and isinstance(value, int) and not isinstance(value, bool):
                values[f.name] = float(value)
        try:
            return cls(**values)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{source}: {exc}") from None

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write this profile as TOML: one flat table of parameters, then a ``[sources]`` table."""
        lines = [f"# simfs profile {self.name!r}"]
        for key, value in self.to_dict().items():
            lines.append(f"{key} = {_toml_value(value)}")
        if self.sources:
            lines.append("\n[sources]")
            for key, text in self.sources.items():
                lines.append(f"{key} = {_toml_value(text)}")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Profile:
        """Read a profile written by :meth:`save` (or by the cluster probe)."""
        with open(path, "rb") as f:
            try:
                data = tomllib.load(f)
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"{os.fspath(path)}: not valid TOML: {exc}") from None
        if "profile" in data and isinstance(data["profile"], dict) and len(data) == 1:
            data = data["profile"]
        if not data:
            raise ConfigError(f"{os.fspath(path)}: names no profile parameter (an empty file is not a profile; "
                              f"write one with Profile.save, or give base = \"nfs\" and the parameters to change)")
        base = data.pop("base", None) if isinstance(data, dict) else None
        if base is not None:
            if base not in _BUILTIN:
                raise ConfigError(f"{os.fspath(path)}: base must be one of {names()}, got {base!r}")
            merged = {**_BUILTIN[base].to_dict(), **{k: v for k, v in data.items() if k != "sources"}}
            data = {**merged, **({"sources": data["sources"]} if "sources" in data else {})}
        return cls.from_dict(data, source=os.fspath(path))


def _rebuild(params: dict[str, Any], sources: dict[str, str]) -> Profile:
    return Profile(**params, sources=sources)


def param_names() -> list[str]:
    """The names of the parameters (every field but ``sources``)."""
    return [f.name for f in fields(Profile) if f.name != "sources"]


def describe(name: str) -> str:
    """What parameter ``name`` models and its domain."""
    for f in fields(Profile):
        if f.name == name:
            return str(f.metadata.get("doc", ""))
    raise ConfigError(f"unknown profile parameter {name!r}; known: {param_names()}")


def _check_field(f: dataclasses.Field[Any], value: Any, profile: str) -> None:
    where = f"profile {profile!r}: parameter {f.name}"
    if f.name == "sources":
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a mapping of parameter name to text, got {value!r}")
        known = set(param_names())
        for key, text in value.items():
            if key not in known:
                raise ConfigError(f"{where}: {key!r} is not a parameter; known: {sorted(known)}")
            if not isinstance(text, str):
                raise ConfigError(f"{where}: the source of {key} must be a string, got {text!r}")
    elif f.name in _CHOICES:
        if value not in _CHOICES[f.name]:
            raise ConfigError(f"{where} must be one of {list(_CHOICES[f.name])}, got {value!r}")
    elif f.type == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be a bool, got {value!r}")
    elif f.type == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
            raise ConfigError(f"{where} must be a non-negative number, got {value!r}")
    elif f.type == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{where} must be a non-negative integer, got {value!r}")
    elif f.type == "str" and not isinstance(value, str):
        raise ConfigError(f"{where} must be a string, got {value!r}")


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


# -- sources shared by several profiles ---------------------------------------------------------
_NFS5 = "nfs(5) (nfs-utils utils/mount/nfs.man)"
_ALICE = ("the server's local filesystem (ext4/XFS) persists unsynced operations out of order: ALICE, Pillai et "
          "al., 'All File Systems Are Not Created Equal', OSDI'14; modelled as a prefix with at most one omitted")
_JIFFY = ("Documentation/filesystems/multigrain-ts.rst: inode times come from the coarse clock, 'updated every "
          "jiffy, so any change that happens within that jiffy will end up with the same timestamp'; one jiffy is "
          "4 ms at CONFIG_HZ=250 (Ubuntu generic kernels). Linux >= 6.13 stamps ext4/XFS/btrfs/tmpfs files "
          "fine-grained once their times were queried: use 0.0 for such servers")
_NO_CAPACITY = "no documented default (a filesystem is as big as it was made); "
_SERVER_FS = ("the server's backing filesystem is the site's choice (ext4, XFS, ZFS...) and no default is "
              "documented: 'posix' assumes only what fsync promises; set 'ext4' or 'xfs' to match your servers")
_PERF = ("not a semantic and not documented anywhere: an illustrative order of magnitude; measure your cluster "
         "and override")



_BUILTIN: dict[str, Profile] = {
    "local": Profile(
        name="local", on_node=True, persistence="ext4", crash_order="omit_one", mtime_granularity=JIFFY,
        capacity=float(TiB),
        notes="a node's local disk (ext4, data=ordered): coherent (one kernel), space reserved at write() "
              "(delalloc), metadata durable in order and at any fsync, unsynced writes lost or torn at 4 KiB",
        sources={
            "on_node": "a disk inside the node: its server is that node's kernel, so a crash of either is a power "
                       "loss of both",
            "write_back": "one kernel: write() puts data in the page cache every process of the node reads; ext4 "
                          "delalloc reserves space at write() (fs/ext4/inode.c ext4_da_reserve_space), so ENOSPC "
                          "and EDQUOT surface at write()",
            "entry_durable": "fsync(2): 'Calling fsync() does not necessarily ensure that the entry in the "
                             "directory containing the file has also reached disk. For that an explicit fsync() "
                             "on a file descriptor for the directory is also needed.' (ext4 also commits names "
                             "at an fsync of any file: persistence)",
            "persistence": "ext4 with mke2fs's and the kernel's defaults: data=ordered and auto_da_alloc "
                           "(Documentation/admin-guide/ext4.rst); `simfs profiles local` lists the model's rules",
            "crash_order": _ALICE + " (under ext4: of the unsynced writes, which persist apart from metadata)",
            "torn_sector": "ext4's 4 KiB block (mke2fs.conf blocksize = 4096); ALICE (OSDI'14) tears unsynced "
                           "writes at block granularity",
            "mtime_granularity": _JIFFY,
            "capacity": _NO_CAPACITY + "1 TiB stands for a node-local NVMe scratch disk; set the real size",
        },
    ),
    "nfs": Profile(
        name="nfs",
        acregmin=3.0, acregmax=60.0, acdirmin=30.0, acdirmax=60.0,
        lookupcache="all", write_back="close", data_durable="close", entry_durable="op",
        unlink_open="estale", silly_rename=True, crash_order="omit_one",
        mtime_granularity=JIFFY, capacity=float(PiB), rpc_latency=5e-4, bandwidth=1e9, jitter=0.5,
        notes="the Linux NFS client with no mount options (NFSv4.2 negotiated first): close-to-open, attribute "
              "caches 3-60 s / 30-60 s with back-off, lookupcache=all (a cached 'not found' lives until the "
              "directory's attributes expire and it is seen to change), a failed create drops its entry (so "
              "makedirs(exist_ok=True) does not raise on kernel NFS), write errors (ENOSPC, EDQUOT) at "
              "close()/fsync(), ESTALE and silly rename. NFSv3 (change detection by timestamps): "
              "replace(change_detection='timestamps'). simfs differs: a write-back error is reported once per node "
              "and file, to the next close()/fsync() (Linux keeps it per open file and also fails later write() "
              "calls: fs/nfs/file.c nfs_file_write); a WRITE that does not fit is cut where the space ends",
        sources={
            "acregmin": "include/uapi/linux/nfs_fs.h NFS_DEF_ACREGMIN (3); " + _NFS5 + " acregmin: 'the NFS "
                        "client uses a 3-second minimum'",
            "acregmax": "include/uapi/linux/nfs_fs.h NFS_DEF_ACREGMAX (60); " + _NFS5 + " acregmax; doubling "
                        "while unchanged: fs/nfs/inode.c nfs_update_inode (attrtimeo <<= 1)",
            "acdirmin": "include/uapi/linux/nfs_fs.h NFS_DEF_ACDIRMIN (30); " + _NFS5 + " acdirmin",
            "acdirmax": "include/uapi/linux/nfs_fs.h NFS_DEF_ACDIRMAX (60); " + _NFS5 + " acdirmax",
            "lookupcache": _NFS5 + " lookupcache: 'If this option is not specified, or if all is specified, the "
                           "client assumes both types of directory cache entries are valid until their parent "
                           "directory's cached attributes expire'",
            "lookup_tied_to_parent": "fs/nfs/dir.c nfs_neg_need_reval / nfs_check_verifier: a negative dentry is "
                                     "trusted while the parent's attributes are valid and its change attribute "
                                     "matches",
            "eexist_drops_entry": "fs/nfs/dir.c nfs_create / nfs_mkdir / nfs_mknod / nfs_symlink: 'out_err: "
                                  "d_drop(dentry)' ('Following a failed create operation, we drop the dentry "
                                  "rather than retain a negative dentry')",
            "cto": _NFS5 + " cto: 'If neither option is specified (or if cto is specified), the client uses "
                   "close-to-open cache coherence semantics'; fs/nfs/dir.c nfs_lookup_verify_inode",
            "write_back": _NFS5 + " 'the NFS client delays sending application writes to the server until ... "
                          "close(2)'; fs/nfs/file.c nfs_file_flush ('Flush all dirty pages, and check for write "
                          "errors') returns ENOSPC/EDQUOT from close()",
            "data_durable": "fs/nfs/file.c nfs_file_flush -> nfs_wb_all: WRITE and COMMIT before close() "
                            "returns; " + _NFS5 + " 'When the application closes the file, the NFS client writes "
                            "back any pending changes'",
            "entry_durable": "exports(5) sync, the default since nfs-utils 1.0.1: 'Reply to requests only after "
                             "the changes have been committed to stable storage'",
            "unlink_open": "RFC 1813 NFS3ERR_STALE: the server keeps no unlinked file for other clients (silly "
                           "rename protects only the unlinking client's opens); tox-dev/filelock PR #669, "
                           "chimera-nas/chimera PR #286",
            "silly_rename": "fs/nfs/dir.c nfs_unlink -> nfs_sillyrename (fs/nfs/unlink.c): a hidden '.nfs' name "
                            "until the last close",
            "persistence": _SERVER_FS,
            "crash_order": _ALICE + " (data written UNSTABLE and not yet COMMITted)",
            "mtime_granularity": _JIFFY,
            "change_detection": _NFS5 + " nfsvers: 'the client tries version 4.2 first'; 'NFS version 4 caching "
                                "features': the change attribute is 'independent of the time stamp resolution'; "
                                "fs/nfs/inode.c nfs_update_inode invalidates on change_attr. NFSv3 builds it from "
                                "ctime (fs/nfs/nfs3xdr.c decode_fattr3): 'timestamps'",
            "capacity": _NO_CAPACITY + "1 PiB stands for a shared cluster filesystem; set the export's size",
            "rpc_latency": _PERF + " (0.5 ms per request)",
            "bandwidth": _PERF + " (1 GB/s, about a 10 GbE link)",
            "jitter": _PERF,
        },
    ),
    "beegfs": Profile(
        name="beegfs",
        acregmin=0.0, acregmax=0.0, acdirmin=1.0, acdirmax=1.0,
        lookupcache="all", negative_ttl=1.0, eexist_drops_entry=False,
        write_back="close", flock="node", crash_order="omit_one",
        mtime_granularity=1.0, capacity=float(PiB), rpc_latency=5e-4, bandwidth=1e9, jitter=0.5,
        notes="the BeeGFS client with its code defaults (client_module Config.c): directory attributes cached 1 s, "
              "file attributes not cached, buffered write-back flushed at close, flock/fcntl locks local to each "
              "node, fsync forwarded to the servers. The reported trap (prime-rl PR #2523: 'On BeegFS, "
              "Path.mkdir(..., exist_ok=True) can still surface FileExistsError when another rank wins the mkdir "
              "and metadata is briefly stale') is modelled as a 'not found' entry that survives EEXIST and lives at "
              "most the 1 s directory validity. The mechanism is inferred: BeeGFS's own default "
              "tuneENOENTCacheValidityMS=0 caches no negative lookups, which suggests a short metadata-server race "
              "(cf. ThinkParQ/beegfs#111); simfs shows it as a client-visible stale entry of <= 1 s, which also "
              "makes any 'not found' (not only one followed by EEXIST) live up to 1 s",
        sources={
            "acregmin": "ThinkParQ/beegfs client_module Config.c tuneFileSubentryCacheValidityMS = 0 "
                        "(FhgfsInode_isCacheValid: 'defaults to 0'; beegfs-client.conf's text says 1000: the code "
                        "wins)",
            "acregmax": "as acregmin: tuneFileSubentryCacheValidityMS = 0",
            "acdirmin": "Config.c tuneDirSubentryCacheValidityMS = 1000; beegfs-client.conf: 'Validity time of "
                        "directory attribute data ... Default: 1000'",
            "acdirmax": "as acdirmin: tuneDirSubentryCacheValidityMS = 1000",
            "lookupcache": "inferred from prime-rl PR #2523 ('metadata is briefly stale' after EEXIST); BeeGFS's "
                           "Config.c tuneENOENTCacheValidityMS = 0 caches no negative entries itself",
            "negative_ttl": "bounded by the directory attribute validity, tuneDirSubentryCacheValidityMS = 1000 "
                            "(mechanism inferred, see notes)",
            "eexist_drops_entry": "prime-rl PR #2523 / #2699: FileExistsError from mkdir(exist_ok=True) on BeeGFS "
                                  "when another rank wins the mkdir (CPython os.makedirs re-raises when isdir() "
                                  "says False)",
            "write_back": "Config.c tuneFileCacheType = buffered; beegfs-client.conf: 'The cache protocols are "
                          "currently non-coherent (but caches are automatically flushed when a file is closed)'",
            "data_durable": "Config.c tuneRemoteFSync = true (fsync is forwarded to the storage servers); "
                            "sysSyncOnClose = false (close does not sync)",
            "flock": "beegfs-client.conf tuneUseGlobalFileLocks: 'checked for conflicts on the local machine only "
                     "(=false) or globally on the servers (=true). Default: false'",
            "change_detection": "buffered mode caches per open file and reads the storage servers after a new "
                                "open, file attributes are not cached: modelled as exact change detection "
                                "(inferred)",
            "persistence": _SERVER_FS,
            "crash_order": _ALICE + " (BeeGFS targets are ext4/XFS)",
            "mtime_granularity": "ThinkParQ/beegfs meta StatData keeps whole seconds (modificationTimeSecs, "
                                 "setModificationTimeSecs(getTimeval()->tv_sec))",
            "capacity": _NO_CAPACITY + "1 PiB stands for a shared cluster filesystem; BeeGFS caches statfs "
                        "tuneStatFsCacheSecs = 10 s (not modelled)",
            "rpc_latency": _PERF,
            "bandwidth": _PERF,
            "jitter": _PERF,
        },
    ),
    "lustre": Profile(
        name="lustre",
        write_back="locked", data_durable="replayed", entry_durable="op", crash_order="omit_one",
        mtime_granularity=1.0, capacity=float(PiB), rpc_latency=3e-4, bandwidth=2e9, jitter=0.5,
        notes="Lustre (>= 2.12.3 client defaults): coherent through the distributed lock manager (no attribute "
              "ttl), flock coherent across nodes (mount.lustre(8) flock; 'localflock' is flock='node'), space "
              "granted at write() (modelled as a server-wide reservation), client eviction drops dirty data "
              "(then EIO); noflock (ENOSYS) is not modelled. A stale 'not found' reported on "
              "some Lustre scratch systems is not the default: profiles.get('lustre')"
              ".replace(**profiles.LUSTRE_STALE_NEGATIVE)",
        sources={
            "write_back": "wiki.lustre.org FAQ: 'Complete cache coherence is provided for both metadata ... and "
                          "file data. Clients and servers both take locks with a distributed lock management "
                          "service; caches are flushed before locks are released'; space for cached writes is "
                          "granted by the OST, so ENOSPC surfaces at write() (Lustre Operations Manual, grants; "
                          "not re-read here)",
            "data_durable": "Lustre recovery: a client keeps written pages it sent but the OST has not committed "
                            "('unstable' pages, LU-2139) and resends them when the OST restarts, close() or not; "
                            "lost only with the client. Replays are modelled client by client (Lustre orders "
                            "them by transaction number: overlapping unsynced writes of one file from two nodes "
                            "are not replayed in exact order)",
            "entry_durable": "Lustre recovery: clients replay uncommitted metadata operations after an MDS "
                             "restart (mount.lustre(8) recovery_time_soft 300 s / hard 900 s)",
            "flock": "mount.lustre(8) flock: 'coherent across all client nodes ... enabled by default in Lustre "
                     "2.12.3 and newer'; localflock = 'node'; noflock (ENOSYS) is not modelled",
            "persistence": _SERVER_FS + " (ldiskfs OSTs are ext4-based, ZFS OSTs are not)",
            "crash_order": _ALICE + " (ldiskfs is ext4)",
            "mtime_granularity": "lustre/include/lu_object.h struct lu_attr: la_mtime / la_ctime are s64 seconds",
            "capacity": _NO_CAPACITY + "1 PiB stands for a shared cluster filesystem; set the real size",
            "rpc_latency": _PERF,
            "bandwidth": _PERF,
            "jitter": _PERF,
        },
    ),
    "objectstore": Profile(
        name="objectstore",
        acregmin=60.0, acregmax=60.0, acdirmin=60.0, acdirmax=60.0,
        lookupcache="all", lookup_tied_to_parent=False, positive_ttl=60.0, negative_ttl=5.0,
        write_back="close", upload="whole", create_visible="close", data_durable="close",
        entry_durable="op", rename="copy_delete", dir_rename=False, exclusive_create="racy",
        flock="node", unlink_open="estale", torn_sector=0, dir_mtime="fixed",
        rpc_latency=0.02, bandwidth=5e8, jitter=0.5,
        notes="gcsfuse defaults (cfg/params.yaml, docs/semantics.md; staged writes): stat cache 60 s, negative "
              "entries 5 s, a new object appears at close, close uploads the whole object and the first flush "
              "wins (another node's later flush of an object it opened before gets ESTALE), rename is copy + "
              "delete, renaming a directory with entries fails (EMFILE), rmdir lists then deletes, directory "
              "times are fixed. semantics.md still shows an older 'last writer wins' example next to the ESTALE "
              "rule; simfs follows the ESTALE rule (precondition-errors defaults to true). simfs differs: the "
              "generation an upload is checked against is the one the node knew at its first write (gcsfuse: the "
              "one its file handle opened; the same within the 60 s stat cache); close-to-open is kept although "
              "semantics.md promises it only with caching disabled; streaming writes (the default since v3.0) are "
              "modelled as staged writes (both upload at close); implicit directories are not modelled",
        sources={
            "acregmin": "gcsfuse cfg/params.yaml metadata-cache.ttl-secs = 60",
            "acregmax": "gcsfuse metadata-cache.ttl-secs = 60",
            "acdirmin": "gcsfuse metadata-cache.ttl-secs = 60",
            "acdirmax": "gcsfuse metadata-cache.ttl-secs = 60",
            "lookupcache": "gcsfuse docs/semantics.md: 'Positive and negative stat results will be cached'",
            "lookup_tied_to_parent": "gcsfuse caches stat results per object name, not per directory "
                                     "(docs/semantics.md, Stat caching)",
            "positive_ttl": "gcsfuse metadata-cache.ttl-secs = 60",
            "negative_ttl": "gcsfuse cfg/params.yaml metadata-cache.negative-ttl-secs = 5",
            "write_back": "gcsfuse docs/semantics.md, staged writes: 'Upon closing or fsyncing the file, the file "
                          "is then written to your Cloud Storage bucket'",
            "upload": "gcsfuse docs/semantics.md: 'writes the contents of the local file back to Cloud Storage as "
                      "a new object generation ... Modifying even a single bit of an object results in the full "
                      "re-upload'; 'the flush from first mount wins. Other mounts ... will encounter a "
                      "syscall.ESTALE error' (file-system.precondition-errors = true)",
            "create_visible": "gcsfuse docs/semantics.md: 'Starting with version 1.2, the default behavior is to "
                              "not create this zero-byte file' (a new object appears when it is uploaded)",
            "data_durable": "gcsfuse docs/semantics.md: 'Data is guaranteed to be on GCS only after the file is "
                            "closed'",
            "entry_durable": "Cloud Storage is strongly consistent: an upload that returned is durable "
                             "(cloud.google.com/storage/docs/consistency)",
            "rename": "flat GCS buckets have no rename: a copy then a delete (gcsfuse; mechanism not re-read "
                      "here); hierarchical-namespace buckets rename folders atomically (not modelled)",
            "dir_rename": "gcsfuse cfg/params.yaml file-system.rename-dir-limit = 0; internal/fs/fs.go: "
                          "'too many objects to be renamed: %w', syscall.EMFILE when descendants > limit",
            "exclusive_create": "a new object exists only on its node until close (create_visible), so O_EXCL "
                                "is checked by a lookup; the second upload then fails its precondition (ESTALE)",
            "flock": "FUSE without FUSE_FLOCK_LOCKS (gcsfuse's jacobsa/fuse does not request it): fs/fuse/inode.c "
                     "process_init_reply sets fc->no_flock, and fs/fuse/file.c fuse_file_flock then takes "
                     "locks_lock_file_wait(): locks local to the node",
            "unlink_open": "gcsfuse docs/semantics.md, Stale File Handle Errors: reads and writes of an object "
                           "deleted or replaced elsewhere get ESTALE",
            "torn_sector": "an object generation is uploaded whole or not at all (Cloud Storage consistency)",
            "capacity": "unlimited (the dataclass default): a Cloud Storage bucket has no documented capacity; "
                        "gcsfuse's staged writes need local temp-dir space (semantics.md: 'out of space' error), "
                        "which is not modelled",
            "dir_mtime": "gcsfuse docs/semantics.md: 'Cloud Storage FUSE does not keep track of modification "
                         "time for directories'; mountpoint-s3 uses the mount time, s3fs the epoch, goofys the "
                         "mount time (goofys#249): none moves when another client adds an entry",
            "rpc_latency": _PERF + " (20 ms per object request)",
            "bandwidth": _PERF,
            "jitter": _PERF,
        },
    ),
}

_BUILTIN["local-posix"] = _BUILTIN["local"].replace(
    name="local-posix", persistence="posix",
    notes="a node's local disk that promises only what fsync(2) does (strict POSIX persistence): names durable "
          "after fsync of their directory, unsynced operations persisted out of order, torn writes at 4 KiB. "
          "Tests that a job is correct beyond ext4's ordering: btrfs-like logging, other kernels and filesystems",
    sources={"persistence": "fsync(2) and ALICE's abstract persistence model (OSDI'14): the strictest model, for "
                            "portability; ext4's own is the `local` profile"})

LUSTRE_STALE_NEGATIVE: dict[str, Any] = {
    "lookupcache": "all",
    "lookup_tied_to_parent": False,
    "positive_ttl": 0.0,
    "negative_ttl": 30.0,
    "eexist_drops_entry": False,
    "notes": _BUILTIN["lustre"].notes + ". VARIANT lustre+stale-negative: a 'not found' lookup is trusted for "
             "30 s and survives EEXIST. Not a Lustre default and not a documented Lustre behaviour: it models "
             "reports of stale 'does not exist' on Lustre scratch (lingua #49 on TACC, Megatron-Bridge #3886; "
             "neither issue was found verbatim). Documented nearby: LU-14949 (older clients can return one ENOENT "
             "when a file is renamed over the one being opened) and Megatron-Bridge PR #4865, which measured a "
             "~29 s directory lag on Isilon NFSv4.0 (acdirmin), not on Lustre",
    "sources": {
        "lookupcache": "not a Lustre default (Lustre is coherent through LDLM): reports of stale 'not found' on "
                       "Lustre scratch (lingua #49, Megatron-Bridge #3886), not found verbatim",
        "lookup_tied_to_parent": "the stale entry is not revalidated by the directory (it is no attribute cache)",
        "positive_ttl": "positive lookups stay coherent (LDLM): no cached 'found' is trusted",
        "negative_ttl": "Megatron-Bridge PR #4865 measured a ~29 s visibility lag, on NFS (acdirmin 30 s); no "
                        "Lustre measurement exists",
        "eexist_drops_entry": "the reported failure is FileExistsError from makedirs(exist_ok=True): the stale "
                              "'not found' outlives EEXIST",
    },
}
"""``profiles.get("lustre").replace(**LUSTRE_STALE_NEGATIVE)``: the stale negative stat cache reported
on some Lustre scratch systems (not a default; see its notes for how weak the evidence is)."""


def get(name: str | Profile) -> Profile:
    """A built-in profile by name (a Profile passes through)."""
    if isinstance(name, Profile):
        return name
    try:
        return _BUILTIN[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown profile {name!r}; built-in profiles: {names()}") from None


def names() -> list[str]:
    return list(_BUILTIN)


plaindata.register(_rebuild)
