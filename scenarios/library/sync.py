"""(g) Shipping the job's files from the shared filesystem to every node's local disk (PARL's
distributed_files), while the file set changes (a file edited, one removed, one added) and a
node may crash mid-sync. The restarted job syncs again; then every node's copy must equal the
sources. Trusting a manifest a node keeps of what it holds fails after a crash; coord.sync_files
compares the files themselves and installs each by rename."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from typing import cast

import torch.distributed as dist

import coord

from ._common import CRASH_PROFILES, content, node_leader, read_file, scenario, write_file

FAMILY = "sync"
SOURCES = "/shared/code"
DEST = "/tmp/code"  # node-local
MANIFEST = f"{DEST}/.manifest.json"
# version -> {relative path: revision}; sizes differ between revisions
FILE_SETS = {1: {"train.py": 1, "model.bin": 1, "conf/old.yaml": 1},
             2: {"train.py": 2, "model.bin": 1, "conf/new.yaml": 2}}


def _content(rel: str, revision: int) -> bytes:
    return content(f"{rel} r{revision}", 3000 + 1500 * revision + len(rel))


def _publish(version: int) -> None:
    """Rank 0 replaces the sources with a version of the file set, durably (a storage crash
    must not change what the job ships)."""
    if dist.get_rank() == 0:
        if os.path.isdir(SOURCES):
            shutil.rmtree(SOURCES)
        for rel, revision in FILE_SETS[version].items():
            path = os.path.join(SOURCES, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_file(path, _content(rel, revision), durable=True)
    dist.barrier()


def _digests() -> dict[str, str]:
    out = {}
    for top, _dirs, names in os.walk(SOURCES):
        for name in names:
            path = os.path.join(top, name)
            out[os.path.relpath(path, SOURCES)] = hashlib.sha256(read_file(path)).hexdigest()
    return out


def _manifest_sync() -> None:
    """Rank 0 broadcasts the sources' hashes; each node leader copies in place the files its
    manifest says differ, deletes the ones gone, then rewrites its manifest."""
    box: list[object] = [_digests() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    wanted = cast(dict[str, str], box[0])
    if node_leader():
        try:
            held: dict[str, str] = json.loads(read_file(MANIFEST))
        except FileNotFoundError:
            held = {}
        for rel, digest in sorted(wanted.items()):
            if held.get(rel) != digest:
                target = os.path.join(DEST, rel)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copyfile(os.path.join(SOURCES, rel), target)
        for rel in sorted(set(held) - set(wanted)):
            os.unlink(os.path.join(DEST, rel))
        with open(MANIFEST, "w") as f:
            json.dump(wanted, f)
    dist.barrier()


def _verify() -> None:
    """Each node leader: the node's copy holds exactly the current file set."""
    if node_leader():
        held = {}
        for top, _dirs, names in os.walk(DEST):
            for name in names:
                path = os.path.join(top, name)
                if path != MANIFEST:
                    held[os.path.relpath(path, DEST)] = read_file(path)
        wanted = {rel: _content(rel, revision) for rel, revision in FILE_SETS[2].items()}
        wrong = sorted(rel for rel in held.keys() | wanted.keys() if held.get(rel) != wanted.get(rel))
        if wrong:
            raise RuntimeError(f"this node's copy differs from the sources in {wrong}")
    dist.barrier()


def _coord_sync() -> None:
    coord.sync_files(SOURCES + "/**", DEST)


def manifest_recover() -> None:
    """The restarted job: publish and sync again the same way, then check every node's copy."""
    _publish(2)
    _manifest_sync()
    _verify()


def coord_recover() -> None:
    """The restarted job: publish and coord.sync_files again, then check every node's copy."""
    _publish(2)
    _coord_sync()
    _verify()


@scenario("sync-trusting-manifest", recover=manifest_recover, crashes=True, nodes=2, ranks_per_node=1,
          max_examples=200, expect=dict.fromkeys(CRASH_PROFILES, "fail"), family=FAMILY, tags=("naive",))
def sync_trusting_manifest() -> None:
    """Node leaders copy in place what their own manifest says changed, then rewrite it (PARL distributed_files).

    Nothing is fsynced and a node's power loss persists its writes out of order: the new
    manifest can survive while a copy it vouches for is torn or old, so the next sync trusts it
    and leaves wrong files, or the manifest itself is torn (JSONDecodeError)."""
    for version in (1, 2):
        _publish(version)
        _manifest_sync()


@scenario("sync-files", recover=coord_recover, crashes=True, nodes=2, ranks_per_node=1, max_examples=100,
          expect=dict.fromkeys(CRASH_PROFILES, "pass"), family=FAMILY, tags=("fixed",))
def sync_with_coord() -> None:
    """coord.sync_files ships the file set to every node, twice, the set changing in between.

    It hashes what each node really holds (a crash-torn copy is found and sent again), installs
    each file by rename and removes files gone from the set."""
    for version in (1, 2):
        _publish(version)
        _coord_sync()
