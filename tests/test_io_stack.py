"""The Python I/O stack inside ranks: open() modes, text and newlines, os-level descriptors,
stat, links, directory walking, pathlib, shutil, tempfile, torch/numpy/pickle files, and the
errors (type, errno, filename) of each. Most checks are differential: the same function runs
on the real disk (in a temporary directory) and inside a simulated rank, and must agree."""

from __future__ import annotations

import errno
import functools
import glob
import io
import itertools
import os
import pathlib
import pickle
import shutil
import stat
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
from hypothesis import example, given, settings
from hypothesis import strategies as st

import simfs

SIM_BASE = "/shared/t"


# -- harness ----------------------------------------------------------------------------------------

def _normalize(value: Any, base: str) -> Any:
    """Replace the base directory by 'BASE' in every string of a (nested) result."""
    if isinstance(value, str):
        return value.replace(base, "BASE")
    if isinstance(value, bytes):
        return value.replace(os.fsencode(base), b"BASE")
    if isinstance(value, (list, tuple)):
        return type(value)(_normalize(v, base) for v in value)
    if isinstance(value, dict):
        return {k: _normalize(v, base) for k, v in value.items()}
    return value


def _outcome(fn: Callable[[], Any]) -> Any:
    """('ok', value) or (exception type, errno name, filename, filename2)."""
    try:
        return ("ok", fn())
    except OSError as exc:
        return (type(exc).__name__, errno.errorcode.get(exc.errno or 0), exc.filename, exc.filename2)


def _sim_job(scenario: Callable[[str], Any], base: str) -> Any:
    os.makedirs(base)
    return scenario(base)


def _sim(scenario: Callable[[str], Any], profile: str = "local") -> Any:
    result = simfs.Cluster(nodes=1, ranks_per_node=1, profile=profile, seed=0).run(_sim_job, scenario, SIM_BASE)
    assert result.ok, result.summary() + "\n" + "".join(result.tracebacks.values())
    return _normalize(result.returns[0], SIM_BASE)


def _real(scenario: Callable[[str], Any], tmp_path: pathlib.Path) -> Any:
    base = str(tmp_path / "t")
    os.makedirs(base)
    return _normalize(scenario(base), base)


def _compare(real: dict, sim: dict) -> None:
    assert real.keys() == sim.keys()
    diffs = {k: (real[k], sim[k]) for k in real if real[k] != sim[k]}
    assert not diffs, "real vs simulated:\n" + "\n".join(f"  {k}: {r!r} != {s!r}" for k, (r, s) in diffs.items())


# -- scenarios (each runs on the real disk and in a rank) -------------------------------------------

def scen_open_modes(base: str) -> dict:
    out: dict = {}
    p = f"{base}/x"
    with open(p, "xb") as f:
        out["x_write"] = f.write(b"abc")
    out["x_again"] = _outcome(lambda: open(p, "x"))
    with open(p, "ab") as f:
        f.write(b"def")
        out["a_tell"] = f.tell()
    with open(p, "r+b") as f:
        f.seek(2)
        f.write(b"ZZ")
        f.seek(0)
        out["rplus"] = f.read()
        out["truncate"] = f.truncate(4)
        out["tell_after_truncate"] = f.tell()
    out["size"] = os.path.getsize(p)
    with open(p, "w+b") as f:
        out["wplus_empty"] = f.read()
        f.write(b"new")
        f.seek(0)
        out["wplus"] = f.read()
    with open(p, "a+") as f:
        out["aplus_pos"] = f.tell()
        f.seek(0)
        out["aplus_read"] = f.read()
        f.write("q")
        f.seek(0)
        out["aplus_after"] = f.read()
    with open(p, "rb", buffering=0) as f:
        out["unbuffered"] = (type(f).__name__ in ("FileIO", "SimFileIO"), f.read(2), f.readall())
    with open(p) as f:
        out["mode_attrs"] = (f.mode, f.readable(), f.writable(), f.seekable())
        out["write_on_read"] = type(_raises(lambda: f.write("x"))).__name__
    with open(p, "w") as f:
        out["read_on_write"] = type(_raises(lambda: f.read())).__name__
        f.write("0123456789")
    with open(p, "r+") as f:
        f.seek(5)
        f.truncate()
        out["text_truncate"] = f.tell()
    with open(p, "rb") as f:
        out["after_truncate"] = f.read()
        out["seek_past_end"] = f.seek(100)
        out["read_past_end"] = f.read()
    with open(p, "r+b") as f:
        f.seek(8)
        f.write(b"!")
    with open(p, "rb") as f:
        out["hole"] = f.read()
    out["bad_mode"] = type(_raises(lambda: open(p, "rw"))).__name__
    return out


def _raises(fn: Callable[[], Any]) -> BaseException | None:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - the type is the observation
        return exc
    return None


def _write_text(path: str, text: str) -> int:
    with open(path, "w") as f:
        return f.write(text)


def scen_text_and_newlines(base: str) -> dict:
    out: dict = {}
    p = f"{base}/t.txt"
    with open(p, "w", newline="") as f:
        f.write("line1\nline2\r\nline3\rend")
    for key, newline in (("none", None), ("empty", ""), ("lf", "\n"), ("crlf", "\r\n"), ("cr", "\r")):
        with open(p, newline=newline) as f:
            out[f"lines_{key}"] = list(f)
    with open(p) as f:
        out["readline"] = [f.readline(), f.readline(3), f.readline(), f.tell() > 0, f.readline(), f.readline()]
    for key, newline in (("w_none", None), ("w_crlf", "\r\n"), ("w_cr", "\r"), ("w_empty", "")):
        with open(p, "w", newline=newline) as f:
            f.write("a\nb\r\nc")
        with open(p, "rb") as f:
            out[key] = f.read()
    with open(p, "w", encoding="utf-8") as f:
        f.write("héllo ✓ 𝄞\n")
    with open(p, "rb") as f:
        out["utf8_bytes"] = f.read()
    with open(p, encoding="latin-1") as f:
        out["latin1"] = f.read()
    with open(p, "w", encoding="ascii", errors="replace") as f:
        f.write("héllo")
    with open(p, encoding="ascii") as f:
        out["replaced"] = f.read()
    with open(p, "w") as f:
        f.writelines(["x\n", "y\n", "z"])
        f.flush()
    with open(p) as f:
        out["iter"] = [line for line in f]
        f.seek(0)
        out["readlines"] = f.readlines()
        f.seek(0)
        out["read_n"] = (f.read(2), f.read())
    return out


