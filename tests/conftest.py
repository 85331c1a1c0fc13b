"""Shared test settings: Hypothesis profiles ('ci' is derandomized) and small helpers."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NoReturn

import pytest
from hypothesis import HealthCheck, settings

# no example database: tests search the same jobs on the same profiles in parallel workers and
# count their examples, which a failure remembered from another test or an earlier run would change
# (tests/test_database.py checks the database with databases of its own); SIMFS_DB is `simfs run
# --db`'s default, for the CLI tests here and in their subprocesses
settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=40, print_blob=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", deadline=None, max_examples=60, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
os.environ["SIMFS_DB"] = ""

# the carrier of tests that check the filesystem model (or code that keeps no per-process state),
# which runs in the host on either carrier: greenlet ranks check it several times faster than rank
# processes (reports/BENCHMARKS.md, carriers); the process carrier has tests of its own
MODEL_CARRIER = "greenlet"
# ...and how their clusters run: greenlet ranks in the test's own process (simfs's own code, trusted:
# the jobs share the test's objects, and a cluster runs again after a crash)
MODEL = {"carrier": MODEL_CARRIER, "isolate": False}


# -- tests that need something outside Python ----------------------------------------------------

def required() -> frozenset[str]:
    """What SIMFS_REQUIRE lists (comma or space separated, e.g. "sshfs,chromium"): things whose
    absence fails the tests that need them instead of skipping them. .ci/run sets it."""
    return frozenset(os.environ.get("SIMFS_REQUIRE", "").replace(",", " ").split())


def missing(thing: str, why: str) -> NoReturn:
    """Skip the calling test (or fixture) because ``thing`` is unavailable here, saying ``why``;
    fail it instead when SIMFS_REQUIRE lists ``thing``. The one helper for every "needs X" skip."""
    message = f"needs {thing}: {why}"
    if thing in required():
        pytest.fail(f"{message} (SIMFS_REQUIRE={os.environ['SIMFS_REQUIRE']!r} requires {thing})", pytrace=False)
    pytest.skip(message)


@pytest.fixture
def cuda_device() -> None:
    """The GPU tests' precondition (``pytest.mark.usefixtures("cuda_device")``): a CUDA device.
    CI has none; a GPU machine's run sets SIMFS_REQUIRE=cuda so that its absence fails them."""
    import torch

    if not torch.cuda.is_available():
        missing("cuda", "no CUDA device here (CI has none)")


# -- a real lagging network filesystem: two sshfs mounts of one directory over loopback --------

SSHFS_CACHE = 2.0  # entry/attr/negative timeouts of the FUSE caches, seconds
# sshfs/fusermount errors that mean "this machine cannot mount FUSE" (a container without the
# device or the capability, an unprivileged user), not a broken fixture
_FUSE_UNAVAILABLE = ("fuse: device not found", "/dev/fuse", "operation not permitted", "permission denied",
                     "fusermount")


@dataclass(frozen=True)
class SshfsPair:
    """One exported directory seen through two FUSE clients that cache like NFS clients."""

    export: str
    a: str
    b: str
    cache: float


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sshfs_tools() -> str:
    """fusermount's path; skips (fails under SIMFS_REQUIRE=sshfs) where something is missing."""
    if not os.path.exists("/dev/fuse"):
        missing("sshfs", "/dev/fuse is absent: no FUSE mounts on this machine")
    if shutil.which("sshfs") is None:
        missing("sshfs", "sshfs is not installed (apt-get install sshfs; .ci/run installs it)")
    fusermount = shutil.which("fusermount") or shutil.which("fusermount3")
    if fusermount is None:
        missing("sshfs", "fusermount is not installed (apt-get install fuse3; .ci/run installs it with sshfs)")
    if shutil.which("ssh-keygen") is None:
        missing("sshfs", "ssh-keygen is not installed (apt-get install openssh-client; .ci/run installs it)")
    if not os.path.exists("/usr/sbin/sshd"):
        missing("sshfs", "/usr/sbin/sshd is not installed (apt-get install openssh-server; .ci/run installs it)")
    return fusermount


