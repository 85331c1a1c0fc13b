"""Damaged and malicious checkpoints: any flipped byte (of a data file or the manifest), a
truncated or deleted file, is reported by verify and load naming the file; a crafted manifest
(paths with '..' or absolute, offsets past the file, huge shapes, unknown dtypes, tiles that do
not fit their chunk, chunks that overlap or leave bytes of their file unaccounted for) is refused
with a clear error before anything outside the checkpoint directory is opened."""

from __future__ import annotations

import builtins
import io
import os
import shutil
import tempfile
from unittest import mock

import msgspec
import pytest
import torch
from _checkpoint_cases import assert_same, blank, make_tensor
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

import checkpoint
from checkpoint import manifest as manifest_module
from checkpoint import write

STATE = {"w": make_tensor(torch.float32, (40, 100), 1), "b": make_tensor(torch.bfloat16, (7,), 2),
         "h": make_tensor(torch.int64, (3, 5), 3), "step": 12, "name": "run"}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A checkpoint of three data files (one per writer thread) with 4 KiB tiles ('w' has 8)."""
    path = str(tmp_path_factory.mktemp("pristine") / "ck")
    with mock.patch.object(write, "FILE_BYTES", 1):
        checkpoint.save_staged(checkpoint.stage(STATE), path, threads=3, tile_bytes=4096)
    assert len(checkpoint.read_manifest(path).files) == 3
    return path


def _copy(src: str, tmp: str) -> str:
    dst = os.path.join(tmp, "ck")
    shutil.copytree(src, dst)
    return dst


def _load(path: str) -> None:
    checkpoint.load(blank(STATE), path)


def test_pristine_checkpoint_verifies_and_loads(pristine):
    report = checkpoint.verify(pristine)
    assert report.files == 3 and report.tensors == 3 and report.values == 2 and report.tiles == 10
    target = blank(STATE)
    checkpoint.load(target, pristine)
    assert_same(STATE, target)


@given(st.data())
@settings(max_examples=60)
def test_any_flipped_byte_is_reported_naming_the_file(pristine, data):
    names = sorted(os.listdir(pristine))
    name = data.draw(st.sampled_from(names), label="file")
    size = os.path.getsize(os.path.join(pristine, name))
    position = data.draw(st.integers(0, size - 1), label="byte")
    bit = data.draw(st.integers(0, 7), label="bit")
    with tempfile.TemporaryDirectory() as tmp:
        path = _copy(pristine, tmp)
        with open(os.path.join(path, name), "r+b") as f:
            f.seek(position)
            byte = f.read(1)[0]
            f.seek(position)
            f.write(bytes([byte ^ (1 << bit)]))
        for action in (checkpoint.verify, _load):
            with pytest.raises(checkpoint.CorruptCheckpoint) as info:
                action(path)
            assert name in str(info.value)


@given(st.data())
@settings(max_examples=20)
def test_truncated_files_are_reported_naming_the_file(pristine, data):
    name = data.draw(st.sampled_from(sorted(os.listdir(pristine))))
    size = os.path.getsize(os.path.join(pristine, name))
    keep = data.draw(st.integers(0, size - 1))
    with tempfile.TemporaryDirectory() as tmp:
        path = _copy(pristine, tmp)
        os.truncate(os.path.join(path, name), keep)
        for action in (checkpoint.verify, _load):
            with pytest.raises(checkpoint.CorruptCheckpoint, match=name.replace(".", r"\.")):
                action(path)


def test_deleted_files_are_reported(pristine, tmp_path):
    path = _copy(pristine, str(tmp_path))
    data_file = sorted(checkpoint.read_manifest(path).files)[1]
    os.unlink(os.path.join(path, data_file))
    for action in (checkpoint.verify, _load):
        missing = rf"data file {data_file} listed in the manifest is missing"
        with pytest.raises(checkpoint.CorruptCheckpoint, match=missing):
            action(path)
    os.unlink(os.path.join(path, checkpoint.MANIFEST_NAME))
    for action in (checkpoint.verify, _load):
        with pytest.raises(checkpoint.CheckpointNotFound, match=r"manifest\.json is missing"):
            action(path)


# -- malicious manifests -------------------------------------------------------------------------

def _rewrite(path: str, edit) -> None:
    """Replace the manifest with ``edit(manifest)``, sealed with a valid checksum (an attacker
    can compute one too)."""
    manifest = checkpoint.read_manifest(path)
    with open(os.path.join(path, checkpoint.MANIFEST_NAME), "wb") as f:
        f.write(manifest_module.encode(edit(manifest)))


def _rename_file(new: str):
    def edit(m):
        old = sorted(m.files)[0]
        files = {new if k == old else k: v for k, v in m.files.items()}
        tensors = {k: replace(t, chunks=[replace(c, file=new if c.file == old else c.file) for c in t.chunks])
                   for k, t in m.tensors.items()}
        return replace(m, files=files, tensors=tensors)
    return edit


def _edit_tensor(key: str, **changes):
    def edit(m):
        return replace(m, tensors={**m.tensors, key: replace(m.tensors[key], **changes)})
    return edit


def _edit_chunk(key: str, **changes):
    def edit(m):
        t = m.tensors[key]
        chunks = [replace(t.chunks[0], **changes), *t.chunks[1:]]
        return replace(m, tensors={**m.tensors, key: replace(t, chunks=chunks)})
    return edit


def _share_file(moved: str, into: str):
    """Store ``moved``'s chunk at byte 0 of ``into``'s file (and drop its own file)."""
    def edit(m):
        old, new = m.tensors[moved].chunks[0].file, m.tensors[into].chunks[0].file
        m = _edit_chunk(moved, file=new, offset=0)(m)
        return replace(m, files={k: v for k, v in m.files.items() if k != old})
    return edit


def _grow_file(key: str, extra: int):
    def edit(m):
        name = m.tensors[key].chunks[0].file
        return replace(m, files={**m.files, name: replace(m.files[name], size=m.files[name].size + extra)})
    return edit


MALICIOUS = {
    "dotdot": (_rename_file("../outside.bin"), r"file name '\.\./outside\.bin' is not a plain name"),
    "absolute": (_rename_file("/etc/passwd"), r"file name '/etc/passwd' is not a plain name"),
    "subdir": (_rename_file("sub/x.bin"), r"file name 'sub/x\.bin' is not a plain name"),
    "offset": (_edit_chunk("h", offset=1 << 30), r"tensor 'h': chunk \[0:3, 0:5\] at bytes 1073741824-.* lies outside"),
    "misaligned": (_edit_chunk("h", offset=4), r"tensor 'h': chunk \[0:3, 0:5\] at bytes 4-124 .* not aligned"),
    "huge": (_edit_tensor("w", shape=(1 << 40, 1 << 40)), r"tensor 'w': shape \[1099511627776, 10995.* over 2\*\*50"),
    "dtype": (_edit_tensor("b", dtype="float128"), r"tensor 'b': unknown dtype 'float128'"),
    "uncovered": (_edit_tensor("w", shape=(41, 100)), r"tensor 'w' of shape \[41, 100\]: the chunks hold 4000 of"),
    "unlisted": (_edit_chunk("w", file="other.bin"), r"in 'other\.bin', which the manifest does not list"),
    "tile": (_edit_chunk("w", tile=(64, 32)), r"chunk \[0:40, 0:100\] has tiles of shape \[64, 32\], which"),
    "checksums": (_edit_chunk("w", checksums=[1]), r"chunk \[0:40, 0:100\] lists 1 checksums for its 8 tiles"),
    "overlap": (_share_file("b", "h"), r"file .*: chunk 'h' \[0:3, 0:5\] at bytes 0-120 overlaps the chunk before it"),
    "gap": (_grow_file("h", 8), r"file .*: its chunks end at byte 120 of its 128 bytes"),
}


@pytest.mark.parametrize("case", sorted(MALICIOUS))
def test_malicious_manifest_is_refused_without_opening_outside(pristine, tmp_path, case):
    edit, message = MALICIOUS[case]
    path = _copy(pristine, str(tmp_path))
    (tmp_path / "outside.bin").write_bytes(b"\0" * 100000)  # what '..' would reach
    _rewrite(path, edit)
    opened: list[str] = []

    def spy(real):
        def wrapper(file, *args, **kwargs):
            if isinstance(file, (str, bytes, os.PathLike)):
                opened.append(os.path.abspath(os.fsdecode(file)))
            return real(file, *args, **kwargs)
        return wrapper

    with mock.patch.object(builtins, "open", spy(builtins.open)), mock.patch.object(io, "open", spy(io.open)), \
            mock.patch.object(os, "open", spy(os.open)):
        for action in (checkpoint.verify, _load):
            with pytest.raises(checkpoint.ManifestError, match=message):
                action(path)
    assert opened and all(p == os.path.join(path, checkpoint.MANIFEST_NAME) for p in opened), opened


def test_manifest_from_a_newer_version_or_another_format(pristine, tmp_path):
    path = _copy(pristine, str(tmp_path))
    target = os.path.join(path, checkpoint.MANIFEST_NAME)
    envelope = msgspec.json.decode(open(target, "rb").read())
    for change, message in [({"version": 3}, "manifest version 3 is not this library's .*upgrade"),
                            ({"version": 1}, "manifest version 1 is not this library's .*older format"),
                            ({"format": "other"}, "not a checkpoint manifest"),
                            ({"checksum": "0" * 16}, "fails its checksum")]:
        with open(target, "wb") as f:
            f.write(msgspec.json.encode({**envelope, **change}))
        with pytest.raises(checkpoint.ManifestError, match=message):
            checkpoint.verify(path)
    with open(target, "wb") as f:
        f.write(b"\x80\x04pickle")
    with pytest.raises(checkpoint.ManifestError, match="unreadable manifest"):
        _load(path)