def scen_fds(base: str) -> dict:
    out: dict = {}
    p = f"{base}/fd"
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    out["write"] = os.write(fd, b"hello world")
    out["seek"] = os.lseek(fd, 6, os.SEEK_SET)
    out["read"] = os.read(fd, 100)
    out["read_eof"] = os.read(fd, 100)
    out["seek_end"] = os.lseek(fd, -2, os.SEEK_END)
    out["seek_cur"] = os.lseek(fd, 1, os.SEEK_CUR)
    out["bad_seek"] = _outcome(lambda: os.lseek(fd, -100, os.SEEK_SET))
    out["pwrite"] = os.pwrite(fd, b"W", 0)
    out["pread"] = os.pread(fd, 5, 0)
    out["pos_after_p"] = os.lseek(fd, 0, os.SEEK_CUR)
    fd2 = os.dup2(fd, fd + 50)  # (os.dup of a simulated file is refused: its users are C code)
    out["dup_shares_offset"] = os.lseek(fd2, 0, os.SEEK_CUR)
    os.lseek(fd, 0, os.SEEK_SET)
    out["dup_moved"] = os.lseek(fd2, 0, os.SEEK_CUR)
    os.close(fd)
    out["dup_after_close"] = os.read(fd2, 5)
    st = os.fstat(fd2)
    out["fstat"] = (st.st_size, stat.S_ISREG(st.st_mode), stat.S_ISDIR(st.st_mode))
    os.ftruncate(fd2, 3)
    out["ftruncate"] = os.fstat(fd2).st_size
    os.fsync(fd2)
    os.close(fd2)
    out["ebadf"] = _outcome(lambda: os.read(fd2, 1))
    out["ebadf_close"] = _outcome(lambda: os.close(fd2))
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"+app")
    out["rdonly_read"] = _outcome(lambda: os.read(fd, 1))
    os.close(fd)
    fd = os.open(p, os.O_RDONLY)
    out["append_result"] = os.read(fd, 100)
    out["write_on_rdonly"] = _outcome(lambda: os.write(fd, b"x"))
    with os.fdopen(fd, "rb") as f:
        f.seek(0)
        out["fdopen"] = f.read()
    out["excl"] = _outcome(lambda: os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
    os.close(fd)
    out["o_trunc"] = os.path.getsize(p)
    out["enoent"] = _outcome(lambda: os.open(f"{base}/missing", os.O_RDONLY))
    os.mkdir(f"{base}/d")
    out["dir_wronly"] = _outcome(lambda: os.open(f"{base}/d", os.O_WRONLY))
    dfd = os.open(f"{base}/d", os.O_RDONLY)
    out["dir_fd_read"] = _outcome(lambda: os.read(dfd, 1))
    out["dir_fstat"] = stat.S_ISDIR(os.fstat(dfd).st_mode)
    os.close(dfd)
    out["o_directory"] = _outcome(lambda: os.open(p, os.O_RDONLY | os.O_DIRECTORY))
    return out


def scen_stat(base: str) -> dict:
    out: dict = {}
    os.mkdir(f"{base}/d")
    with open(f"{base}/f", "wb") as f:
        f.write(b"x" * 1234)
    sd, sf = os.stat(f"{base}/d"), os.stat(f"{base}/f")
    out["dir"] = (stat.S_ISDIR(sd.st_mode), stat.S_ISREG(sd.st_mode))
    out["file"] = (stat.S_ISDIR(sf.st_mode), stat.S_ISREG(sf.st_mode), sf.st_size, sf.st_nlink)
    out["distinct_inodes"] = sd.st_ino != sf.st_ino
    out["path_preds"] = [os.path.isdir(f"{base}/d"), os.path.isfile(f"{base}/d"), os.path.isfile(f"{base}/f"),
                         os.path.exists(f"{base}/nope"), os.path.getsize(f"{base}/f")]
    os.chmod(f"{base}/f", 0o600)
    out["chmod"] = stat.S_IMODE(os.stat(f"{base}/f").st_mode)
    os.utime(f"{base}/f", (1_000_000, 2_000_000))
    out["utime"] = os.stat(f"{base}/f").st_mtime
    out["access"] = (os.access(f"{base}/f", os.R_OK), os.access(f"{base}/nope", os.F_OK))
    out["stat_missing"] = _outcome(lambda: os.stat(f"{base}/nope"))
    out["stat_through_file"] = _outcome(lambda: os.stat(f"{base}/f/x"))
    return out


def scen_symlinks(base: str) -> dict:
    out: dict = {}
    os.makedirs(f"{base}/a/b")
    with open(f"{base}/a/f.txt", "w") as f:
        f.write("target")
    os.symlink("f.txt", f"{base}/a/link")
    os.symlink(f"{base}/a/b", f"{base}/a/dlink")
    os.symlink("nowhere", f"{base}/a/dangling")
    os.symlink("../f.txt", f"{base}/a/b/up")
    out["readlink"] = (os.readlink(f"{base}/a/link"), os.readlink(f"{base}/a/dlink"))
    out["islink"] = [os.path.islink(f"{base}/a/{n}") for n in ("link", "dlink", "dangling", "f.txt")]
    out["lstat_vs_stat"] = (stat.S_ISLNK(os.lstat(f"{base}/a/link").st_mode),
                            stat.S_ISREG(os.stat(f"{base}/a/link").st_mode),
                            os.stat(f"{base}/a/link").st_size)
    out["dangling"] = (os.path.lexists(f"{base}/a/dangling"), os.path.exists(f"{base}/a/dangling"),
                       _outcome(lambda: os.stat(f"{base}/a/dangling")))
    with open(f"{base}/a/link") as f:
        out["read_through"] = f.read()
    with open(f"{base}/a/dlink/through", "w") as f:
        f.write("t")
    out["write_through_dir_link"] = os.path.exists(f"{base}/a/b/through")
    with open(f"{base}/a/b/up") as f:
        out["relative_up"] = f.read()
    out["isdir_link"] = (os.path.isdir(f"{base}/a/dlink"), sorted(os.listdir(f"{base}/a/dlink")))
    # creating through a dangling link creates its target
    out["create_through_dangling"] = _outcome(lambda: _write_text(f"{base}/a/dangling", "made"))
    out["created_target"] = os.path.exists(f"{base}/a/nowhere")
    os.unlink(f"{base}/a/link")
    out["unlink_link_keeps_target"] = (os.path.lexists(f"{base}/a/link"), os.path.exists(f"{base}/a/f.txt"))
    os.symlink("loop2", f"{base}/loop1")
    os.symlink("loop1", f"{base}/loop2")
    out["loop"] = _outcome(lambda: os.stat(f"{base}/loop1"))
    out["readlink_not_link"] = _outcome(lambda: os.readlink(f"{base}/a/f.txt"))
    out["symlink_exists"] = _outcome(lambda: os.symlink("x", f"{base}/a/dlink"))
    out["realpath"] = os.path.realpath(f"{base}/a/dlink/up")
    return out


def scen_hardlinks(base: str) -> dict:
    out: dict = {}
    with open(f"{base}/f", "w") as f:
        f.write("one")
    os.link(f"{base}/f", f"{base}/g")
    out["nlink"] = (os.stat(f"{base}/f").st_nlink, os.stat(f"{base}/g").st_nlink)
    out["same_inode"] = os.stat(f"{base}/f").st_ino == os.stat(f"{base}/g").st_ino
    with open(f"{base}/g", "a") as f:
        f.write(" two")
    with open(f"{base}/f") as f:
        out["shared_data"] = f.read()
    os.unlink(f"{base}/f")
    with open(f"{base}/g") as f:
        out["survives_unlink"] = (f.read(), os.stat(f"{base}/g").st_nlink)
    out["link_exists"] = _outcome(lambda: os.link(f"{base}/g", f"{base}/g"))
    out["link_missing"] = _outcome(lambda: os.link(f"{base}/nope", f"{base}/h"))
    os.mkdir(f"{base}/d")
    out["link_dir"] = _outcome(lambda: os.link(f"{base}/d", f"{base}/d2"))
    return out


def scen_walk_scandir_glob(base: str) -> dict:
    out: dict = {}
    os.makedirs(f"{base}/a/b/c")
    os.makedirs(f"{base}/x")
    for path in ("a/1.txt", "a/2.bin", "a/b/3.txt", "a/b/c/4.txt", "x/5.txt", ".hidden"):
        with open(f"{base}/{path}", "w") as f:
            f.write(path)
    os.symlink("a/b", f"{base}/blink")
    out["walk"] = sorted((d, sorted(ds), sorted(fs)) for d, ds, fs in os.walk(base))
    out["walk_bottom_up"] = [d for d, _, _ in os.walk(f"{base}/a", topdown=False)][-1]
    out["walk_follow"] = sorted(d for d, _, _ in os.walk(base, followlinks=True))
    with os.scandir(f"{base}/a") as it:
        entries = sorted(it, key=lambda e: e.name)
    out["scandir"] = [(e.name, e.path, e.is_dir(), e.is_file(), e.is_symlink(),
                       e.stat().st_size if e.is_file() else None) for e in entries]
    link = next(e for e in os.scandir(base) if e.name == "blink")
    out["scandir_link"] = (link.is_symlink(), link.is_dir(), link.is_dir(follow_symlinks=False),
                           stat.S_ISLNK(link.stat(follow_symlinks=False).st_mode))
    out["listdir"] = sorted(os.listdir(base))
    out["listdir_bytes"] = sorted(os.listdir(os.fsencode(base)))
    out["glob"] = sorted(glob.glob(f"{base}/a/*.txt"))
    out["glob_recursive"] = sorted(glob.glob(f"{base}/**/*.txt", recursive=True))
    out["glob_hidden"] = sorted(glob.glob(f"{base}/*"))
    out["iglob"] = sorted(glob.iglob(f"{base}/?/*"))
    out["glob_relative"] = sorted(glob.glob("*/*.txt", root_dir=base))
    out["listdir_file"] = _outcome(lambda: os.listdir(f"{base}/a/1.txt"))
    return out


def scen_pathlib(base: str) -> dict:
    out: dict = {}
    root = pathlib.Path(base)
    (root / "p/q").mkdir(parents=True)
    out["mkdir_exists"] = _outcome(lambda: (root / "p").mkdir())
    (root / "p").mkdir(exist_ok=True)
    out["mkdir_no_parent"] = _outcome(lambda: (root / "m/n").mkdir())
    out["write_bytes"] = (root / "p/q/r.bin").write_bytes(b"\x00\x01\x02")
    out["write_text"] = (root / "p/t.txt").write_text("text ✓")
    out["read"] = ((root / "p/q/r.bin").read_bytes(), (root / "p/t.txt").read_text())
    out["iterdir"] = sorted(x.name for x in (root / "p").iterdir())
    out["rglob"] = sorted(str(x.relative_to(root)) for x in root.rglob("*"))
    out["glob"] = sorted(str(x.relative_to(root)) for x in root.glob("p/*.txt"))
    out["preds"] = [(root / "p").is_dir(), (root / "p/t.txt").is_file(), (root / "nope").exists()]
    out["stat"] = (root / "p/q/r.bin").stat().st_size
    target = (root / "p/t.txt").rename(root / "p/u.txt")
    out["rename"] = (str(target), (root / "p/t.txt").exists(), (root / "p/u.txt").read_text())
    (root / "p/u.txt").replace(root / "p/q/r.bin")
    out["replace"] = (root / "p/q/r.bin").read_text()
    (root / "p/q/r.bin").unlink()
    out["unlink"] = (root / "p/q/r.bin").exists()
    out["unlink_missing"] = _outcome(lambda: (root / "p/q/r.bin").unlink())
    (root / "p/q/r.bin").unlink(missing_ok=True)
    (root / "p/q").rmdir()
    out["rmdir"] = sorted(x.name for x in (root / "p").iterdir())
    (root / "touched").touch()
    out["touch"] = (root / "touched").stat().st_size
    with (root / "opened").open("w") as f:
        f.write("via Path.open")
    out["open"] = (root / "opened").read_text()
    (root / "sym").symlink_to("opened")
    out["symlink_to"] = ((root / "sym").is_symlink(), (root / "sym").read_text(), str((root / "sym").readlink()))
    out["resolve"] = str((root / "sym").resolve())
    out["cwd_relative"] = pathlib.Path("relative").absolute().name
    return out


def scen_shutil(base: str) -> dict:
    out: dict = {}
    os.makedirs(f"{base}/a/b")
    with open(f"{base}/a/f.txt", "w") as f:
        f.write("data" * 1000)
    with open(f"{base}/a/b/g.txt", "w") as f:
        f.write("g")
    os.chmod(f"{base}/a/f.txt", 0o640)
    out["copy"] = shutil.copy(f"{base}/a/f.txt", f"{base}/copy.txt")
    out["copy_content"] = len(open(f"{base}/copy.txt").read())
    out["copy_mode"] = stat.S_IMODE(os.stat(f"{base}/copy.txt").st_mode)
    out["copy2"] = shutil.copy2(f"{base}/a/f.txt", f"{base}/copy2.txt")
    out["copy2_mtime"] = os.stat(f"{base}/copy2.txt").st_mtime == os.stat(f"{base}/a/f.txt").st_mtime
    out["copy_into_dir"] = shutil.copy(f"{base}/a/f.txt", f"{base}/a/b")
    out["copyfile"] = shutil.copyfile(f"{base}/a/b/g.txt", f"{base}/g2")
    with open(f"{base}/a/f.txt", "rb") as src, open(f"{base}/cfo", "wb") as dst:
        shutil.copyfileobj(src, dst, 100)
    out["copyfileobj"] = os.path.getsize(f"{base}/cfo")
    out["copytree"] = shutil.copytree(f"{base}/a", f"{base}/a2")
    out["copytree_walk"] = sorted((d, sorted(fs)) for d, _, fs in os.walk(f"{base}/a2"))
    out["copytree_exists"] = type(_raises(lambda: shutil.copytree(f"{base}/a", f"{base}/a2"))).__name__
    out["move_dir"] = shutil.move(f"{base}/a2", f"{base}/a3")
    out["moved"] = (os.path.exists(f"{base}/a2"), sorted(os.listdir(f"{base}/a3")))
    out["move_file_into_dir"] = shutil.move(f"{base}/g2", f"{base}/a3")
    shutil.rmtree(f"{base}/a3")
    out["rmtree"] = os.path.exists(f"{base}/a3")
    out["rmtree_missing"] = _outcome(lambda: shutil.rmtree(f"{base}/a3"))
    shutil.rmtree(f"{base}/a3", ignore_errors=True)
    out["disk_usage"] = shutil.disk_usage(base).total > 0
    out["which"] = shutil.which("definitely-not-a-command-simfs") is None
    return out


def scen_symlink_copytree(base: str) -> dict:
    os.makedirs(f"{base}/src/sub")
    with open(f"{base}/src/sub/f", "w") as f:
        f.write("f")
    os.symlink("sub/f", f"{base}/src/link")
    shutil.copytree(f"{base}/src", f"{base}/dst", symlinks=True)
    return {"is_link": os.path.islink(f"{base}/dst/link"), "target": os.readlink(f"{base}/dst/link"),
            "listing": sorted(os.listdir(f"{base}/dst"))}


def scen_tempfile(base: str) -> dict:
    out: dict = {}
    fd, name = tempfile.mkstemp(dir=base, suffix=".s", prefix="pre")
    os.write(fd, b"tmp")
    os.close(fd)
    out["mkstemp"] = (os.path.dirname(name), os.path.basename(name).startswith("pre"), name.endswith(".s"),
                      open(name, "rb").read())
    with tempfile.NamedTemporaryFile(dir=base, delete=False) as f:
        f.write(b"kept")
        kept = f.name
    out["ntf_kept"] = open(kept, "rb").read()
    def named_temporary_file() -> tuple:
        with tempfile.NamedTemporaryFile("w+", dir=base) as f:
            f.write("scratch")
            f.flush()
            f.seek(0)
            seen = (f.read(), os.path.exists(f.name))
            name = f.name
        return seen, os.path.exists(name)

    out["ntf_deleted_on_close"] = _outcome(named_temporary_file)
    for n in os.listdir(base):
        if n.startswith("tmp") and os.path.isfile(f"{base}/{n}") and f"{base}/{n}" != kept:
            os.unlink(f"{base}/{n}")
    with tempfile.TemporaryDirectory(dir=base) as d:
        with open(os.path.join(d, "inner"), "w") as f:
            f.write("x")
        out["tmpdir"] = (os.path.isdir(d), os.listdir(d))
        tmpdir = d
    out["tmpdir_deleted"] = os.path.exists(tmpdir)
    d = tempfile.mkdtemp(dir=base)
    out["mkdtemp"] = (os.path.isdir(d), os.listdir(d), stat.S_IMODE(os.stat(d).st_mode))
    with tempfile.TemporaryFile(dir=base) as f:
        f.write(b"anon")
        f.seek(0)
        out["temporaryfile"] = f.read()
    with tempfile.SpooledTemporaryFile(max_size=10, dir=base) as f:
        f.write(b"x" * 100)
        f.seek(0)
        out["spooled"] = len(f.read())
    out["leftovers"] = sorted(n.startswith("pre") or n == os.path.basename(kept) or n == os.path.basename(d)
                              for n in os.listdir(base))
    return out


def scen_serialization(base: str) -> dict:
    out: dict = {}
    state = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "step": 7, "nested": [torch.ones(2)]}
    torch.save(state, f"{base}/t.pt")
    loaded = torch.load(f"{base}/t.pt")
    out["torch_path"] = (loaded["w"].tolist(), loaded["step"], loaded["nested"][0].tolist())
    with open(f"{base}/t2.pt", "wb") as f:
        torch.save(torch.tensor([1, 2, 3]), f)
    with open(f"{base}/t2.pt", "rb") as f:
        out["torch_file"] = torch.load(f).tolist()
    buf = io.BytesIO()
    torch.save({"a": torch.zeros(1)}, buf)
    with open(f"{base}/t3.pt", "wb") as f:
        f.write(buf.getvalue())
    out["torch_bytes_file"] = torch.load(f"{base}/t3.pt")["a"].tolist()
    out["torch_pathlib"] = torch.load(pathlib.Path(base) / "t2.pt").tolist()
    np.save(f"{base}/n.npy", np.arange(5, dtype=np.int64))
    out["np"] = np.load(f"{base}/n.npy").tolist()
    np.savez(f"{base}/z.npz", a=np.ones(3), b=np.arange(2))
    with np.load(f"{base}/z.npz") as z:
        out["npz"] = (z["a"].tolist(), z["b"].tolist())
    with open(f"{base}/n2.npy", "wb") as f:
        np.save(f, np.eye(2))
    with open(f"{base}/n2.npy", "rb") as f:
        out["np_file"] = np.load(f).tolist()
    # numpy.savetxt/loadtxt: see test_numpy_text_files_stay_in_the_simulation (kept out of here
    # because, inside a rank, they reach the real disk)
    with open(f"{base}/p.pkl", "wb") as f:
        pickle.dump({"k": [1, (2, 3)], "s": {4}}, f)
    with open(f"{base}/p.pkl", "rb") as f:
        out["pickle"] = pickle.load(f)
    out["torch_load_missing"] = _outcome(lambda: torch.load(f"{base}/missing.pt"))
    return out


