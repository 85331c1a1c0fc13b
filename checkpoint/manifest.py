"""The manifest: the one file that makes a checkpoint exist. Versioned, pickle-free JSON
(msgspec): every data file with its size, every tensor with its dtype, shape and the chunks that
hold it (each stored as tiles with an xxh3-64 checksum apiece, see tiles.py), every JSON value.
It is sealed by its own checksum (so any changed byte is caught) and decoding validates it
strictly, so a malicious manifest is refused before any data file is opened: among the rest,
the chunks stored in each file must fill it exactly, back to back, so every byte of every data
file belongs to exactly one checksummed tile."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import msgspec
import xxhash

from . import dtypes, tiles
from .boxes import Box, cover_problem, describe, volume
from .errors import ManifestError

FORMAT = "checkpoint"
VERSION = 2  # 1: per-block checksums of whole files (not read: load it with the library that wrote it)
MAX_ELEMENTS = 1 << 50
MAX_DIMS = 32
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


class Value(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """A JSON-able leaf, bit-exact: floats as float.hex, ints of any size as text."""

    kind: Literal["none", "bool", "int", "float", "str", "tuple"]
    text: str = ""
    items: tuple[Value, ...] = ()


def encode_value(value: Any) -> Value:
    if value is None:
        return Value("none")
    if isinstance(value, bool):
        return Value("bool", "true" if value else "false")
    if isinstance(value, int):
        return Value("int", str(value))
    if isinstance(value, float):
        return Value("float", value.hex())
    if isinstance(value, str):
        return Value("str", value)
    return Value("tuple", items=tuple(encode_value(v) for v in value))


def decode_value(value: Value) -> Any:
    if value.kind == "none":
        return None
    if value.kind == "bool":
        return value.text == "true"
    if value.kind == "int":
        return int(value.text)
    if value.kind == "float":
        return float.fromhex(value.text)
    if value.kind == "str":
        return value.text
    return tuple(decode_value(v) for v in value.items)


Checksum = Annotated[int, msgspec.Meta(ge=0)]  # an xxh3-64 (the upper bound is checked by validate)


class FileEntry(msgspec.Struct, frozen=True, gc=False):
    size: Annotated[int, msgspec.Meta(ge=0, lt=1 << 53)]


class ChunkEntry(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """The box ``offsets``/``shape`` of a tensor, stored from byte ``offset`` of ``file`` as tiles
    of shape ``tile`` (see tiles.py), ``checksums`` holding each tile's xxh3-64 in storage order."""

    offsets: tuple[int, ...]
    shape: tuple[int, ...]
    file: str
    offset: int
    tile: tuple[int, ...]
    checksums: list[Checksum]


class TensorEntry(msgspec.Struct, frozen=True, gc=False):
    """A tensor (or, kind "object", a pickled object as uint8 bytes) and its chunks."""

    dtype: str
    shape: tuple[int, ...]
    chunks: list[ChunkEntry]
    kind: Literal["tensor", "object"] = "tensor"


class Manifest(msgspec.Struct, frozen=True):
    save_id: str
    world_size: int
    files: dict[str, FileEntry]
    tensors: dict[str, TensorEntry]
    values: dict[str, Value]


class _Envelope(msgspec.Struct, frozen=True):
    """The file: format, version, and the manifest's JSON with its xxh3-64 (hex)."""

    format: str
    version: int
    checksum: str
    manifest: msgspec.Raw


def encode(manifest: Manifest) -> bytes:
    body = msgspec.json.encode(manifest)
    return msgspec.json.encode(_Envelope(FORMAT, VERSION, xxhash.xxh3_64_hexdigest(body), msgspec.Raw(body)))


def decode(data: bytes, where: str) -> Manifest:
    """Parse, check and validate a manifest; ``where`` (its path) goes into every error."""
    try:
        envelope = msgspec.json.decode(data, type=_Envelope)
        if envelope.format != FORMAT:
            raise ManifestError(f"{where}: not a checkpoint manifest (format {envelope.format!r})")
        if envelope.version != VERSION:
            raise ManifestError(f"{where}: manifest version {envelope.version} is not this library's ({VERSION})"
                                + ("; upgrade to load it" if envelope.version > VERSION else
                                   "; it is an older format: load it with the version that wrote it"))
        if xxhash.xxh3_64_hexdigest(bytes(envelope.manifest)) != envelope.checksum:
            raise ManifestError(f"{where}: the manifest fails its checksum (corrupt or modified)")
        manifest = msgspec.json.decode(envelope.manifest, type=Manifest)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ManifestError(f"{where}: unreadable manifest: {exc}") from None
    validate(manifest, where)
    return manifest


