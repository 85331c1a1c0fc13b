"""Shared benchmark plumbing: repeated measurements, medians, a printed table, and the
results written as JSON under reports/runs/ (git-ignored), or with ``--record`` as the committed
summaries: reports/<name>.json plus a section of reports/BENCHMARKS.md."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

REPORTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reports")
RUNS = os.path.join(REPORTS, "runs")  # git-ignored


def add_record_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--record", action="store_true",
                        help="update the committed summaries (reports/<name>.json and reports/BENCHMARKS.md) "
                             "instead of writing reports/runs/<name>.json only")


def median_of(repeats: int, measure: Callable[[], float]) -> tuple[float, list[float]]:
    """Run ``measure`` ``repeats`` times; its median and all samples."""
    samples = [measure() for _ in range(repeats)]
    return statistics.median(samples), samples


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A markdown table."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    line = lambda row: "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, cells)])


def machine() -> str:
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def filesystem(path: str) -> str:
    """'ext4 on /dev/vda (mounted at /)': the mount holding ``path`` (longest matching mount point)."""
    path, best = os.path.realpath(path), ("?", "?", "?")
    with open("/proc/mounts") as f:
        for line in f:
            device, mount, fstype = line.split()[:3]
            if (path == mount or path.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best[1]):
                best = (device, mount, fstype)
    return f"{best[2]} on {best[0]} (mounted at {best[1]})"


def write_report(name: str, command: str, markdown: str, data: dict[str, Any], record: bool = False) -> None:
    """Save JSON results in reports/runs/; with ``record``, in reports/ instead and replace this
    benchmark's section of reports/BENCHMARKS.md (the committed summaries)."""
    directory = REPORTS if record else RUNS
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"{name}.json"), "w", encoding="utf-8") as f:
        json.dump({"command": command, "machine": machine(), **data}, f, indent=2)
    print(f"results: {os.path.relpath(os.path.join(directory, f'{name}.json'))}")
    if not record:
        return
    path = os.path.join(REPORTS, "BENCHMARKS.md")
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    section = f"{begin}\n{markdown.strip()}\n\nCommand: `{command}` ({machine()})\n{end}"
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            text = f.read()
    else:
        text = "# Benchmarks\n"
    if begin in text and end in text:
        text = text[:text.index(begin)] + section + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"summary: {os.path.relpath(path)}")
