"""Choice sources: every decision the simulation makes is a draw from one of these,
so a run is a pure function of its source (a seed, a recorded sequence, or Hypothesis)."""

from __future__ import annotations

import hashlib
import random
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .errors import ConfigError

if TYPE_CHECKING:
    from hypothesis.strategies import DataObject


@runtime_checkable
class ChoiceSource(Protocol):
    """Where the simulation's decisions come from."""

    def choose(self, n: int) -> int:
        """An index in ``[0, n)``; small values are the 'simple' choices."""

    def fraction(self) -> float:
        """A number in ``[0, 1)``; 0 is the 'simple' choice."""


_TIMING = "timing"


class SeededChoices:
    """Decisions from a seeded PRNG; its ``timing`` draws (when each rank's thread wakes,
    runtime/wakeup.py) from a stream of their own, so they move no other decision."""

    thread_bound = False

    def __init__(self, seed: int, stream: str = "choices") -> None:
        self.seed = seed
        self._rng = random.Random(derive_seed(seed, stream))
        self._timing: SeededChoices | None = self if stream == _TIMING else None

    @property
    def timing(self) -> SeededChoices:
        if self._timing is None:
            self._timing = SeededChoices(self.seed, _TIMING)
        return self._timing

    def choose(self, n: int) -> int:
        return self._rng.randrange(n)

    def fraction(self) -> float:
        return self._rng.random()


class ReplayChoices:
    """Decisions read back from a recorded sequence; past its end, the simple choice."""

    thread_bound = False

    def __init__(self, draws: list[int | float]) -> None:
        self._draws = list(draws)
        self._i = 0

    def _next(self) -> int | float | None:
        if self._i >= len(self._draws):
            return None
        value = self._draws[self._i]
        self._i += 1
        return value

    def choose(self, n: int) -> int:
        if n <= 1:
            return 0
        value = self._next()
        return 0 if value is None else int(value) % n

    def fraction(self) -> float:
        value = self._next()
        return 0.0 if value is None else min(max(float(value), 0.0), 0.9999999999)


class HypothesisChoices:
    """Decisions drawn from a Hypothesis ``data`` object (``st.data()``), so failures shrink.

    Hypothesis must be called from the test's thread; the cluster forwards draws there.
    """

    thread_bound = True

    def __init__(self, data: DataObject) -> None:
        from hypothesis import strategies as st

        self._data = data
        self._st = st
        self._fraction = st.integers(0, 2**20 - 1)

    def choose(self, n: int) -> int:
        if n <= 1:
            return 0
        return self._data.draw(self._st.integers(0, n - 1))

    def fraction(self) -> float:
        return self._data.draw(self._fraction) / 2**20


class RecordingChoices:
    """Wraps a source and keeps every draw, so the run can be replayed exactly; its ``timing``
    draws from the inner source's timing stream into the same record, in the order they are
    made (a replay reads them back from one sequence)."""

    def __init__(self, inner: ChoiceSource, draws: list[int | float] | None = None) -> None:
        self.inner = inner
        self.draws: list[int | float] = [] if draws is None else draws
        self.thread_bound = getattr(inner, "thread_bound", False)
        own = getattr(inner, "timing", None) if draws is None else None
        self.timing: RecordingChoices | None = None if own is None else RecordingChoices(own, self.draws)

    def choose(self, n: int) -> int:
        if n <= 1:
            return 0
        value = self.inner.choose(n)
        self.draws.append(value)
        return value

    def fraction(self) -> float:
        value = self.inner.fraction()
        self.draws.append(value)
        return value


def timing_of(source: ChoiceSource) -> ChoiceSource:
    """Where a run's timing draws come from: the source's own timing stream where it has one (a
    seed's, a search's byte string), else the source itself."""
    own: ChoiceSource | None = getattr(source, "timing", None)
    return source if own is None else own


def as_choice_source(choices: Any) -> ChoiceSource:
    """Accept a ChoiceSource or a Hypothesis data object."""
    if isinstance(choices, ChoiceSource):
        return choices
    if hasattr(choices, "draw"):
        return HypothesisChoices(choices)
    raise ConfigError(f"choices must be a ChoiceSource or a Hypothesis data object, got {type(choices).__name__}")


def derive_seed(seed: int, *parts: object) -> int:
    """A stable 64-bit seed for a named sub-stream (independent of PYTHONHASHSEED)."""
    text = ":".join([str(seed), *map(str, parts)])
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