def scen_errors(base: str) -> dict:
    out: dict = {}
    os.makedirs(f"{base}/d/sub")
    with open(f"{base}/f", "w") as f:
        f.write("x")
    cases: dict[str, Callable[[], Any]] = {
        "open_missing_parent": lambda: open(f"{base}/nope/x"),
        "open_missing": lambda: open(f"{base}/nope"),
        "open_dir_w": lambda: open(f"{base}/d", "w"),
        "open_dir_r": lambda: open(f"{base}/d"),
        "open_under_file": lambda: open(f"{base}/f/x"),
        "create_under_file": lambda: open(f"{base}/f/x", "w"),
        "listdir_file": lambda: os.listdir(f"{base}/f"),
        "listdir_missing": lambda: os.listdir(f"{base}/nope"),
        "mkdir_exists": lambda: os.mkdir(f"{base}/d"),
        "mkdir_over_file": lambda: os.mkdir(f"{base}/f"),
        "mkdir_missing_parent": lambda: os.mkdir(f"{base}/nope/x"),
        "makedirs_exists": lambda: os.makedirs(f"{base}/d"),
        "makedirs_exist_ok": lambda: os.makedirs(f"{base}/d", exist_ok=True),
        "makedirs_over_file": lambda: os.makedirs(f"{base}/f", exist_ok=True),
        "rmdir_nonempty": lambda: os.rmdir(f"{base}/d"),
        "rmdir_file": lambda: os.rmdir(f"{base}/f"),
        "rmdir_missing": lambda: os.rmdir(f"{base}/nope"),
        "unlink_dir": lambda: os.unlink(f"{base}/d"),
        "unlink_missing": lambda: os.unlink(f"{base}/nope"),
        "remove_missing": lambda: os.remove(f"{base}/nope"),
        "rename_missing": lambda: os.rename(f"{base}/nope", f"{base}/other"),
        "rename_dir_over_file": lambda: os.rename(f"{base}/d", f"{base}/f"),
        "rename_file_over_dir": lambda: os.rename(f"{base}/f", f"{base}/d"),
        "rename_into_missing": lambda: os.rename(f"{base}/f", f"{base}/nope/f"),
        "rename_dir_into_itself": lambda: os.rename(f"{base}/d", f"{base}/d/sub/d"),
        "replace_dir_over_nonempty": lambda: os.replace(f"{base}/d/sub", f"{base}/d"),
        "chdir_file": lambda: os.chdir(f"{base}/f"),
        "truncate_missing": lambda: os.truncate(f"{base}/nope", 0),
    }
    for name, fn in cases.items():
        out[name] = _outcome(fn)
    out["still_there"] = sorted(os.listdir(base))
    return out


