"""The virtual-time axis of a timeline: a column per time at which marks start (the marks side
by side in it), linear in between, and stretches with nothing starting that are far longer than
the others cut to a fixed width (an axis break)."""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_CUT = 28.0  # the width of an axis break
_GAP = 1.0  # the least room between two columns
_CHAR = 6.6  # the width of a tick label's character, at most (10 px text)


@dataclass
class Axis:
    """Where the virtual times of one timeline lie, in pixels."""

    times: list[float]
    lefts: list[float]
    widths: list[float]
    cut: list[bool]  # whether the stretch after each time is cut short
    slot: float  # the width of a mark's place in its column

    @classmethod
    def build(cls, starts: Sequence[float], ends: Iterable[float], *, left: float, target: float) -> Axis:
        """The axis for marks starting at ``starts`` (one time per mark) and lines ending at
        ``ends``, from x ``left``, aiming at ``target`` pixels wide."""
        counts = Counter(starts)
        times = sorted({*counts, *ends})
        slot = max(2.0, min(6.0, 0.6 * target / max(len(starts), 1)))
        widths = [counts[t] * slot for t in times]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        longest = _cut_above(gaps, times[-1] - times[0])
        cut = [gap > longest for gap in gaps]
        linear = sum(gap for gap, c in zip(gaps, cut) if not c)
        fixed = sum(widths) + _CUT * sum(cut) + _GAP * len(gaps)
        room = max(target - fixed, 0.4 * target)  # shared by the stretches not cut, as they last
        lefts, x = [], left
        for i, width in enumerate(widths):
            lefts.append(x)
            x += width + (0.0 if i == len(gaps) else _CUT if cut[i] else _GAP + room * (gaps[i] / linear))
        return cls(times, lefts, widths, cut, slot)

    @property
    def end(self) -> float:
        return self.lefts[-1] + self.widths[-1]

    def x(self, t: float) -> float:
        """Where time ``t`` lies (a column's time: its left edge, where its first mark starts)."""
        i = max(bisect.bisect_right(self.times, t) - 1, 0)
        right = self.lefts[i] + self.widths[i]
        if t <= self.times[i]:
            return self.lefts[i]
        if i + 1 == len(self.times):
            return right
        fraction = (t - self.times[i]) / (self.times[i + 1] - self.times[i])
        return right + fraction * (self.lefts[i + 1] - right)

    def segments(self) -> list[tuple[int, int]]:
        """Index ranges of the columns between axis breaks."""
        bounds = [0, *(i + 1 for i, c in enumerate(self.cut) if c), len(self.times)]
        return [(a, b - 1) for a, b in itertools.pairwise(bounds)]

    def ticks(self) -> list[tuple[float, str]]:
        """(x, label) of each tick: every segment's start and round times within it, spaced so
        that their labels do not overlap."""
        out: list[tuple[float, str]] = []
        for first, last in self.segments():
            t0, t1 = self.times[first], self.times[last]
            wanted = max(1, int((self.lefts[last] + self.widths[last] - self.lefts[first]) / 110))
            step = _nice((t1 - t0) / wanted) if t1 - t0 > 1e-9 else 0.0  # below a nanosecond: one label
            rounds = range(math.ceil(t0 / step - 1e-9), math.floor(t1 / step + 1e-9) + 1) if step else range(0)
            if rounds:
                decimals = max(0, -math.floor(math.log10(step)))
                out.extend((self.x(k * step), _tick_label(k * step, decimals)) for k in rounds)
            else:  # no round time in it: its own time, in full
                out.append((self.lefts[first], _tick_label(t0, 7)))
        return _spaced(out)

    def breaks(self) -> list[tuple[float, float, str]]:
        """(x from, x to, how long it lasted: '+1,800 s') of each axis break."""
        return [(self.lefts[i] + self.widths[i], self.lefts[i + 1], _lasted(self.times[i + 1] - self.times[i]))
                for i, c in enumerate(self.cut) if c]

    def break_labels(self) -> list[tuple[float, str]]:
        """(x, label) under each axis break, spaced so that they do not overlap."""
        return _spaced([((x0 + x1) / 2, label) for x0, x1, label in self.breaks()])


def _spaced(labels: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """The (x, text) labels, centred at x, less those that would overlap the one kept before."""
    out: list[tuple[float, str]] = []
    for x, text in labels:
        if not out or x - out[-1][0] >= _CHAR * (len(out[-1][1]) + len(text)) / 2 + 8:
            out.append((x, text))
    return out


def _cut_above(gaps: list[float], span: float) -> float:
    """How long a stretch with nothing starting must be to be cut short: far longer than most
    (20 times the median) and a noticeable part of the run (5 %)."""
    nonzero = sorted(g for g in gaps if g > 0)
    if not nonzero:
        return math.inf
    return max(20 * nonzero[len(nonzero) // 2], 0.05 * span)


def _nice(raw: float) -> float:
    """The 1, 2 or 5 times a power of ten at least ``raw``."""
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-9))


def _tick_label(value: float, decimals: int) -> str:
    text = f"{value:.{decimals}f}"
    return (text.rstrip("0").rstrip(".") if "." in text else text) + " s"


def _lasted(value: float) -> str:
    return f"+{value:,.0f} s" if value >= 10 else f"+{value:.3g} s"
