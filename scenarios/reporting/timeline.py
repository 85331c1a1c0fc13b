"""The timeline of a counterexample as inline SVG: a lane per rank, and one for what is no rank's
(crashes, server restarts, evictions), on a virtual-time axis.

Readable with hundreds of events: marks that start at one virtual time stand side by side in
the order they happened, long idle stretches are cut short (see ``_axis``), and a lane's cycle of
a few operations repeated again and again (a polling loop) collapses into one bar. Its classes
are styled by :data:`STYLE`."""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from ..outcome import Event, Failure
from ._axis import Axis
from .failing import describe, errno_of, failing_event, failing_label

CRASHES = frozenset({"crash", "server-crash", "disk-crash"})

STYLE = """
svg.timeline { font: 11px system-ui, sans-serif; display: block; }
svg.timeline .lane-bg { fill: #f6f7f9; }
svg.timeline .lane:nth-of-type(even) .lane-bg { fill: #eceef2; }
svg.timeline .lane-label { fill: #333; dominant-baseline: middle; }
svg.timeline .mark { fill: #4c72b0; cursor: pointer; }
svg.timeline .mark.coll { fill: #2f9e6a; }
svg.timeline .mark.cluster { fill: #8064a2; }
svg.timeline .mark.err { fill: #e0861a; }
svg.timeline .mark.timeout, svg.timeline .mark.crash { fill: #d62728; }
svg.timeline .count { fill: #fff; font-size: 9px; text-anchor: middle; pointer-events: none; }
svg.timeline .halo { fill: #ffd400; }
svg.timeline .failing { stroke: #000; stroke-width: 2; }
svg.timeline .sleep { stroke: #888; stroke-dasharray: 3 2; }
svg.timeline .crash-line { stroke: #d62728; stroke-width: 2; }
svg.timeline .crash-label { fill: #d62728; font-size: 10px; }
svg.timeline .break { fill: #fff; stroke: #bbb; stroke-dasharray: 4 3; }
svg.timeline .axis line { stroke: #555; }
svg.timeline .axis text { fill: #333; font-size: 10px; text-anchor: middle; }
svg.timeline .failing-label rect { fill: #fff; stroke: #000; }
svg.timeline .failing-label text { font: 11px ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, monospace; }
svg.timeline .leader { stroke: #000; }
"""

_LEFT = 130.0  # lane labels
_TARGET = 900.0  # the width the time area aims for (more when there are many marks)
_RIGHT = 40.0  # room for the last tick's label
_TOP = 36.0  # the failing operation's label, crash labels
_LANE = 24.0
_MARK = 14.0  # mark height
_AXIS = 40.0  # tick labels, break labels
_CHAR = 6.6  # width of a character of the failing label (11 px monospace)
_LABEL_CHARS = 90
_COLLAPSE = 3  # a cycle of operations repeated this many times in a row in a lane (a polling loop) is one mark
_PERIOD = 4  # the longest such cycle, in operations
_TIMES = "\N{MULTIPLICATION SIGN}"  # before the count of a collapsed run of repeats


def _who(event: Event) -> str:
    if event.rank >= 0:
        return f"rank {event.rank} (node{event.node})"
    return f"node{event.node}" if event.node >= 0 else "cluster"


@dataclass
class _Mark:
    """One event, or a lane's cycle of ``period`` operations (same operations, paths and outcomes)
    repeated ``count`` times in a row."""

    events: list[Event]
    index: int  # of its first event in the run: marks at one time keep the order they happened in
    failing: bool
    period: int = 1

    @property
    def first(self) -> Event:
        return self.events[0]

    @property
    def last(self) -> Event:
        return self.events[-1]

    @property
    def count(self) -> int:
        return len(self.events) // self.period

    @property
    def kind(self) -> str:
        e = self.first
        if e.rank < 0:
            return "crash" if e.op in CRASHES else "cluster"
        return "op" if e.path.startswith("/") else "coll"  # a collective's path is its group

    @property
    def stale(self) -> bool:
        """A node's cache answered what the server no longer says."""
        return "(stale:" in self.first.outcome

    @property
    def classes(self) -> str:
        outcome = self.first.outcome
        words = ["mark", self.kind]
        if outcome.startswith("timeout"):
            words.append("timeout")
        elif errno_of(outcome):
            words.append("err")
        if self.stale:
            words.append("stale")
        if self.failing:
            words.append("failing")
        return " ".join(words)

    @property
    def title(self) -> str:
        text = f"{self.first.time:.7f} s  {_who(self.first)}: " + "; ".join(map(describe, self.events[:self.period]))
        if self.count > 1:
            text += f"  ({_TIMES}{self.count}, the last at {self.last.time:.7f} s)"
        return text