SCENARIOS = {fn.__name__[5:]: fn for fn in (
    scen_open_modes, scen_text_and_newlines, scen_fds, scen_stat, scen_symlinks, scen_hardlinks,
    scen_walk_scandir_glob, scen_pathlib, scen_shutil, scen_symlink_copytree, scen_tempfile,
    scen_serialization, scen_errors,
)}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_matches_real_filesystem(name: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    scenario = SCENARIOS[name]
    real = _real(scenario, tmp_path)
    sim = _sim(scenario)
    if name == "pathlib":  # the cwd differs by design: /shared in a rank
        assert sim.pop("cwd_relative") == real.pop("cwd_relative") == "relative"
    _compare(real, sim)


@pytest.mark.parametrize("profile", ["nfs", "lustre"])
@pytest.mark.parametrize("name", ["open_modes", "fds", "errors", "walk_scandir_glob", "serialization"])
def test_single_client_of_shared_profiles_behaves_like_local(name: str, profile: str, tmp_path: pathlib.Path) -> None:
    scenario = SCENARIOS[name]
    _compare(_real(scenario, tmp_path), _sim(scenario, profile))


# -- explicit error expectations (independent of the host's filesystem) -----------------------------

def test_error_types_errno_and_filenames() -> None:
    out = _sim(scen_errors)
    expected = {
        "open_missing_parent": ("FileNotFoundError", "ENOENT", "BASE/nope/x", None),
        "open_dir_w": ("IsADirectoryError", "EISDIR", "BASE/d", None),
        "open_under_file": ("NotADirectoryError", "ENOTDIR", "BASE/f/x", None),
        "listdir_file": ("NotADirectoryError", "ENOTDIR", "BASE/f", None),
        "mkdir_exists": ("FileExistsError", "EEXIST", "BASE/d", None),
        "makedirs_exists": ("FileExistsError", "EEXIST", "BASE/d", None),
        "rmdir_nonempty": ("OSError", "ENOTEMPTY", "BASE/d", None),
        "rmdir_file": ("NotADirectoryError", "ENOTDIR", "BASE/f", None),
        "unlink_dir": ("IsADirectoryError", "EISDIR", "BASE/d", None),
        "rename_missing": ("FileNotFoundError", "ENOENT", "BASE/nope", "BASE/other"),
        "rename_file_over_dir": ("IsADirectoryError", "EISDIR", "BASE/f", "BASE/d"),
    }
    for key, value in expected.items():
        assert out[key] == value, key
    assert out["makedirs_exist_ok"] == ("ok", None)


def test_errors_name_the_path_given_as_pathlib() -> None:
    def job(base: str) -> Any:
        p = pathlib.Path(base)
        p.mkdir()
        return [_outcome(lambda: p.mkdir()), _outcome(lambda: os.stat(p / "missing")),
                _outcome(lambda: open(p / "missing"))]

    result = simfs.Cluster(profile="local").run(job, SIM_BASE)
    assert result.ok, result.summary()
    mkdir, stat_missing, open_missing = result.returns[0]
    # like the real os module: the filename is the path as a str, not the Path object
    assert mkdir == ("FileExistsError", "EEXIST", SIM_BASE, None)
    assert stat_missing == ("FileNotFoundError", "ENOENT", f"{SIM_BASE}/missing", None)
    assert open_missing[:2] == ("FileNotFoundError", "ENOENT")


# -- content round trips against an in-memory model -------------------------------------------------

FILE_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.binary(max_size=300)),
        st.tuples(st.just("read"), st.integers(-1, 300)),
        st.tuples(st.just("seek"), st.integers(0, 600), st.just(os.SEEK_SET)),
        st.tuples(st.just("seek"), st.integers(-50, 50), st.just(os.SEEK_CUR)),
        st.tuples(st.just("seek"), st.integers(-50, 50), st.just(os.SEEK_END)),
        st.tuples(st.just("truncate"), st.integers(0, 600)),
        st.tuples(st.just("tell")),
        st.tuples(st.just("flush")),
    ),
    max_size=25,
)


