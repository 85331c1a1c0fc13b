"""The outcome of a search as plain, versioned data (msgspec): what reports are made of and
what the JSON report holds. A change that removes, renames or retypes a field bumps ``SCHEMA``;
adding an optional one does not."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from simfs import plaindata
from simfs.visible import visible

SCHEMA = 1


class Event(msgspec.Struct, frozen=True):
    """One line of a trace: a filesystem operation, a collective, a cache or crash event.
    ``run`` is 0 for the job and 1 for the restarted job (``recover``)."""

    run: int
    time: float
    rank: int  # -1: not a rank's (a crash, a server restart)
    node: int  # -1: not a node's
    op: str
    path: str
    outcome: str


class Failure(msgspec.Struct, frozen=True):
    """Where a failing run went wrong first: the root cause, not the symptom."""

    run: int
    rank: int | None
    kind: Literal["raised", "hung", "thread", "check", "crashed"]
    error: str  # "FileExistsError: [Errno 17] File exists: '/shared/trace'"
    where: str  # file:line in function, of the user's code
    traceback: str


class RankOutput(msgspec.Struct, frozen=True):
    """What a rank of the counterexample wrote to its stdout and stderr (simfs keeps the first and
    last 16 KiB of each stream; the line between them says how many bytes were left out)."""

    run: int
    rank: int
    stdout: str
    stderr: str
    stdout_left_out: int = 0
    stderr_left_out: int = 0
    warnings_left_out: int = 0  # showings of warnings past the distinct ones kept per rank


class Warned(msgspec.Struct, frozen=True):
    """A distinct warning the counterexample's ranks showed, once: how many times, by which ranks."""

    run: int
    category: str
    message: str
    filename: str
    lineno: int
    count: int
    ranks: list[int]


class FindingRecord(msgspec.Struct, frozen=True):
    """What one ``explore`` found: failed or not, the minimal counterexample in words, the
    replay string, the failing trace, and what the search cost."""

    failed: bool
    description: str
    replay: str
    examples: int
    wall_time: float
    virtual_time: float
    failure: Failure | None = None
    trace: list[Event] = []
    output: list[RankOutput] = []
    warnings: list[Warned] = []
    found_at: int = 0  # the example that first failed (1-based; 0: none did)
    coverage: dict[str, int] = {}  # each kind of event the examples reached -> how many reached it
    replay_options: list[str] = []  # what `simfs replay` needs besides the string: ["--job", "FILE.py:job"]...


class ScenarioOutcome(msgspec.Struct, frozen=True):
    """A scenario on one profile: the verdict next to the expected one."""

    scenario: str
    profile: str
    family: str
    expected: Literal["pass", "fail"]
    verdict: Literal["pass", "fail", "error"]
    examples: int
    virtual_time: float
    wall_time: float
    finding: FindingRecord | None = None
    error: str = ""  # the scenario could not run (its own code is broken)
    carrier: str = ""  # how its ranks were carried: "process" or "greenlet" ("": not recorded)
    coverage: dict[str, int] = {}  # each kind of event the search's examples reached -> how many (a pass's too)
    carrier_note: str = ""  # carrier "auto": where it searched and why, in words

    @property
    def as_expected(self) -> bool:
        return self.verdict == self.expected


class Report(msgspec.Struct, frozen=True):
    """A whole ``simfs run``: settings and one outcome per scenario and profile."""

    schema: int
    simfs_version: str
    command: str
    seed: int
    started: str  # ISO 8601, UTC
    wall_time: float
    interrupted: bool
    outcomes: list[ScenarioOutcome]
    shard: str = ""  # "K/N" when the run was one shard of N (`simfs run --shard`); "" for a whole run


def shown(report: Report) -> Report:
    """``report`` with every text in it made visible (simfs/visible.py): what came from rank
    code or from a shard's file (control and direction characters, lone surrogates) escaped, so
    that each format writes it and each reader reads it back."""
    return msgspec.convert(_visible_texts(msgspec.to_builtins(report)), Report)


def _visible_texts(value: Any) -> Any:
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, list):
        return [_visible_texts(v) for v in value]
    if isinstance(value, dict):
        return {_visible_texts(k): _visible_texts(v) for k, v in value.items()}
    return value


def encode(report: Report) -> bytes:
    return msgspec.json.format(msgspec.json.encode(report), indent=2)


def decode(data: bytes | str) -> Report:
    """A report read back, validated against the schema (a clear error names what is wrong)."""
    report = msgspec.json.decode(data, type=Report)
    if report.schema != SCHEMA:
        raise ValueError(f"report schema {report.schema} is not the supported schema {SCHEMA}")
    return report


plaindata.register(Event, Failure, RankOutput, Warned, FindingRecord, ScenarioOutcome)