def _is_sleep(event: Event) -> bool:
    return event.op == "sleep" and event.rank >= 0


def _marks(events: Sequence[Event], failing: Event | None) -> tuple[list[_Mark], list[Event]]:
    """The marks of one run's events (time-sorted), in the order they happened, and its ranks'
    sleeps (drawn as lines)."""
    lanes: dict[int, list[tuple[int, Event]]] = {}
    for index, event in enumerate(events):
        if not _is_sleep(event):
            lanes.setdefault(event.rank, []).append((index, event))
    marks = [mark for lane in lanes.values() for mark in _lane_marks(lane, failing)]
    return sorted(marks, key=lambda m: m.index), [e for e in events if _is_sleep(e)]


def _lane_marks(lane: list[tuple[int, Event]], failing: Event | None) -> list[_Mark]:
    """One lane's (index, event) as marks: a cycle of at most ``_PERIOD`` operations repeated at
    least ``_COLLAPSE`` times in a row is one mark (the one covering the most events, the shortest
    cycle of those); the failing operation always stands alone."""
    keys: list[tuple[object, ...]] = [(id(e),) if e is failing else (e.op, e.path, e.outcome) for _, e in lane]
    marks, i = [], 0
    while i < len(lane):
        covered, period = max((p * n if n >= _COLLAPSE else 0, -p) for p in range(1, _PERIOD + 1)
                              for n in [_repeats(keys, i, p)])
        span, period = (covered, -period) if covered else (1, 1)
        index, event = lane[i]
        marks.append(_Mark([e for _, e in lane[i:i + span]], index, event is failing, period))
        i += span
    return marks


def _repeats(keys: list[tuple[object, ...]], start: int, period: int) -> int:
    """How many times ``keys[start:start + period]`` occurs in a row from ``start``."""
    block = keys[start:start + period]
    n = 1
    while keys[start + n * period:start + (n + 1) * period] == block:
        n += 1
    return n


def _sleep_end(event: Event) -> float:
    """When a sleep ends (its outcome is its duration: '0.25s')."""
    try:
        duration = float(event.outcome.rstrip("s"))
    except ValueError:
        return event.time
    return event.time + duration if math.isfinite(duration) and duration > 0 else event.time


def timeline_svgs(trace: Sequence[Event], failure: Failure | None) -> list[tuple[int, str]]:
    """(run, SVG) for each run of ``trace``: the job (0) and, after a crash, the restarted job (1)."""
    failing = failing_event(trace, failure)
    nodes: dict[int, int] = {}
    for e in trace:
        nodes.setdefault(e.rank, e.node)
    ranks = sorted({r for r in nodes if r >= 0} | ({failure.rank} if failure and failure.rank is not None else set()))
    runs = sorted({e.run for e in trace})
    return [(run, _Panel(run, [e for e in trace if e.run == run], ranks, nodes, failing, failure).svg())
            for run in runs]