def _apply(f: Any, ops: list) -> list:
    """Apply file operations, recording what each returns (or the exception type)."""
    seen = []
    for op in ops:
        try:
            if op[0] == "write":
                seen.append(f.write(op[1]))
            elif op[0] == "read":
                seen.append(f.read(op[1]))
            elif op[0] == "seek":
                seen.append(f.seek(op[1], op[2]))
            elif op[0] == "truncate":
                seen.append(f.truncate(op[1]))
            elif op[0] == "tell":
                seen.append(f.tell())
            else:
                seen.append(f.flush())
        except (OSError, ValueError):  # BytesIO says ValueError where a file says OSError(EINVAL)
            seen.append("error")
    return seen


def _file_ops_job(initial: bytes, ops: list, buffering: int) -> tuple:
    return _file_ops("/shared/model", initial, ops, buffering)


def _file_ops(path: str, initial: bytes, ops: list, buffering: int) -> tuple:
    with open(path, "wb") as f:
        f.write(initial)
    with open(path, "r+b", buffering=buffering) as f:
        seen = _apply(f, ops)
    with open(path, "rb") as f:
        final = f.read()
    return seen, final, os.stat(path).st_size


@given(initial=st.binary(max_size=200), ops=FILE_OPS, buffering=st.sampled_from([-1, 0, 7]))
@settings(max_examples=40)
def test_binary_file_matches_real_file(initial: bytes, ops: list, buffering: int) -> None:
    """Random writes, reads, seeks and truncates through open(): a real file is the model
    (io.BytesIO is not one: it neither extends on truncate nor refuses a negative seek)."""
    fd, real_path = tempfile.mkstemp(prefix="simfs-model-")
    os.close(fd)
    try:
        expected = _file_ops(real_path, initial, ops, buffering)
    finally:
        os.unlink(real_path)
    result = simfs.Cluster(profile="local").run(_file_ops_job, initial, ops, buffering)
    assert result.ok, result.summary()
    assert result.returns[0] == expected


