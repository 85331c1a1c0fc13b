"""Cross-node visibility lag of mkdir, create, rename, unlink and content overwrite, each with
and without a prior lookup on the observer, and with the parent listed before each check."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import get_args

from .context import Context
from .report import Lag, Mode, Op, Stats
from .rounds import Experiment, Trial, run_round

OLD, NEW = b"version-1", b"version-2"  # same length: an overwrite changes the content, not the size

OPS: tuple[Op, ...] = get_args(Op)
MODES: tuple[Mode, ...] = get_args(Mode)


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


@dataclass
class Change:
    """One op on ``root/t`` watched in one mode."""

    op: Op
    mode: Mode
    delay: float | None = None
    details: dict[str, object] = field(default_factory=dict)

    def prepare(self, root: str) -> None:
        if self.op == "rename":
            _write(f"{root}/src", NEW)
        elif self.op in ("unlink", "overwrite"):
            _write(f"{root}/t", OLD)

    def look(self, root: str) -> None:
        if self.mode == "fresh":
            return
        if self.op == "overwrite":
            _read(f"{root}/t")
        else:
            os.path.exists(f"{root}/t")  # 'not found' for the creations, the old file for unlink

    def act(self, root: str) -> None:
        target = f"{root}/t"
        if self.op == "mkdir":
            os.mkdir(target)
        elif self.op in ("create", "overwrite"):
            _write(target, NEW)
        elif self.op == "rename":
            os.rename(f"{root}/src", target)
        else:
            os.unlink(target)

    def check(self, root: str) -> bool:
        if self.mode == "listed":
            os.listdir(root)
        target = f"{root}/t"
        if self.op == "unlink":
            return not os.path.exists(target)
        if self.op == "overwrite":
            return _read(target) == NEW
        return os.path.exists(target)

    def close(self) -> None:
        return None


def _lag(op: Op, mode: Mode, trials: list[Trial]) -> Lag:
    return Lag(op, mode, Stats.of([t.lag for t in trials]), Stats.of([t.since_lookup for t in trials]))


def measure(ctx: Context) -> list[Lag]:
    """``settings.trials`` rounds of every op in every mode (a collective)."""
    combos = [(op, mode) for op in OPS for mode in MODES]
    collected: list[list[Trial]] = [[] for _ in combos]
    ctx.progress.phase("visibility", ctx.settings.trials)
    for _ in range(ctx.settings.trials):
        experiments: list[Experiment] = [Change(op, mode) for op, mode in combos]
        for i, trials in enumerate(run_round(ctx, "vis", experiments)):
            collected[i] += trials
        ctx.progress.advance()
    return [_lag(op, mode, trials) for (op, mode), trials in zip(combos, collected)]