def is_safe_name(name: str) -> bool:
    """A plain file name inside the checkpoint directory: no separators, no '..', not hidden."""
    return bool(_NAME.fullmatch(name)) and ".." not in name


def validate(m: Manifest, where: str) -> None:
    """Raise ManifestError unless every name, size, offset, dtype, shape and tile is sound and
    the chunks in each file fill it exactly."""
    for name in m.files:
        if not is_safe_name(name):
            raise ManifestError(f"{where}: file name {name!r} is not a plain name inside the checkpoint directory")
    stored: dict[str, list[tuple[int, int, str, Box]]] = {name: [] for name in m.files}
    for key, tensor in m.tensors.items():
        _validate_tensor(m, key, tensor, where, stored)
    for name, spans in stored.items():
        _validate_filled(name, m.files[name].size, spans, where)


def _validate_tensor(m: Manifest, key: str, t: TensorEntry, where: str,
                     stored: dict[str, list[tuple[int, int, str, Box]]]) -> None:
    what = f"{where}: tensor {key!r}"
    if t.dtype not in dtypes.ITEMSIZE:
        raise ManifestError(f"{what}: unknown dtype {t.dtype!r}")
    if t.kind == "object" and (t.dtype != "uint8" or len(t.shape) != 1):
        raise ManifestError(f"{what}: a pickled object must be 1-D uint8")
    if len(t.shape) > MAX_DIMS or any(s < 0 for s in t.shape) or volume(t.shape) > MAX_ELEMENTS:
        raise ManifestError(f"{what}: shape {list(t.shape)} is negative, has over {MAX_DIMS} dimensions "
                            f"or over 2**50 elements")
    itemsize = dtypes.ITEMSIZE[t.dtype]
    for chunk in t.chunks:
        box = (chunk.offsets, chunk.shape)
        entry = m.files.get(chunk.file)
        if entry is None:
            raise ManifestError(f"{what}: chunk {describe(box)} is in {chunk.file!r}, which the manifest does not list")
        if len(chunk.offsets) != len(t.shape) or len(chunk.shape) != len(t.shape):
            raise ManifestError(f"{what}: chunk {describe(box)} does not have {len(t.shape)} dimensions")
        whole = chunk.tile == chunk.shape and 0 not in chunk.shape  # one tile (the common case, kept fast)
        if not whole and (len(chunk.tile) != len(t.shape)
                          or not all(1 <= s <= max(n, 1) for s, n in zip(chunk.tile, chunk.shape))):
            raise ManifestError(f"{what}: chunk {describe(box)} has tiles of shape {list(chunk.tile)}, which do not "
                                "fit inside it")
        expected = 1 if whole else tiles.count(chunk.shape, chunk.tile)
        if len(chunk.checksums) != expected or (expected and max(chunk.checksums) >> 64):
            raise ManifestError(f"{what}: chunk {describe(box)} lists {len(chunk.checksums)} checksums for its "
                                f"{expected} tiles (or one is not a 64-bit value)")
        end = chunk.offset + volume(chunk.shape) * itemsize
        if chunk.offset < 0 or chunk.offset % itemsize or end > entry.size:
            raise ManifestError(f"{what}: chunk {describe(box)} at bytes {chunk.offset}-{end} of {chunk.file} "
                                f"lies outside the file's {entry.size} bytes or is not aligned to its elements")
        if end > chunk.offset:
            stored[chunk.file].append((chunk.offset, end, key, box))
    problem = cover_problem(t.shape, [(c.offsets, c.shape) for c in t.chunks])
    if problem:
        raise ManifestError(f"{what} of shape {list(t.shape)}: {problem}")


def _validate_filled(name: str, size: int, spans: list[tuple[int, int, str, Box]], where: str) -> None:
    """The chunks stored in a file must fill it back to back: no overlap, no byte unaccounted for."""
    spans.sort()
    position = 0
    for start, end, key, box in spans:
        if start != position:
            problem = "overlaps the chunk before it" if start < position else f"leaves bytes {position}-{start} unused"
            raise ManifestError(f"{where}: file {name}: chunk {key!r} {describe(box)} at bytes {start}-{end} {problem}")
        position = end
    if position != size:
        raise ManifestError(f"{where}: file {name}: its chunks end at byte {position} of its {size} bytes")