@given(initial=st.binary(max_size=200), ops=st.lists(st.one_of(
    st.tuples(st.just("write"), st.binary(max_size=300)),
    st.tuples(st.just("read"), st.integers(-1, 300)),
    st.tuples(st.just("seek"), st.integers(0, 600), st.just(os.SEEK_SET)),
    st.tuples(st.just("tell")),
), max_size=25))
@settings(max_examples=30)
def test_binary_file_matches_bytesio_model(initial: bytes, ops: list) -> None:
    """Where io.BytesIO is a faithful model (writes, reads, absolute seeks), it must agree."""
    model = io.BytesIO(initial)
    expected = _apply(model, ops)
    result = simfs.Cluster(profile="nfs").run(_file_ops_job, initial, ops, -1)
    assert result.ok, result.summary()
    seen, final, size = result.returns[0]
    assert seen == expected
    assert final == model.getvalue()
    assert size == len(final)


def _chunked_write_job(data: bytes, cuts: list[int], read_sizes: list[int]) -> tuple:
    bounds = sorted(set([0, len(data), *[c % (len(data) + 1) for c in cuts]]))
    with open("/shared/chunks", "wb") as f:
        for lo, hi in itertools.pairwise(bounds):
            f.write(data[lo:hi])
    pieces = []
    with open("/shared/chunks", "rb") as f:
        for n in read_sizes:
            pieces.append(f.read(n))
        pieces.append(f.read())
    return b"".join(pieces), os.path.getsize("/shared/chunks")


@given(data=st.binary(max_size=5000), cuts=st.lists(st.integers(0, 5000), max_size=10),
       read_sizes=st.lists(st.integers(0, 2000), max_size=8))
