"""Persistence models (simfs/fs/persistence.py): every crash state of a server under ``posix``,
``ext4`` and ``xfs``, enumerated; and the two cases that tell ext4 from strict POSIX, searched
exhaustively with unmodified job code: a marker written after an fsync never outlives the
directories made before it, and an unsynced file renamed over a durable one never loses it."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from conftest import MODEL_CARRIER
from test_persistence import BIG, SECTOR, all_crash_states, state_of

import scenarios
import simfs
from simfs import profiles
from simfs.fs.inode import ROOT
from simfs.fs.server import Server

LOCAL = profiles.get("local")
MODELS = ("posix", "ext4", "xfs")


def _server(model: str) -> Server:
    return Server(LOCAL.replace(persistence=model), lambda: 0.0, "/shared")


def _names(server: Server) -> str:
    return "".join(sorted(n for n, _ in server.readdir(ROOT) if len(n) == 1))


def _durable_file(server: Server, name: str, data: bytes) -> int:
    ino, _, _ = server.create(ROOT, name, 0o644, False)
    server.write(ino, 0, data)
    server.commit(ino)
    server.sync_dir(ROOT)
    return ino


# -- metadata order --------------------------------------------------------------------------------
@pytest.mark.parametrize("model", MODELS)
def test_unsynced_creates_persist_as_a_prefix_only_under_an_ordered_model(model: str) -> None:
    def build() -> Server:
        server = _server(model)
        for name in "abc":
            server.create(ROOT, name, 0o644, False)
        return server

    states = {_names(server) for _, server in all_crash_states(build)}
    prefixes = {"", "a", "ab", "abc"}
    assert states == (prefixes | {"b", "ac", "bc"} if model == "posix" else prefixes)  # local: omit_one


@pytest.mark.parametrize("model", MODELS)
def test_an_fsync_of_one_file_makes_every_earlier_name_durable_under_an_ordered_model(model: str) -> None:
    def build() -> Server:
        server = _server(model)
        server.create(ROOT, "a", 0o644, False)
        server.mkdir(ROOT, "d", 0o755)
        ino, _, _ = server.create(ROOT, "f", 0o644, False)
        server.write(ino, 0, b"data")
        server.commit(ino)  # fsync(f), no fsync of the directory
        return server

    outcomes = {(_names(server), state_of(server, "f")) for _, server in all_crash_states(build)}
    if model == "posix":
        assert ("ad", None) in outcomes and ("", None) in outcomes  # names wait for a directory fsync
    else:
        assert outcomes == {("adf", b"data")}


@pytest.mark.parametrize("model", ("ext4", "xfs"))
def test_unsynced_data_persists_apart_from_later_metadata_and_never_as_garbage(model: str) -> None:
    """A write before a later create may be lost while the create persists, or persist while
    it does not; the file holds a torn prefix of what was written, never other bytes."""
    def build() -> Server:
        server = _server(model)
        ino, _, _ = server.create(ROOT, "f", 0o644, False)
        server.write(ino, 0, BIG)
        server.create(ROOT, "g", 0o644, False)
        return server

    outcomes = {(_names(server), state_of(server, "f")) for _, server in all_crash_states(build)}
    torn = {BIG[:n] for n in range(0, len(BIG), SECTOR)} | {BIG}
    assert {data for names, data in outcomes if names == "fg"} == torn
    assert {data for names, data in outcomes if names == "f"} == torn
    assert {names for names, _ in outcomes} == {"", "f", "fg"}


# -- auto_da_alloc ----------------------------------------------------------------------------------
@pytest.mark.parametrize("model", MODELS)
def test_an_unsynced_file_renamed_over_a_durable_one(model: str) -> None:
    """conf.tmp written without fsync, renamed over the durable conf, twice: ext4 (auto_da_alloc)
    keeps one version whole, the first new one included though the second replaced (and
    deleted) it; xfs and posix may leave conf empty or torn."""
    second = BIG[::-1]

    def build() -> Server:
        server = _server(model)
        _durable_file(server, "conf", b"old")
        for data in (BIG, second):
            ino, _, _ = server.create(ROOT, "conf.tmp", 0o644, False)
            server.write(ino, 0, data)
            server.rename(ROOT, "conf.tmp", ROOT, "conf")
        server.create(ROOT, "later", 0o644, False)
        return server

    outcomes = {state_of(server, "conf") for _, server in all_crash_states(build)}
    if model == "ext4":
        assert outcomes == {b"old", BIG, second}
    else:
        assert {b"old", second, b""} <= outcomes


@pytest.mark.parametrize("model", MODELS)
def test_a_file_truncated_to_zero_rewritten_and_closed(model: str) -> None:
    """open(O_TRUNC), write, close, then a later create: under ext4, once the later create
    persisted the new content did too."""
    def build() -> Server:
        server = _server(model)
        ino = _durable_file(server, "conf", b"old")
        server.truncate(ino, 0)
        server.write(ino, 0, BIG)
        server.closed(ino)
        server.create(ROOT, "later", 0o644, False)
        return server

    outcomes = {(server.lookup(ROOT, "later") is not None, state_of(server, "conf"))
                for _, server in all_crash_states(build)}
    after = {conf for later, conf in outcomes if later}
    if model == "ext4":
        assert after == {BIG}
        assert {conf for later, conf in outcomes if not later} == {b"old", b"", BIG}
    else:
        assert b"" in after


def test_a_close_without_a_truncation_to_zero_orders_nothing() -> None:
    def build() -> Server:
        server = _server("ext4")
        ino = _durable_file(server, "conf", b"old")
        server.write(ino, 0, b"new")
        server.closed(ino)
        server.create(ROOT, "later", 0o644, False)
        return server

    outcomes = {(server.lookup(ROOT, "later") is not None, state_of(server, "conf"))
                for _, server in all_crash_states(build)}
    assert (True, b"old") in outcomes


# -- exhaustive search of job code ---------------------------------------------------------------------
MARKER = "/shared/marker"


def marker_after_fsync() -> None:
    os.makedirs("/shared/a/b/c")
    with open("/shared/a/b/c/f", "wb") as f:
        f.write(b"payload")
        f.flush()
        os.fsync(f.fileno())
    with open(MARKER, "w") as f:
        f.write("done")


def marker_means_payload() -> None:
    if os.path.exists(MARKER):
        with open("/shared/a/b/c/f", "rb") as f:
            assert f.read() == b"payload"


READY = "/shared/ready"  # made once conf is durable


def replace_by_rename() -> None:
    """A durable conf, then a new one written without fsync and renamed over it."""
    with open("/shared/conf", "w") as f:
        f.write("old")
        f.flush()
        os.fsync(f.fileno())
    fd = os.open("/shared", os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    open(READY, "w").close()
    with open("/shared/conf.tmp", "w") as f:
        f.write("new-" * 2000)
    os.rename("/shared/conf.tmp", "/shared/conf")


def conf_is_old_or_new() -> None:
    """Once conf was durable (ready exists), it holds the old content or the new, whole."""
    if os.path.exists(READY):
        with open("/shared/conf") as f:
            assert f.read() in ("old", "new-" * 2000)


def _explore(job: Callable[[], None], recover: Callable[[], None], model: str) -> scenarios.Finding:
    return scenarios.explore(job, recover=recover, crashes="exhaustive", nodes=1, ranks_per_node=1,
                             profile=LOCAL.replace(persistence=model), carrier=MODEL_CARRIER)


@pytest.mark.parametrize("model", MODELS)
def test_a_marker_written_after_an_fsync_never_outlives_the_directories_before_it(model: str) -> None:
    finding = _explore(marker_after_fsync, marker_means_payload, model)
    assert finding.failed == (model == "posix"), str(finding)


@pytest.mark.parametrize("model", MODELS)
def test_an_unsynced_replace_by_rename_never_loses_the_old_file_on_ext4(model: str) -> None:
    finding = _explore(replace_by_rename, conf_is_old_or_new, model)
    assert finding.failed == (model != "ext4"), str(finding)


def test_the_local_profile_is_ext4() -> None:
    assert LOCAL.persistence == "ext4" and "ext4" in (LOCAL.source("persistence") or "")
    assert simfs.profiles.get("nfs").persistence in MODELS


@pytest.mark.parametrize("model", MODELS)
def test_a_file_made_after_a_crash_keeps_its_mode_through_the_next(model: str) -> None:
    """The journal looks up live inodes of the server as it is now, not as it was before a crash
    replaced its namespace."""
    server = _server(model)
    server.crash_into(server.crash_states()[0])
    ino, _, _ = server.create(ROOT, "f", 0o600, False)
    server.write(ino, 0, b"data")
    server.setattr(ino, mode=0o640)
    server.commit(ino)
    server.sync_dir(ROOT)
    server.crash_into(server.crash_states()[0])
    assert server.inodes[server.lookup(ROOT, "f")].mode == 0o640
