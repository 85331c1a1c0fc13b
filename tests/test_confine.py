"""Kernel confinement (simfs.confinement.confine, applied in simfs.isolated's child): a forked child
confines itself and tries to change the real machine; the test checks from outside that nothing
happened (canary files, listeners and signal handlers of the parent) and that the report says
what is confined."""

from __future__ import annotations

import ctypes
import datetime
import errno
import importlib
import os
import pickle
import select
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import missing

import simfs
from simfs.confinement import Confinement, ConfinementWarning, announce, confine, landlock, seccomp

confine_module = importlib.import_module("simfs.confinement.confine")  # the package's `confine` is the function

ABI = landlock.abi()
REFUSED = {"EACCES", "EPERM"}


@pytest.fixture(autouse=True)
def _needs_landlock() -> None:
    if not ABI:
        missing("landlock", "this kernel has no Landlock (Linux 5.13+, enabled at boot: lsm=...,landlock)")


def forked(fn: Callable[[], Any], timeout: float = 60.0) -> Any:
    """fn() in a forked child (which confines itself inside fn): its return value, pickled back,
    or its exception raised here."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            try:
                result: tuple[str, Any] = ("value", fn())
            except BaseException as exc:  # noqa: BLE001 - everything goes back to the test
                result = ("error", exc)
            view = memoryview(pickle.dumps(result))
            while view:
                view = view[os.write(write_end, view):]
        finally:
            os._exit(0)
    os.close(write_end)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([read_end], [], [], 0.1)[0]:
                data = os.read(read_end, 1 << 20)
                if not data:
                    break
                chunks.append(data)
        else:
            os.kill(pid, signal.SIGKILL)
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    assert chunks, "the child died without a result"
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "error":
        raise value
    return value


def outcome(action: Callable[[], object]) -> str:
    """"ok", or the errno name of the OSError the action raised."""
    try:
        action()
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc))
    return "ok"


def libc_create(path: Path) -> None:
    """open(2) with O_CREAT through the C library, below every Python-level layer."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.open(str(path).encode(), os.O_CREAT | os.O_WRONLY, 0o644)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "open")
    os.close(fd)


