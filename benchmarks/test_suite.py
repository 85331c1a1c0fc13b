"""The test suite's wall time: README's test command and the slow tests `.ci/run` adds to it.

  python benchmarks/test_suite.py [--slowest 15] [--record]

Runs, in this checkout and this environment (whatever it has installed: run it where the test
extra, the stacks and .ci/deps are installed, with SIMFS_REQUIRE set as `.ci/run` sets it, for the
figures CI sees), README's test command without its install step
(``HYPOTHESIS_PROFILE=ci python -m pytest -n auto -q -m "not slow"``), then the slow tests
(``-m slow``), each timed from here, and reports what pytest counted and its slowest tests. Its
exit status is 1 when either step failed: the figures of a failing suite are not recorded."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import add_record_flag, table, write_report

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = (("README's test command", "not slow", 600.0),  # 10 minutes on 2 cores (issue 32)
         ("slow tests (.ci/run)", "slow", None))
COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)")
DURATION = re.compile(r"^\s*([\d.]+)s (call|setup|teardown)\s+(\S+)", re.M)


def run_step(marker: str, slowest: int) -> tuple[float, dict[str, int], list[tuple[float, str]], int, str]:
    """pytest -m ``marker`` here: wall seconds, its counts, its slowest tests, exit status, last output."""
    env = {**os.environ, "HYPOTHESIS_PROFILE": "ci"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "auto", "-q", "-m", marker, f"--durations={slowest}",
                           "-p", "no:cacheprovider"], capture_output=True, text=True, env=env, cwd=HERE)
    wall = time.perf_counter() - start
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in COUNTS.findall(last)}
    slow = [(float(seconds), f"{test} ({when})") for seconds, when, test in DURATION.findall(done.stdout)]
    return wall, counts, slow, done.returncode, done.stdout[-4000:] + done.stderr[-2000:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slowest", type=int, default=15, help="how many of the slowest tests to list per step")
    add_record_flag(parser)
    args = parser.parse_args()
    rows, data, slowest_lines, failed = [], {}, [], False
    for name, marker, target in STEPS:
        wall, counts, slow, status, tail = run_step(marker, args.slowest)
        if status != 0:
            failed = True
            print(f"{name} exited {status}:\n{tail}", file=sys.stderr)
        met = "" if target is None else ("yes" if wall <= target else "no")
        rows.append([name, f'-m "{marker}"', str(counts.get("passed", 0)), str(counts.get("skipped", 0)),
                     str(counts.get("failed", 0) + counts.get("error", 0)), f"{wall:.0f}",
                     "" if target is None else f"<= {target:.0f}", met])
        data[marker] = {"wall": wall, "counts": counts, "status": status, "slowest": slow}
        slowest_lines += [f"- `{test}`: {seconds:.1f} s ({name})" for seconds, test in slow]
        print(" | ".join(rows[-1]), flush=True)
    headers = ["step", "marker", "passed", "skipped", "failed", "wall s", "target s", "met"]
    markdown = ("## the test suite's wall time\n\n"
                "README's test command (without its install step) and the slow tests `.ci/run` runs after it, "
                "`pytest -n auto` on this machine's cores, HYPOTHESIS_PROFILE=ci, in the environment of the run "
                f"(SIMFS_REQUIRE={os.environ.get('SIMFS_REQUIRE', '')!r}).\n\n" + table(headers, rows) +
                "\n\nThe slowest tests of each step (pytest --durations; both workers at once):\n\n" +
                "\n".join(slowest_lines))
    print(markdown)
    if failed:
        raise SystemExit(1)
    command = "python benchmarks/test_suite.py" + (f" --slowest {args.slowest}" if args.slowest != 15 else "")
    write_report("test_suite", command, markdown, data, record=args.record)


if __name__ == "__main__":
    main()
