"""The JSON report: a :class:`~scenarios.outcome.Report` as versioned JSON (see SCHEMA.md)."""

from __future__ import annotations

import os

import msgspec

from ..outcome import SCHEMA, Report, decode, encode
from ._common import write_file


class _Header(msgspec.Struct):
    """What every schema version has: its number (read first, so that a report of another
    version is named as such instead of failing on its first unknown field)."""

    schema: int


def write_json(report: Report, path: str | os.PathLike[str]) -> None:
    """Write ``report`` to ``path`` as indented JSON."""
    write_file(path, encode(report) + b"\n")


def read_json(path: str | os.PathLike[str]) -> Report:
    """The report at ``path``, validated; ValueError names the file and what is wrong with it."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        header = msgspec.json.decode(data, type=_Header)
        if header.schema != SCHEMA:
            raise ValueError(f"schema {header.schema}, this simfs reads schema {SCHEMA}")
        return decode(data)
    except ValueError as exc:  # msgspec's DecodeError and ValidationError are ValueErrors
        raise ValueError(f"{os.fspath(path)}: not a simfs report: {exc}") from None