@pytest.fixture
def listeners(tmp_path: Path) -> Iterator[dict[str, socket.socket]]:
    """Canaries of the parent: a TCP and a pathname Unix listener, a UDP socket."""
    tcp = socket.create_server(("127.0.0.1", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(tmp_path / "canary.sock"))
    unix.listen()
    canaries = {"tcp": tcp, "udp": udp, "unix": unix}
    yield canaries
    for s in canaries.values():
        s.close()


def untouched(canaries: dict[str, socket.socket]) -> bool:
    """No connection or datagram reached any canary."""
    return not select.select(list(canaries.values()), [], [], 0.3)[0]


def test_report_says_what_is_confined() -> None:
    report = forked(confine)
    assert isinstance(report, Confinement) and report.landlock_abi == ABI
    assert report.confined[confine_module.WRITES] == f"Landlock ABI {ABI}"
    assert report.confined[confine_module.SOCKETS] == "seccomp"
    assert report.confined[confine_module.PRIVILEGES] in ("capabilities dropped", "no capability held")
    if ABI >= landlock.SCOPE_ABI:  # every right simfs asks for is known to this kernel
        assert report.unconfined == {}, str(report)


def test_real_filesystem_is_read_only(tmp_path: Path) -> None:
    existing = tmp_path / "existing.txt"
    existing.write_text("before")
    before = existing.stat()
    canary = tmp_path / "canary"

    def attempts() -> dict[str, str]:
        confine()
        return {
            "open w": outcome(lambda: open(canary, "w")),
            "open a existing": outcome(lambda: open(existing, "a")),
            "mkdir": outcome(lambda: os.mkdir(canary)),
            "libc open O_CREAT": outcome(lambda: libc_create(canary)),
            "truncate": outcome(lambda: os.truncate(existing, 0)),
            "unlink": outcome(lambda: os.unlink(existing)),
            "rename": outcome(lambda: os.rename(existing, canary)),
            "symlink": outcome(lambda: os.symlink(existing, canary)),
            "link": outcome(lambda: os.link(existing, canary)),
            "mkfifo": outcome(lambda: os.mkfifo(canary)),
            "chmod": outcome(lambda: os.chmod(existing, 0o777)),
            "utime": outcome(lambda: os.utime(existing, (0, 0))),
        }

    results = forked(attempts)
    assert {name: r for name, r in results.items() if r not in REFUSED} == {}, results
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.txt"]
    after = existing.stat()
    assert existing.read_text() == "before"
    assert (after.st_mode, after.st_mtime_ns) == (before.st_mode, before.st_mtime_ns)


def test_reading_importing_and_dev_null_still_work(tmp_path: Path) -> None:
    (tmp_path / "confine_probe_module.py").write_text("VALUE = 42\n")
    (tmp_path / "data.txt").write_text("readable")

    def attempts() -> tuple[int, str, int]:
        confine(extra_readable=[str(tmp_path)])
        sys.path.insert(0, str(tmp_path))
        module = importlib.import_module("confine_probe_module")  # written above
        with open(os.devnull, "w") as sink:
            written = sink.write("discarded")
        return module.VALUE, (tmp_path / "data.txt").read_text(), written

    assert forked(attempts) == (42, "readable", len("discarded"))
    assert not (tmp_path / "__pycache__").exists()  # the import's bytecode write was refused, silently


def test_what_lies_outside_the_system_python_and_the_import_path_is_not_readable(tmp_path: Path) -> None:
    """The caller's files, its FIFOs and its terminal: not even opened (issue 29, class 6)."""
    (tmp_path / "secret.txt").write_text("the caller's")
    os.mkfifo(tmp_path / "fifo")

    def attempts() -> dict[str, str]:
        confine()
        return {"file": outcome(lambda: (tmp_path / "secret.txt").read_text()),
                "fifo": outcome(lambda: os.open(tmp_path / "fifo", os.O_RDONLY | os.O_NONBLOCK)),
                "listing": outcome(lambda: os.listdir(tmp_path)),
                "terminal": outcome(lambda: os.open("/dev/tty", os.O_RDONLY)),
                "system": outcome(lambda: open("/etc/hostname").read() and None),
                "secret": outcome(lambda: open("/etc/shadow").read())}

    assert forked(attempts) == {"file": "EACCES", "fifo": "EACCES", "listing": "EACCES", "terminal": "EACCES",
                                "system": "ok", "secret": "EACCES"}


def test_a_stale_editable_install_is_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An editable install whose source moved (its finder maps a package to a directory that is
    gone) does not stop confinement: before, Landlock's open of the missing path raised
    FileNotFoundError out of every process-carrier run."""
    finder = type(sys)("__editable___gone_finder")
    finder.MAPPING = {"gone": str(tmp_path / "moved" / "gone")}  # type: ignore[attr-defined]
    hook = type("Finder", (), {"__module__": finder.__name__})()
    monkeypatch.setitem(sys.modules, finder.__name__, finder)
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, hook])
    from simfs.confinement.readable import roots

    assert not any("moved" in root for root in roots())
    assert forked(lambda: confine() is not None)


def test_a_path_gone_before_its_rule_is_skipped(tmp_path: Path) -> None:
    """A readable path that vanished between the listing that named it and its rule (apt
    replacing /etc/fuse.conf through fuse.conf.dpkg-new while a search started) is left out:
    before, its FileNotFoundError stopped every process-carrier run of the search."""
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "data").write_text("x")

    def attempt() -> tuple[str, str]:
        fd = landlock.ruleset(ABI, [str(kept), str(tmp_path / "gone.dpkg-new")], [], [])
        landlock.enforce(fd)
        return outcome(lambda: (kept / "data").read_text()), outcome(lambda: (tmp_path / "other").write_text("x"))

    assert forked(attempt) == ("ok", "EACCES")


def test_writable_paths_stay_writable(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    def attempts() -> tuple[str, str]:
        confine(writable=[str(scratch)])
        inside = outcome(lambda: (scratch / "inside").write_text("x"))
        return inside, outcome(lambda: (tmp_path / "out").write_text("x"))

    assert forked(attempts) == ("ok", "EACCES")
    assert (scratch / "inside").read_text() == "x" and not (tmp_path / "out").exists()


def test_network_is_refused(listeners: dict[str, socket.socket]) -> None:
    tcp_port = listeners["tcp"].getsockname()[1]
    udp_address = listeners["udp"].getsockname()
    unix_path = listeners["unix"].getsockname()

    def attempts() -> dict[str, str]:
        # sockets made before confinement: only Landlock's TCP rules can refuse what they do
        early_connect, early_bind = socket.socket(), socket.socket()
        confine()
        libc = ctypes.CDLL(None, use_errno=True)
        results = {
            "tcp connect": outcome(lambda: socket.create_connection(("127.0.0.1", tcp_port), timeout=2)),
            "tcp bind": outcome(lambda: socket.create_server(("127.0.0.1", 0))),
            "udp send": outcome(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", udp_address)),
            "unix connect": outcome(lambda: socket.socket(socket.AF_UNIX).connect(unix_path)),
            "netlink": outcome(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW)),
            "libc socket": errno.errorcode[ctypes.get_errno()] if libc.socket(socket.AF_INET, 1, 0) < 0 else "ok",
        }
        if ABI >= landlock.NET_ABI:
            results["early tcp connect"] = outcome(lambda: early_connect.connect(("127.0.0.1", tcp_port)))
            results["early tcp bind"] = outcome(lambda: early_bind.bind(("127.0.0.1", 0)))
        return results

    results = forked(attempts)
    assert {name: r for name, r in results.items() if r not in REFUSED} == {}, results
    assert untouched(listeners)


def test_signals_to_the_parent_are_refused() -> None:
    if ABI < landlock.SCOPE_ABI:
        missing("landlock", f"signal scoping needs Landlock ABI 6 (Linux 6.12); this kernel has ABI {ABI}")
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: received.append(signum))
    try:
        def attempts() -> tuple[str, str]:
            confine()
            return outcome(lambda: os.kill(os.getppid(), signal.SIGUSR1)), outcome(lambda: os.kill(os.getpid(), 0))

        assert forked(attempts) == ("EPERM", "ok")  # the parent is outside the domain, the child inside
        time.sleep(0.2)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert received == []


@pytest.mark.parametrize("version", range(1, ABI + 1))
def test_each_older_abi_is_masked_and_its_gaps_reported(tmp_path: Path, version: int) -> None:
    """The ruleset built for ABI ``version`` (as an older kernel would get) is accepted, still
    refuses writes, and the report names what that ABI cannot refuse."""
    def attempts() -> tuple[Confinement, str]:
        landlock.abi = lambda: version  # this child only: an older kernel
        return confine(), outcome(lambda: (tmp_path / "canary").write_text("x"))

    report, write = forked(attempts)
    assert write == "EACCES" and not (tmp_path / "canary").exists()
    needs_newer = {what for what, (since, by_filter) in confine_module._COVERAGE.items()
                   if since is not None and since > version and not by_filter}
    assert set(report.unconfined) == needs_newer, str(report)
    for what in needs_newer:
        assert f"here: Landlock ABI {version}" in report.unconfined[what]


def test_handled_rights_follow_the_abi() -> None:
    assert landlock.handled_fs(1) == (1 << 13) - 1
    assert landlock.handled_fs(2) == landlock.handled_fs(1) | landlock.ACCESS_FS_REFER
    assert landlock.handled_fs(4) == landlock.handled_fs(3) == landlock.handled_fs(2) | landlock.ACCESS_FS_TRUNCATE
    assert landlock.handled_fs(7) == landlock.handled_fs(5) == (1 << 16) - 1


def test_without_landlock_or_filter_everything_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    def attempts() -> Confinement:
        landlock.abi = lambda: 0  # this child only: a kernel without them
        seccomp.available = lambda: False
        return confine()

    report = forked(attempts)
    assert set(report.confined) == {confine_module.PRIVILEGES}
    assert "no Landlock" in report.unconfined[confine_module.WRITES]
    assert "no seccomp filter" in report.unconfined[confine_module.SOCKETS]
    monkeypatch.setattr(confine_module, "_announced", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        announce(report)
        announce(report)
    assert [type(w.message) for w in caught] == [ConfinementWarning]
    assert confine_module.WRITES in str(caught[0].message)


def test_a_threaded_process_is_not_confined() -> None:
    def attempts() -> None:
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True).start()
        try:
            confine()
        finally:
            stop.set()

    with pytest.raises(RuntimeError, match="threads"):
        forked(attempts)


# -- the public path: simfs.isolated confines the child that runs the ranks -------------------------

def test_isolated_warns_once_naming_what_is_not_confined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(landlock, "abi", lambda: 0)  # the forked child inherits it: a kernel without Landlock
    monkeypatch.setattr(confine_module, "_announced", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert simfs.isolated(int, "1") == 1
        assert simfs.isolated(int, "2") == 2
    assert [type(w.message) for w in caught] == [ConfinementWarning]
    assert confine_module.WRITES in str(caught[0].message)


def test_rank_code_in_an_isolated_search_cannot_reach_the_host(tmp_path: Path,
                                                                 listeners: dict[str, socket.socket]) -> None:
    """Two C++ calls made by rank code in simfs.isolated's child past simfs's Python layer (which
    refuses them by name: the test reaches the original constructors, as other C++ code would reach
    open(2) and connect(2)): torch's archive writer opening a real path, and a TCPStore client
    connecting. The kernel refuses both."""
    torch = pytest.importorskip("torch")
    from simfs.rank.intercept.registry import original

    canary = tmp_path / "canary.pt"
    port = listeners["tcp"].getsockname()[1]

    def constructed(cls: type, *args: object, **kwargs: object) -> object:
        made = cls.__new__(cls)
        original(cls, "__init__")(made, *args, **kwargs)
        return made

    def job() -> dict[str, str]:
        out = {}
        try:
            writer: Any = constructed(torch._C.PyTorchFileWriter, str(canary))
            writer.write_record("data", b"hello", 5)
            writer.write_end_of_file()
            out["writer"] = "wrote"
        except RuntimeError as exc:
            out["writer"] = str(exc)
        try:
            constructed(torch._C._distributed_c10d.TCPStore, "127.0.0.1", port, is_master=False,
                        wait_for_workers=False, timeout=datetime.timedelta(seconds=1))
            out["store"] = "connected"
        except RuntimeError as exc:
            out["store"] = str(exc)
        return out

    def search() -> dict[str, str]:
        result = simfs.Cluster().run(job)
        assert not result.errors, result.errors
        returned: dict[str, str] = result.returns[0]
        return returned

    out = simfs.isolated(search, watchdog=30)
    assert "Permission denied" in out["writer"], out
    assert "Permission denied" in out["store"], out
    assert not canary.exists()
    assert untouched(listeners)