class _Panel:
    """One run's timeline."""

    def __init__(self, run: int, events: list[Event], ranks: list[int], nodes: dict[int, int],
                 failing: Event | None, failure: Failure | None) -> None:
        self.run = run
        # sorted stably: events at one time keep the order they happened in
        self.marks, self.sleeps = _marks(sorted(events, key=lambda e: e.time), failing)
        self.lanes = ranks + ([-1] if any(e.rank < 0 for e in events) else [])
        self.nodes = nodes
        self.axis = Axis.build([m.first.time for m in self.marks], (_sleep_end(e) for e in self.sleeps),
                               left=_LEFT + 8, target=_TARGET)
        self.label = next((_clip(failing_label(m.first, failure), _LABEL_CHARS) for m in self.marks if m.failing), "")
        self.width = max(self.axis.end + _RIGHT, _LEFT + _TARGET / 2, _CHAR * len(self.label) + 16)
        self.bottom = _TOP + _LANE * len(self.lanes)

    def mid(self, lane: int) -> float:
        return _TOP + _LANE * (self.lanes.index(lane) + 0.5)

    def svg(self) -> str:
        slots = self._slots()
        parts = [f'<svg class="timeline" data-run="{self.run}" xmlns="http://www.w3.org/2000/svg" '
                 f'width="{self.width:.0f}" height="{self.bottom + _AXIS:.0f}" role="img" '
                 f'aria-label="timeline of run {self.run}">']
        for lane in self.lanes:
            parts.append(self._lane(lane, [m for m in self.marks if m.first.rank == lane], slots))
        parts.extend(self._breaks())
        parts.extend(self._crash_lines(slots))
        parts.append(self._axis())
        parts.extend(self._failing_label(m, slots[id(m)]) for m in self.marks if m.failing)
        parts.append("</svg>")
        return "\n".join(parts)

    def _slots(self) -> dict[int, float]:
        """The left x of each mark: its time's column, then its place among the marks there."""
        taken: Counter[float] = Counter()
        out: dict[int, float] = {}
        for mark in self.marks:
            t = mark.first.time
            out[id(mark)] = self.axis.lefts[bisect.bisect_left(self.axis.times, t)] + taken[t] * self.axis.slot
            taken[t] += 1
        return out

    def _lane(self, lane: int, marks: list[_Mark], slots: dict[int, float]) -> str:
        y = self.mid(lane)
        label = "cluster" if lane < 0 else f"rank {lane} · node{self.nodes[lane]}" if lane in self.nodes \
            else f"rank {lane}"  # a rank with no event (only its failure names it)
        kind = "rank" if lane >= 0 else "cluster"
        parts = [f'<g class="lane {kind}" data-rank="{lane}">',
                 f'<rect class="lane-bg" x="0" y="{y - _LANE / 2:.1f}" width="{self.width:.0f}" height="{_LANE}"/>',
                 f'<text class="lane-label" x="8" y="{y:.1f}">{escape(label)}</text>']
        parts.extend(self._sleep(e, y) for e in self.sleeps if e.rank == lane)
        parts.extend(self._mark(m, slots[id(m)], y) for m in marks)
        parts.append("</g>")
        return "\n".join(parts)

    def _sleep(self, event: Event, y: float) -> str:
        title = escape(f"{event.time:.7f} s  {_who(event)} sleeps {event.outcome}")
        return (f'<line class="sleep" x1="{self.axis.x(event.time):.1f}" x2="{self.axis.x(_sleep_end(event)):.1f}" '
                f'y1="{y:.1f}" y2="{y:.1f}"><title>{title}</title></line>')

    def _mark(self, mark: _Mark, x: float, y: float) -> str:
        width = max(self.axis.slot - 1, 1.5)
        if mark.count > 1:
            width = max(width, self.axis.x(mark.last.time) - x)
        top = y - _MARK / 2
        title = f"<title>{escape(mark.title)}</title>"
        parts = []
        if mark.stale:
            parts.append(f'<rect class="halo" x="{x - 3:.1f}" y="{top - 3:.1f}" width="{width + 6:.1f}" '
                         f'height="{_MARK + 6}" rx="2"/>')
        if mark.kind == "coll" and mark.count == 1:
            cx, half = x + width / 2, max(width / 2, 3.0)
            parts.append(f'<polygon class="{mark.classes}" points="{cx:.1f},{top:.1f} {cx + half:.1f},{y:.1f} '
                         f'{cx:.1f},{top + _MARK:.1f} {cx - half:.1f},{y:.1f}">{title}</polygon>')
        else:
            parts.append(f'<rect class="{mark.classes}" x="{x:.1f}" y="{top:.1f}" width="{width:.1f}" '
                         f'height="{_MARK}" rx="{width / 2 if mark.kind == "cluster" and mark.count == 1 else 1:.1f}">'
                         f"{title}</rect>")
        if mark.count > 1 and width >= 20:
            parts.append(f'<text class="count" x="{x + width / 2:.1f}" y="{y + 3:.1f}">{_TIMES}{mark.count}</text>')
        return "".join(parts)

    def _breaks(self) -> list[str]:
        return [f'<rect class="break" x="{x0 + 2:.1f}" y="{_TOP:.1f}" width="{x1 - x0 - 4:.1f}" '
                f'height="{self.bottom - _TOP:.1f}"><title>{escape(lasted)} with no operation '
                f'starting, cut short</title></rect>' for x0, x1, lasted in self.axis.breaks()]

    def _crash_lines(self, slots: dict[int, float]) -> list[str]:
        """A red line across the lanes where crashes hit (one for those at one virtual time),
        labeled with what crashed (a node's disk losing its unsynced state goes without saying)."""
        at: dict[float, list[_Mark]] = {}
        for mark in self.marks:
            if mark.kind == "crash":
                at.setdefault(mark.first.time, []).append(mark)
        out = []
        for marks in at.values():
            x = slots[id(marks[0])] + self.axis.slot / 2
            text = ", ".join(f"{m.first.op} {m.first.path}" for m in marks if m.first.op != "disk-crash")
            title = "\n".join(m.title for m in marks)
            out.append(f'<g class="crash-marker"><line class="crash-line" x1="{x:.1f}" x2="{x:.1f}" '
                       f'y1="{_TOP - 8:.1f}" y2="{self.bottom:.1f}"><title>{escape(title)}</title></line>'
                       f'{self._crash_label(x, _clip(text, 60))}</g>')
        return out

    def _crash_label(self, x: float, text: str) -> str:
        """Right of the line, or left of it where the timeline ends too soon."""
        fits = x + 3 + 6 * len(text) < self.width
        return (f'<text class="crash-label" x="{x + 3 if fits else x - 3:.1f}" y="{_TOP - 4:.1f}" '
                f'text-anchor="{"start" if fits else "end"}">{escape(text)}</text>')

    def _axis(self) -> str:
        y = self.bottom
        parts = [f'<g class="axis"><line x1="{_LEFT:.0f}" x2="{self.width - _RIGHT / 2:.0f}" y1="{y:.1f}" '
                 f'y2="{y:.1f}"/>']
        for x, label in self.axis.ticks():
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y:.1f}" y2="{y + 4:.1f}"/>'
                         f'<text x="{x:.1f}" y="{y + 15:.1f}">{escape(label)}</text>')
        for x, label in self.axis.break_labels():
            parts.append(f'<text x="{x:.1f}" y="{y + 30:.1f}">{escape(label)}</text>')
        parts.append("</g>")
        return "".join(parts)

    def _failing_label(self, mark: _Mark, x: float) -> str:
        """The failing operation named above the lanes, with a line down to its mark."""
        text = self.label
        width = _CHAR * len(text) + 8
        left = max(4.0, min(x - 12, self.width - width - 4))
        cx = x + max(self.axis.slot - 1, 1.5) / 2
        return (f'<g class="failing-label"><line class="leader" x1="{cx:.1f}" x2="{cx:.1f}" y1="21" '
                f'y2="{self.mid(mark.first.rank) - _MARK / 2:.1f}"/>'
                f'<rect x="{left:.1f}" y="4" width="{width:.1f}" height="17" rx="3"/>'
                f'<text x="{left + 4:.1f}" y="16">{escape(text)}</text>'
                f'<title>{escape(mark.title)}</title></g>')


