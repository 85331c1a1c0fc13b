"""``simfs probe``: join the torchrun job when there is one, probe, and on rank 0 show the tables
and write the report and the profile."""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys
from typing import Any

from rich.console import Console

from coord import get_comm

from ..exitcodes import EXIT_INTERRUPTED, EXIT_UNEXPECTED
from . import probe, shortfall
from .calibrate import profile_from_report
from .display import PhaseBars, show
from .report import write_report
from .settings import Settings

GROUP_TIMEOUT = 120.0
"""Seconds a collective may wait for a rank beyond the probe's own waits: a rank that hangs (not
one that died: gloo sees that at once) fails the others after this, and each cleans up."""


def _join_group(timeout: float) -> bool:
    """Initialize gloo from torchrun's environment (True) when there is more than one rank and
    nobody did yet."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    import torch.distributed as dist

    if dist.is_initialized():
        return False
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=GROUP_TIMEOUT + 6 * timeout))
    return True


def _finish(args: argparse.Namespace, report: Any, console: Console) -> None:
    """The tables, the files, and last what outlived the timeout and how to measure it."""
    show(report, console)
    if args.report:
        console.print(f"report: {write_report(report, args.report)}")
    if args.emit_profile:
        name = os.path.splitext(os.path.basename(args.emit_profile))[0]
        profile_from_report(report).replace(name=name).save(args.emit_profile)
        console.print(f"profile: {args.emit_profile} (simfs run JOB --profile {args.emit_profile})")
    stopped = shortfall.advice(report)
    if stopped is not None:
        console.print(stopped, style="yellow", markup=False, soft_wrap=True)


def run(args: argparse.Namespace) -> int:
    """The command; ProbeRefused (a ValueError) propagates to the CLI's usage-error exit."""
    make = Settings.quick_mode if args.quick else Settings.default
    settings = make(trials=args.trials, timeout=args.timeout)
    joined = _join_group(settings.timeout)
    try:
        comm = get_comm()
        console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
        command = shlex.join(["simfs", *getattr(args, "argv", [])])
        try:
            if comm.rank == 0:
                with PhaseBars() as bars:
                    report = probe(args.path, paths=args.paths, settings=settings, comm=comm, progress=bars,
                                   command=command)
                _finish(args, report, console)
            else:
                probe(args.path, paths=args.paths, settings=settings, comm=comm, command=command)
        except KeyboardInterrupt:
            print(f"simfs probe: interrupted on rank {comm.rank}; its probe directory was removed", file=sys.stderr)
            return EXIT_INTERRUPTED
        except RuntimeError as exc:  # a collective broken by another rank's failure
            print(f"simfs probe: rank {comm.rank} stopped: {exc}; its probe directory was removed", file=sys.stderr)
            return EXIT_UNEXPECTED
        return 0
    finally:
        if joined:
            import torch.distributed as dist

            dist.destroy_process_group()
