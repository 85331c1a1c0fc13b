"""What a rank process may say to the host, declared once: typed messages (msgspec Structs)
decoded strictly, their free-form parts as simfs.plaindata (no pickle), every text bounded. A
message names no rank: the host knows the sender from the socket it came on."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from ... import plaindata

Name = Annotated[str, msgspec.Meta(max_length=256)]  # an operation, a type's name, a "file:line in fn"
Text = Annotated[str, msgspec.Meta(max_length=1 << 20)]  # an error's message, a traceback
MAX_TEXT = 1 << 20


class Hello(msgspec.Struct, tag="hello", array_like=True, frozen=True, forbid_unknown_fields=True):
    """A new rank process confined itself: what the kernel refuses it and what not."""

    landlock_abi: int
    confined: dict[Name, Name]
    unconfined: dict[Name, Text]


class Call(msgspec.Struct, tag="call", array_like=True, frozen=True, forbid_unknown_fields=True):
    """A request of the rank's thread ``tid``, made at ``where`` in rank code."""

    tid: int
    op: Name
    where: Text
    args: list[Any]


class Done(msgspec.Struct, tag="done", array_like=True, frozen=True, forbid_unknown_fields=True):
    """Thread ``tid`` returned ``value`` (plaindata, records allowed)."""

    tid: int
    value: bytes


class Raised(msgspec.Struct, tag="raised", array_like=True, frozen=True, forbid_unknown_fields=True):
    """Thread ``tid`` raised: the exception as plaindata (None: it does not cross), its type's
    name, its text, the rank's traceback and where it was raised."""

    tid: int
    error: bytes | None
    type_name: Name
    text: Text
    trace: Text
    where: Text


class Unsendable(msgspec.Struct, tag="unsendable", array_like=True, frozen=True, forbid_unknown_fields=True):
    """Thread ``tid`` returned a value that cannot cross (its type's name, why)."""

    tid: int
    type_name: Name
    why: Text


FromRank = Hello | Call | Done | Raised | Unsendable
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(FromRank, ext_hook=plaindata.ext_hook(records=False)).decode


def call(tid: int, op: str, where: str, args: tuple[Any, ...]) -> bytes:
    """A request, its arguments as plain data."""
    return _encode(Call(tid, op, text(where), plaindata.wire(list(args))))


def encode(message: Hello | Done | Raised | Unsendable) -> bytes:
    return _encode(message)


def decode(data: bytes) -> FromRank:
    """The message, or plaindata.Untrusted saying what is wrong with it."""
    try:
        return _decode(data)  # type: ignore[no-any-return]
    except plaindata.Untrusted:
        raise
    except (msgspec.DecodeError, ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:
        raise plaindata.Untrusted(f"a malformed message ({type(exc).__name__}: {exc})") from None


def text(value: str) -> str:
    """A text as a message carries it: at most MAX_TEXT characters, valid UTF-8 (a character that
    is not, a surrogate of a name decoded with surrogateescape, written as its escape)."""
    if len(value) > MAX_TEXT:
        value = value[:MAX_TEXT - 40] + f"... ({len(value)} characters in all)"
    if not value.isascii():
        value = value.encode("utf-8", "backslashreplace").decode()
    return value