@settings(max_examples=30)
def test_chunked_binary_round_trip(data: bytes, cuts: list[int], read_sizes: list[int]) -> None:
    result = simfs.Cluster(profile="nfs").run(_chunked_write_job, data, cuts, read_sizes)
    assert result.ok, result.summary()
    assert result.returns[0] == (data, len(data))


def _text_job(chunks: list[str], newline: str | None, encoding: str) -> tuple:
    with open("/shared/text", "w", newline=newline, encoding=encoding) as f:
        for chunk in chunks:
            f.write(chunk)
    with open("/shared/text", "rb") as f:
        raw = f.read()
    with open("/shared/text", newline=newline, encoding=encoding) as f:
        text = f.read()
    with open("/shared/text", newline=newline, encoding=encoding) as f:
        lines = list(f)
    return raw, text, lines


@given(chunks=st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40), max_size=8),
       newline=st.sampled_from([None, "", "\n", "\r", "\r\n"]), encoding=st.sampled_from(["utf-8", "utf-16"]))
@settings(max_examples=30)
def test_text_round_trip_matches_textiowrapper_model(chunks: list[str], newline: str | None, encoding: str) -> None:
    buffer = io.BytesIO()
    writer = io.TextIOWrapper(buffer, encoding=encoding, newline=newline)
    for chunk in chunks:
        writer.write(chunk)
    writer.flush()
    raw = buffer.getvalue()
    text = io.TextIOWrapper(io.BytesIO(raw), encoding=encoding, newline=newline).read()
    lines = list(io.TextIOWrapper(io.BytesIO(raw), encoding=encoding, newline=newline))
    result = simfs.Cluster(profile="local").run(_text_job, chunks, newline, encoding)
    assert result.ok, result.summary()
    assert result.returns[0] == (raw, text, lines)


def _fd_ops_job(ops: list) -> tuple:
    fd = os.open("/shared/fdmodel", os.O_CREAT | os.O_RDWR)
    seen = []
    for op in ops:
        if op[0] == "pwrite":
            seen.append(os.pwrite(fd, op[1], op[2]))
        elif op[0] == "pread":
            seen.append(os.pread(fd, op[1], op[2]))
        elif op[0] == "write":
            seen.append(os.write(fd, op[1]))
        else:
            seen.append(os.lseek(fd, op[1], os.SEEK_SET))
    os.close(fd)
    with open("/shared/fdmodel", "rb") as f:
        return seen, f.read()


FD_OPS = st.lists(st.one_of(
    st.tuples(st.just("pwrite"), st.binary(max_size=100), st.integers(0, 300)),
    st.tuples(st.just("pread"), st.integers(0, 200), st.integers(0, 300)),
    st.tuples(st.just("write"), st.binary(max_size=100)),
    st.tuples(st.just("seek"), st.integers(0, 300)),
), max_size=20)


def _fd_model(ops: list) -> tuple:
    buf = bytearray()
    pos = 0
    seen: list = []
    for op in ops:
        if op[0] in ("pwrite", "write"):
            data = op[1]
            at = op[2] if op[0] == "pwrite" else pos
            if data and len(buf) < at + len(data):  # a zero-length write changes nothing
                buf.extend(b"\0" * (at + len(data) - len(buf)))
            buf[at:at + len(data)] = data
            if op[0] == "write":
                pos += len(data)
            seen.append(len(data))
        elif op[0] == "pread":
            seen.append(bytes(buf[op[2]:op[2] + op[1]]))
        else:
            pos = op[1]
            seen.append(pos)
    return seen, bytes(buf)


@given(ops=FD_OPS)
@settings(max_examples=30)
def test_os_level_positional_io_matches_model(ops: list) -> None:
    result = simfs.Cluster(profile="local").run(_fd_ops_job, ops)
    assert result.ok, result.summary()
    assert result.returns[0] == _fd_model(ops)


# -- namespace operations against the real filesystem -----------------------------------------------