class SshfsMounts:
    """One sshd on loopback; ``pair(...)`` exports a new directory and mounts it twice with the
    given FUSE cache timeouts (seconds). ``sshfs_cache``: sshfs's own attribute and listing cache
    (whole seconds, under the kernel's) with ``cache_timeout`` = the attribute timeout."""

    def __init__(self, fusermount: str) -> None:
        self.fusermount = fusermount
        self.root = tempfile.mkdtemp(prefix="simfs-sshfs-")
        self.key, self.port = os.path.join(self.root, "key"), _free_port()
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.key], check=True)
        host_key = os.path.join(self.root, "host_key")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", host_key], check=True)
        authorized = os.path.join(self.root, "authorized_keys")
        shutil.copy(self.key + ".pub", authorized)
        os.chmod(authorized, 0o600)
        try:
            os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory (root only)
        except OSError:
            pass
        self.sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-p", str(self.port), "-o",
                                      "ListenAddress=127.0.0.1", "-h", host_key, "-o",
                                      f"AuthorizedKeysFile={authorized}", "-o", "StrictModes=no", "-o",
                                      "PidFile=none"], stderr=subprocess.DEVNULL)
        self.mounts: list[str] = []

    def pair(self, entry: float, attr: float, negative: float, *, sshfs_cache: bool = True) -> SshfsPair:
        name = f"pair{len(self.mounts) // 2}"
        export, a, b = (os.path.join(self.root, name, n) for n in ("export", "a", "b"))
        for d in (export, a, b):
            os.makedirs(d)
        own = f"cache=yes,cache_timeout={attr:g}" if sshfs_cache else "cache=no"
        options = (f"IdentityFile={self.key},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,{own},"
                   f"entry_timeout={entry},attr_timeout={attr},negative_timeout={negative}")
        for mount in (a, b):
            for _attempt in range(50):
                done = subprocess.run(["sshfs", "-p", str(self.port), "-o", options,
                                       f"{getpass.getuser()}@127.0.0.1:{export}", mount],
                                      capture_output=True, text=True)
                if done.returncode == 0:
                    self.mounts.append(mount)
                    break
                time.sleep(0.1)  # sshd may still be starting
            else:
                error = done.stderr.strip() or f"exit status {done.returncode}"
                if self.sshd.poll() is not None:
                    missing("sshfs", f"sshd on 127.0.0.1:{self.port} exited with status {self.sshd.returncode}; "
                                     f"sshfs said: {error}")
                if any(sign in error.lower() for sign in _FUSE_UNAVAILABLE):
                    missing("sshfs", f"FUSE cannot mount on this machine: {error}")
                pytest.fail(f"sshfs mount failed: {error}")
        return SshfsPair(export, a, b, max(entry, attr, negative))

    def close(self) -> None:
        for mount in self.mounts:
            subprocess.run([self.fusermount, "-u", "-z", mount], capture_output=True)
        self.sshd.terminate()
        self.sshd.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def sshfs_mounts() -> Iterator[SshfsMounts]:
    """Pairs of sshfs mounts with chosen cache timeouts, all over one sshd. Skips (fails under
    SIMFS_REQUIRE=sshfs) where sshfs, fusermount, sshd or /dev/fuse is absent or FUSE cannot
    mount here."""
    mounts = SshfsMounts(_sshfs_tools())
    try:
        yield mounts
    finally:
        mounts.close()


@pytest.fixture(scope="session")
def sshfs_pair(sshfs_mounts: SshfsMounts) -> SshfsPair:
    """Entry, attribute and negative timeouts of SSHFS_CACHE seconds, sshfs's own cache on."""
    return sshfs_mounts.pair(SSHFS_CACHE, SSHFS_CACHE, SSHFS_CACHE)
