"""Peak memory of a checkpoint-style rewrite: the writeback row of the performance table in DESIGN.md.

  python benchmarks/rewrite_rss.py [--repeats 3] [--before TREE] [--record]

One rank rewrites a 16 MiB file 128 times without fsync, new content each time (as a checkpoint
does), on every built-in profile and both carriers; each run is a fresh interpreter, and the figure
is its peak resident memory (VmHWM: Python, simfs, what else it imported, and what the
simulated disks hold; rank processes are not counted). ``--before TREE`` measures the same job on
another checkout of simfs too (its directory on PYTHONPATH), for a before/after table."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import add_record_flag, median_of, table, write_report

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILES = ("local", "local-posix", "nfs", "beegfs", "lustre", "objectstore")
CARRIERS = ("greenlet", "process")
TARGET_MB = 300

_REWRITE = """
import simfs
def job():
    for i in range({rewrites}):
        data = bytes([i]) * (16 << 20)  # new content each time
        with open("/shared/big", "wb") as f:  # rewritten, never fsynced
            f.write(data)
assert simfs.Cluster(profile={profile!r}, carrier={carrier!r}, isolate=False).run(job).ok
# VmHWM: this process image's peak (ru_maxrss would carry the forking parent's peak across exec)
print(next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM")) / 1024)
"""


def peak_mb(tree: str, profile: str, carrier: str, rewrites: int = 128) -> float:
    """Peak RSS (MB) of the rewrite run by the simfs found in ``tree`` (``rewrites`` 0: an empty run)."""
    env = {**os.environ, "PYTHONPATH": tree}
    code = _REWRITE.format(profile=profile, carrier=carrier, rewrites=rewrites)
    done = subprocess.run([sys.executable, "-c", code],
                          capture_output=True, text=True, check=True, env=env, cwd=tree)
    return float(done.stdout.split()[-1])


def commit_of(tree: str) -> str:
    """The commit checked out at ``tree``, short ('?' where git cannot tell)."""
    done = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=False)
    return done.stdout.strip() or "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", metavar="TREE", help="another checkout of simfs to measure as 'before'")
    add_record_flag(parser)
    args = parser.parse_args()
    rows, data = [], {}
    empty = {c: median_of(args.repeats, lambda c=c: peak_mb(HERE, "nfs", c, 0)) for c in CARRIERS}
    data["empty_run_mb"] = {c: samples for c, (_, samples) in empty.items()}
    for profile in PROFILES:
        for carrier in CARRIERS:
            after, after_samples = median_of(args.repeats, lambda p=profile, c=carrier: peak_mb(HERE, p, c))
            row = [profile, carrier]
            if args.before:
                before, before_samples = median_of(args.repeats,
                                                   lambda p=profile, c=carrier: peak_mb(args.before, p, c))
                row.append(f"{before:,.0f}")
                data.setdefault("before_mb", {}).setdefault(profile, {})[carrier] = before_samples
            rows.append([*row, f"{after:,.0f}", f"{empty[carrier][0]:,.0f}", f"< {TARGET_MB}",
                         "yes" if after < TARGET_MB else "no"])
            data.setdefault("peak_mb", {}).setdefault(profile, {})[carrier] = after_samples
            print(" | ".join(rows[-1]), flush=True)
    headers = ["profile", "carrier", *(["before (MB)"] if args.before else []), "peak RSS (MB)", "empty run (MB)",
               "target", "met"]
    before_note = (f" Before: the same job on the simfs at `{args.before}` ({commit_of(args.before)})."
                   if args.before else "")
    markdown = (f"## writeback: peak memory of a rewrite\n\nMedians of {args.repeats} runs. One rank rewrites a "
                "16 MiB file 128 times without fsync, new content each time; peak resident memory of the run's "
                "process (Python, simfs, the simulated disks, and whatever else the process imported: the job "
                f"imports no torch; rank processes not counted).{before_note} Empty run: the same process running "
                "a job that writes nothing "
                "(on nfs), what the carrier costs before any data.\n\n" + table(headers, rows))
    print(markdown)
    command = "python benchmarks/rewrite_rss.py" + (f" --repeats {args.repeats}" if args.repeats != 3 else "") + (
        f" --before {args.before}" if args.before else "")
    write_report("rewrite_rss", command, markdown, data, record=args.record)


if __name__ == "__main__":
    main()