NAMES = ["a", "b", "a/c", "b/c", "a/c/d"]
NS_OPS = st.lists(st.one_of(
    st.tuples(st.just("mkdir"), st.sampled_from(NAMES)),
    st.tuples(st.just("create"), st.sampled_from(NAMES)),
    st.tuples(st.just("unlink"), st.sampled_from(NAMES)),
    st.tuples(st.just("rmdir"), st.sampled_from(NAMES)),
    st.tuples(st.just("rename"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.tuples(st.just("symlink"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.tuples(st.just("link"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
), max_size=15)


def _namespace_op(base: str, op: tuple) -> Any:
    p = f"{base}/{op[1]}"
    if op[0] == "mkdir":
        return os.mkdir(p)
    if op[0] == "create":
        return open(p, "x").close()
    if op[0] == "unlink":
        return os.unlink(p)
    if op[0] == "rmdir":
        return os.rmdir(p)
    if op[0] == "rename":
        return os.rename(p, f"{base}/{op[2]}")
    if op[0] == "symlink":
        return os.symlink(f"{base}/{op[2]}", p)
    return os.link(p, f"{base}/{op[2]}")


def _namespace_ops(base: str, ops: list) -> tuple:
    outcomes = []
    for op in ops:
        res = _outcome(functools.partial(_namespace_op, base, op))
        outcomes.append(res[:2])
    tree = []
    for d, ds, fs in os.walk(base):
        tree.append((d.replace(base, "BASE"), sorted(ds), sorted(fs)))
    return outcomes, sorted(tree)


@given(ops=NS_OPS)
@example(ops=[("mkdir", "a"), ("create", "a/c"), ("rename", "a/c", "a")])  # onto its own ancestor: ENOTEMPTY
@settings(max_examples=40)
def test_namespace_operations_match_real_filesystem(ops: list) -> None:
    real_base = tempfile.mkdtemp(prefix="simfs-ns-")
    try:
        expected = _namespace_ops(real_base, ops)
    finally:
        shutil.rmtree(real_base)

    def job() -> tuple:
        os.makedirs(SIM_BASE)
        return _namespace_ops(SIM_BASE, ops)

    result = simfs.Cluster(profile="local").run(job)
    assert result.ok, result.summary()
    assert result.returns[0] == expected


def test_link_errors_match_linux() -> None:
    """link(2) checks the new name before the source's type: EEXIST wins over EPERM."""
    def job() -> list:
        os.makedirs(f"{SIM_BASE}/d")
        with open(f"{SIM_BASE}/f", "w"):
            pass
        return [_outcome(lambda: os.link(f"{SIM_BASE}/d", f"{SIM_BASE}/d"))[:2],
                _outcome(lambda: os.link(f"{SIM_BASE}/d", f"{SIM_BASE}/f"))[:2],
                _outcome(lambda: os.link(f"{SIM_BASE}/d", f"{SIM_BASE}/new"))[:2]]

    result = simfs.Cluster(profile="local").run(job)
    assert result.returns == {0: [("FileExistsError", "EEXIST"), ("FileExistsError", "EEXIST"),
                                  ("PermissionError", "EPERM")]}, result.summary()


# -- simfs-specific behaviour of the stack ----------------------------------------------------------

def test_files_never_reach_the_real_disk(tmp_path: pathlib.Path) -> None:
    real_dir = str(tmp_path)  # exists on the real disk; inside the rank it is a path on node 0's disk

    def job() -> list:
        os.makedirs(real_dir, exist_ok=True)
        with open(f"{real_dir}/f", "w") as f:
            f.write("x")
        torch.save(torch.ones(1), f"{real_dir}/t.pt")
        np.save(f"{real_dir}/n.npy", np.ones(1))
        pathlib.Path(real_dir, "p").write_text("p")
        return sorted(os.listdir(real_dir))

    result = simfs.Cluster(profile="local").run(job)
    assert result.returns == {0: ["f", "n.npy", "p", "t.pt"]}, result.summary()
    assert os.listdir(real_dir) == []


def test_numpy_text_files_stay_in_the_simulation(tmp_path: pathlib.Path) -> None:
    real_dir = str(tmp_path)

    def job() -> list:
        os.makedirs(real_dir, exist_ok=True)
        np.savetxt(f"{real_dir}/a.txt", np.arange(3))
        return np.loadtxt(f"{real_dir}/a.txt").tolist()

    result = simfs.Cluster(profile="local").run(job)
    leaked = os.listdir(real_dir)
    assert leaked == [], f"numpy.savetxt inside a rank wrote {leaked} to the real disk"
    assert result.returns == {0: [0.0, 1.0, 2.0]}, result.summary()


def test_zero_length_write_past_end_does_not_extend() -> None:
    def job() -> tuple:
        with open("/shared/z", "wb", buffering=0) as f:
            f.seek(10)
            f.write(b"")
        fd = os.open("/shared/z", os.O_WRONLY)
        os.pwrite(fd, b"", 20)
        os.close(fd)
        return os.path.getsize("/shared/z"), open("/shared/z", "rb").read()

    result = simfs.Cluster(profile="local").run(job)
    assert result.returns == {0: (0, b"")}, result.summary()


def test_named_temporary_file_delete_stays_in_the_simulation(tmp_path: pathlib.Path) -> None:
    """NamedTemporaryFile deletes its file on close inside the simulation, never a real file
    of the same name (tempfile names are deterministic per seed, so the name is known)."""
    scratch = str(tmp_path)

    def job() -> tuple:
        os.makedirs(scratch, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=scratch) as f:
            f.write(b"simulated")
            name = f.name
        return name, os.path.exists(name)

    first = simfs.Cluster(profile="local", seed=5).run(job)
    name = next(e.path for e in first.trace if e.op == "open" and e.path.startswith(scratch + "/"))
    with open(name, "w") as f:  # a real file that happens to have the simulated name
        f.write("real data")
    second = simfs.Cluster(profile="local", seed=5).run(job)
    assert os.path.exists(name), "a rank's NamedTemporaryFile deleted a file on the real disk"
    assert first.ok and second.ok, first.summary()
    assert first.returns[0] == (name, False)


def test_torch_files_visible_across_nodes_after_close() -> None:
    def job() -> list:
        rank = dist.get_rank()
        if rank == 0:
            os.makedirs("/shared/ckpt", exist_ok=True)
            torch.save({"w": torch.arange(10.0)}, "/shared/ckpt/model.pt")
            np.save("/shared/ckpt/arr.npy", np.arange(4))
        dist.barrier()
        w = torch.load("/shared/ckpt/model.pt")["w"]
        return w.tolist() + np.load("/shared/ckpt/arr.npy").tolist()

    result = simfs.Cluster(nodes=2, ranks_per_node=1, profile="nfs", seed=1).run(job)
    assert result.ok, result.summary()
    expected = [float(i) for i in range(10)] + [0, 1, 2, 3]
    assert result.returns == {0: expected, 1: expected}


def test_a_private_map_loads_and_a_shared_map_and_subprocess_are_refused_by_name() -> None:
    def job() -> list:
        torch.save(torch.ones(3), "/shared/t.pt")
        out: list = [torch.load("/shared/t.pt", mmap=True).tolist()]
        for fn in (lambda: torch.from_file("/shared/t.pt", shared=True, size=3),
                   lambda: __import__("subprocess").run(["true"]),
                   lambda: os.system("true")):
            try:
                fn()
                out.append("no error")
            except simfs.BypassError as exc:
                out.append(exc.call)
        return out

    result = simfs.Cluster(profile="local").run(job)
    assert result.ok, result.summary()
    loaded, *calls = result.returns[0]
    assert loaded == [1.0, 1.0, 1.0]  # torch.load(mmap=True) maps privately: a copy of the simulated file
    assert calls == ["torch.from_file(shared=True)", "subprocess.Popen", "os.system"]


def test_python_installation_readable_and_read_only() -> None:
    import json

    target = os.path.join(os.path.dirname(json.__file__), "simfs-should-not-exist")

    def job() -> tuple:
        with open(json.__file__) as f:
            head = f.read(10)
        try:
            open(target, "w")
        except OSError as exc:
            return head, errno.errorcode.get(exc.errno)
        return head, "writable"

    result = simfs.Cluster().run(job)
    with open(json.__file__) as f:
        assert result.returns[0] == (f.read(10), "EROFS")
    assert not os.path.exists(target)
