"""Shared test settings: Hypothesis profiles ('ci' is derandomized) and small helpers."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=40, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


# -- a real lagging network filesystem: two sshfs mounts of one directory over loopback --------
import shutil  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import pytest  # noqa: E402

SSHFS_CACHE = 2.0  # entry/attr/negative timeouts of the FUSE caches, seconds


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


@pytest.fixture(scope="session")
def sshfs_pair():
    if not os.path.exists("/dev/fuse"):
        pytest.skip("/dev/fuse is absent: no FUSE mounts on this machine")
    for tool in ("sshfs", "fusermount"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed (.ci/run installs sshfs and openssh-server)")
    if not os.path.exists("/usr/sbin/sshd"):
        pytest.fail("/usr/sbin/sshd is not installed (.ci/run installs openssh-server)")
    root = tempfile.mkdtemp(prefix="simfs-sshfs-")
    export, a, b = (os.path.join(root, n) for n in ("export", "a", "b"))
    for d in (export, a, b):
        os.mkdir(d)
    key, port = os.path.join(root, "key"), _free_port()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
    host_key = os.path.join(root, "host_key")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", host_key], check=True)
    authorized = os.path.join(root, "authorized_keys")
    shutil.copy(key + ".pub", authorized)
    os.chmod(authorized, 0o600)
    os.makedirs("/run/sshd", exist_ok=True)
    sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-p", str(port), "-o", "ListenAddress=127.0.0.1",
                             "-h", host_key, "-o", f"AuthorizedKeysFile={authorized}", "-o", "StrictModes=no",
                             "-o", "PidFile=none"], stderr=subprocess.DEVNULL)
    options = (f"IdentityFile={key},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,cache=yes,"
               f"entry_timeout={SSHFS_CACHE},attr_timeout={SSHFS_CACHE},negative_timeout={SSHFS_CACHE},"
               f"cache_timeout={SSHFS_CACHE:g}")
    try:
        for mount in (a, b):
            for attempt in range(50):
                done = subprocess.run(["sshfs", "-p", str(port), "-o", options, f"root@127.0.0.1:{export}", mount],
                                      capture_output=True, text=True)
                if done.returncode == 0:
                    break
                time.sleep(0.1)  # sshd may still be starting
            else:
                pytest.fail(f"sshfs mount failed: {done.stderr.strip()}")
        yield SshfsPair(export, a, b, SSHFS_CACHE)
    finally:
        for mount in (a, b):
            subprocess.run(["fusermount", "-u", "-z", mount], capture_output=True)
        sshd.terminate()
        sshd.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)
