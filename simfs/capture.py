"""What each rank of a run writes to its stdout and stderr and the warnings it shows, kept per
rank and per run (as pytest captures a test's) instead of reaching the host's console: a rank
process's pipes (runtime/carrier/host.py), a greenlet rank's console and streams (tasks/console.py,
runtime/procglobals.py), and the warnings Python's ``warnings`` module would have written to a
rank's stderr (rank/intercept/warned.py). Memory is bounded: of each stream the first and the last
KEEP bytes, and what was left out between them is said where it was; at most MAX_WARNINGS distinct
warnings per rank, each kept once with how many times it was shown."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from . import plaindata
from .visible import FRAME

KEEP = 16 << 10  # bytes of each stream kept at its start, and again at its end
MAX_WARNINGS = 64  # distinct warnings kept per rank and run
MAX_WARNING_TEXT = 4096  # characters of a warning's message (and of its file's name) kept


@dataclass(frozen=True)
class RankWarning:
    """A warning a rank showed (after its filters and Python's once-per-location registry),
    ``count`` times: one entry per category, message, file and line."""

    category: str  # "UserWarning", or "module.Class" for a category of a library's own
    message: str
    filename: str
    lineno: int
    count: int

    def __str__(self) -> str:
        return warning_text(self.filename, self.lineno, self.category, self.message)


def warning_text(filename: str, lineno: int, category: str, message: str) -> str:
    """A warning's line, as Python's warnings writes its first."""
    return f"{filename}:{lineno}: {category}: {message}"


@dataclass(frozen=True)
class RankOutput:
    """One rank's output in one run: its stdout and stderr as text (a stream longer than 2 x KEEP
    bytes keeps its first and last KEEP, with a line that says how many bytes were left out; those
    counts are ``stdout_left_out`` and ``stderr_left_out``), the warnings it showed, and how many
    showings of warnings beyond the first MAX_WARNINGS distinct ones were not kept."""

    stdout: str = ""
    stderr: str = ""
    warnings: list[RankWarning] = field(default_factory=list)
    stdout_left_out: int = 0
    stderr_left_out: int = 0
    warnings_left_out: int = 0


class _Stream:
    """The first KEEP bytes written, and the last KEEP after them."""

    __slots__ = ("head", "tail", "total")

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def write(self, data: bytes) -> None:
        self.total += len(data)
        room = KEEP - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 4 * KEEP:  # trimmed now and then, not at every write
                del self.tail[:-KEEP]

    def text(self) -> tuple[str, int]:
        """The text kept, and how many bytes were left out of it."""
        tail = bytes(self.tail[-KEEP:])
        left_out = self.total - len(self.head) - len(tail)
        middle = (f"\n[... {left_out:,} bytes left out: simfs keeps the first and last {KEEP:,} ...]\n"
                  if left_out else "")
        return _decode(bytes(self.head)) + middle + _decode(tail), left_out


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


class Capture:
    """One rank's output as it runs (``write`` for descriptors 1 and 2, ``warned`` per warning shown)."""

    __slots__ = ("_streams", "_warnings", "_warnings_left_out")

    def __init__(self) -> None:
        self._streams = (_Stream(), _Stream())
        self._warnings: dict[tuple[str, str, str, int], int] = {}
        self._warnings_left_out = 0

    def write(self, fd: int, data: bytes) -> None:
        """``data`` written to descriptor 1 (stdout) or 2 (stderr)."""
        self._streams[fd - 1].write(data)

    def warned(self, category: str, message: str, filename: str, lineno: int) -> None:
        key = (category[:MAX_WARNING_TEXT], message[:MAX_WARNING_TEXT], filename[:MAX_WARNING_TEXT], lineno)
        count = self._warnings.get(key)
        if count is not None:
            self._warnings[key] = count + 1
        elif len(self._warnings) < MAX_WARNINGS:
            self._warnings[key] = 1
        else:
            self._warnings_left_out += 1

    def output(self) -> RankOutput | None:
        """What was kept; None when the rank wrote nothing and showed no warning."""
        out, err = self._streams
        if not (out.total or err.total or self._warnings or self._warnings_left_out):
            return None
        (stdout, stdout_left_out), (stderr, stderr_left_out) = out.text(), err.text()
        return RankOutput(stdout, stderr, [RankWarning(*key, count) for key, count in self._warnings.items()],
                          stdout_left_out, stderr_left_out, self._warnings_left_out)


def outputs(captures: Mapping[int, Capture]) -> dict[int, RankOutput]:
    """Each rank's output that holds anything, by rank."""
    kept = {rank: capture.output() for rank, capture in sorted(captures.items())}
    return {rank: output for rank, output in kept.items() if output is not None}


def distinct_warnings(outputs: Mapping[int, RankOutput]) -> list[tuple[RankWarning, list[int]]]:
    """The run's warnings, each distinct one (category, message, file, line) once with its count
    over every rank and the ranks that showed it, in the order they were first kept (by rank)."""
    seen: dict[tuple[str, str, str, int], tuple[int, list[int]]] = {}
    for rank, output in sorted(outputs.items()):
        for w in output.warnings:
            key = (w.category, w.message, w.filename, w.lineno)
            count, ranks = seen.get(key, (0, []))
            seen[key] = (count + w.count, [*ranks, rank])
    return [(RankWarning(*key, count), ranks) for key, (count, ranks) in seen.items()]


def ranks_words(ranks: Iterable[int]) -> str:
    """'rank 3', 'ranks 0-3', 'ranks 0, 2, 5-7'."""
    spans: list[list[int]] = []
    for rank in sorted(ranks):
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    words = [f"{a}" if a == b else f"{a}-{b}" for a, b in spans]
    single = len(spans) == 1 and spans[0][0] == spans[0][1]
    return ("rank " if single else "ranks ") + ", ".join(words)


def times(count: int) -> str:
    """"once", "2 times", "1,234 times"."""
    return "once" if count == 1 else f"{count:,} times"


def rank_lines(rank: int, stdout: str, stderr: str, warnings_left_out: int, indent: str) -> list[str]:
    """What one rank's kept output says as text: the warnings it could not keep, then its stdout
    and stderr, each line indented under its header and framed (rank code's own text as it came:
    none of its lines passes for one of simfs's)."""
    lines: list[str] = []
    if warnings_left_out:
        lines.append(f"{indent}rank {rank}: {warnings_left_out:,} more warnings shown and not kept (over "
                     f"{MAX_WARNINGS} distinct ones)")
    for name, text in (("stdout", stdout), ("stderr", stderr)):
        if text:
            lines.append(f"{indent}rank {rank} {name}:")
            lines.extend(f"{indent}  {FRAME}" + line for line in text.rstrip("\n").split("\n"))
    return lines


def render(outputs: Mapping[int, RankOutput]) -> str:
    """The output of a run's ranks as text: each distinct warning once with its count and ranks,
    then each rank's stdout and stderr (not yet made visible: the caller shows it)."""
    lines: list[str] = []
    for warning, ranks in distinct_warnings(outputs):
        lines.append(f"warning ({times(warning.count)}, {ranks_words(ranks)}): {warning}")
    for rank, output in sorted(outputs.items()):
        lines.extend(rank_lines(rank, output.stdout, output.stderr, output.warnings_left_out, ""))
    return "\n".join(lines)


plaindata.register(RankWarning, RankOutput)
