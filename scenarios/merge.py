"""Shards' reports merged into one: the report of a CI matrix of N machines, each of which ran
``simfs run --shard K/N``, as one unsharded run would have written it. Shard K ran every N-th
search from the K-th (runner.shard), so the merged outcomes interleave the shards' back into the
run's order. Reports of different simfs versions, seeds, schemas or shard counts, a shard given
twice or missing, are refused with an error naming the files."""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence

from .outcome import Report, ScenarioOutcome, decode

REPORT = "report.json"


class MergeError(ValueError):
    """The reports cannot be one run's: the message names the files and what differs."""


def load(paths: Sequence[str]) -> list[tuple[str, Report]]:
    """Each path's report (a directory holding report.json, or the file itself)."""
    loaded = []
    for path in paths:
        file = os.path.join(path, REPORT) if os.path.isdir(path) else path
        try:
            with open(file, "rb") as f:
                loaded.append((file, decode(f.read())))
        except (OSError, ValueError) as exc:
            raise MergeError(f"{file}: not a simfs report ({exc})") from None
    return loaded


def merge(reports: Sequence[tuple[str, Report]], command: str) -> Report:
    """One report of the shards ``reports`` (file, report), made by ``command``: their outcomes in
    the unsharded run's order, interrupted if any was, the earliest start and the longest wall time
    (the shards ran side by side)."""
    if not reports:
        raise MergeError("no reports to merge")
    _same(reports, "simfs_version", "simfs versions")
    _same(reports, "seed", "seeds")
    shards = _by_shard(reports)
    first = reports[0][1]
    return Report(schema=first.schema, simfs_version=first.simfs_version, command=command, seed=first.seed,
                  started=min(report.started for _, report in reports),
                  wall_time=max(report.wall_time for _, report in reports),
                  interrupted=any(report.interrupted for _, report in reports),
                  outcomes=_interleaved([report.outcomes for report in shards]), shard="")


def _same(reports: Sequence[tuple[str, Report]], field: str, what: str) -> None:
    values = {getattr(report, field) for _, report in reports}
    if len(values) > 1:
        named = ", ".join(f"{file}: {getattr(report, field)!r}" for file, report in reports)
        raise MergeError(f"the reports are of different {what} ({named}): they are not shards of one run")


def _by_shard(reports: Sequence[tuple[str, Report]]) -> list[Report]:
    """The reports in shard order 1..N, each shard once (one unsharded report stands alone)."""
    if len(reports) == 1 and not reports[0][1].shard:
        return [reports[0][1]]
    counts: set[int] = set()
    seen: dict[int, tuple[str, Report]] = {}
    for file, report in reports:
        k, _, n = report.shard.partition("/")
        if not report.shard or not (k.isdigit() and n.isdigit()):
            raise MergeError(f"{file} is not a shard's report (it was written without --shard K/N)")
        if not 1 <= int(k) <= int(n):
            raise MergeError(f"{file} says it is shard {report.shard}, which no run of {int(n)} shards has")
        counts.add(int(n))
        if int(k) in seen:
            raise MergeError(f"{file} and {seen[int(k)][0]} are both shard {report.shard}")
        seen[int(k)] = (file, report)
    if len(counts) > 1:
        raise MergeError(f"the reports are shards of different counts ({', '.join(f'/{n}' for n in sorted(counts))})")
    (count,) = counts
    if len(seen) < count:  # named without listing a count the file chose
        missing = [f"{k}/{count}" for k in itertools.islice((k for k in range(1, count + 1) if k not in seen), 5)]
        more = f" and {count - len(seen) - len(missing):,} more" if count - len(seen) > len(missing) else ""
        raise MergeError(f"shard {', '.join(missing)}{more} is missing: merge every shard of the run")
    return [seen[k][1] for k in range(1, count + 1)]


def _interleaved(shards: list[list[ScenarioOutcome]]) -> list[ScenarioOutcome]:
    """Shard K holds the searches K, K + N, K + 2N... of the run: back into one sequence."""
    merged = []
    for i in range(max((len(outcomes) for outcomes in shards), default=0)):
        merged += [outcomes[i] for outcomes in shards if i < len(outcomes)]
    return merged
