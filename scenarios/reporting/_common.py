"""What every report writer shares: how a duration and a replay command read, and how a
report file is written (whole or not at all)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence

from ..outcome import FindingRecord


def seconds(value: float) -> str:
    """A duration for people: '0.00229 s', '1.5 s', '1,800 s'."""
    if abs(value) >= 1000:
        return f"{value:,.0f} s"
    return f"{value:.3g} s"


def replay_command(replay: str, options: Sequence[str] = ()) -> str:
    """The shell command that reproduces a finding: ``simfs replay [OPTIONS] '<replay>'``, where
    ``options`` name the callables the replay string cannot (``--job FILE.py:function``:
    FindingRecord.replay_options)."""
    quoted = replay.replace("'", "'\\''")
    return shlex.join(["simfs", "replay", *options]) + f" '{quoted}'"


def replay_command_of(finding: FindingRecord) -> str:
    """The shell command that reproduces ``finding``, run from where its search ran."""
    return replay_command(finding.replay, finding.replay_options)


def write_file(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename, so a reader (or an
    interrupted run) never sees half a report."""
    target = os.fspath(path)
    temporary = f"{target}.tmp{os.getpid()}"
    try:
        with open(temporary, "wb") as f:
            f.write(data)
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