def _clip(text: str, most: int) -> str:
    return text if len(text) <= most else text[:most - 1] + "\N{HORIZONTAL ELLIPSIS}"


def legend_svg() -> str:
    """A key to the marks, styled as the timelines are."""
    keys = [('<rect class="mark op" x="0" y="3" width="4" height="14" rx="1"/>', "filesystem operation"),
            ('<rect class="mark op err" x="0" y="3" width="4" height="14" rx="1"/>', "errno"),
            ('<polygon class="mark coll" points="2,3 6,10 2,17 -2,10"/>', "collective"),
            ('<rect class="mark coll timeout" x="0" y="3" width="4" height="14" rx="2"/>', "timeout"),
            ('<rect class="halo" x="-3" y="0" width="10" height="20" rx="2"/>'
             '<rect class="mark op" x="0" y="3" width="4" height="14" rx="1"/>', "stale cache answer"),
            ('<rect class="mark op" x="-6" y="3" width="16" height="14" rx="1"/>', "repeats, collapsed"),
            ('<line class="sleep" x1="-6" x2="10" y1="10" y2="10"/>', "sleep"),
            ('<rect class="mark cluster" x="0" y="3" width="4" height="14" rx="2"/>', "cluster event"),
            ('<line class="crash-line" x1="2" x2="2" y1="0" y2="20"/>', "crash"),
            ('<rect class="mark op err failing" x="0" y="3" width="4" height="14" rx="1"/>', "the failing operation")]
    items, x = [], 8.0
    for shape, text in keys:
        items.append(f'<g transform="translate({x:.0f},1)">{shape}<text x="14" y="14">{escape(text)}</text></g>')
        x += 28 + 6.2 * len(text)
    return (f'<svg class="timeline legend" xmlns="http://www.w3.org/2000/svg" height="22" width="{x:.0f}">'
            + "".join(items) + "</svg>")
