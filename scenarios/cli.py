"""The ``simfs`` command: run a job on a simulated cluster, replay a run, show profiles."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import simfs
from simfs.faults import fault_from_dict
from simfs.report import result_to_json

from . import demo


def _load_job(spec: str) -> Callable[..., Any]:
    """'package.module:function' or 'path/to/file.py:function'."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise ValueError(f"job {spec!r} must look like 'module:function' or 'file.py:function'")
    if target.endswith(".py"):
        if not os.path.isfile(target):
            raise ValueError(f"job file {target!r} does not exist")
        module_spec = importlib.util.spec_from_file_location(os.path.basename(target)[:-3], target)
        assert module_spec is not None and module_spec.loader is not None  # a .py file's: a source loader
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_spec.name] = module
        module_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise ValueError(f"cannot import {target!r}: {exc}") from None
    job: object = getattr(module, name, None)
    if not callable(job):
        raise ValueError(f"{target!r} has no function {name!r}")
    return job


def _write_report(path: str | None, payload: Any) -> None:
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=2, default=str)
    print(f"report: {path}")


def _cluster(args: argparse.Namespace, seed: int, profile: str | None = None) -> simfs.Cluster:
    faults = [fault_from_dict(json.loads(text)) for text in args.fault]
    name = profile or args.profile or "nfs"
    chosen = simfs.Profile.load(name) if name.endswith(".toml") else name
    return simfs.Cluster(nodes=args.nodes, ranks_per_node=args.ranks_per_node, profile=chosen, seed=seed,
                         faults=faults)


def _seed_runs(args: argparse.Namespace, job: Callable[..., Any], profile: str | None = None) -> list[dict[str, Any]]:
    """One run per seed, as JSON-ready records with their summary (made in the isolated child)."""
    runs = []
    for seed in range(args.seed, args.seed + args.seeds):
        result = _cluster(args, seed, profile).run(job)
        record = {"seed": seed, **result_to_json(result, trace=args.trace), "summary": result.summary()}
        if args.trace:
            record["trace_text"] = "\n".join(str(e) for e in result.trace)
        runs.append(record)
    return runs


def _isolated_runs(args: argparse.Namespace, job: Callable[..., Any],
                   profile: str | None = None) -> list[dict[str, Any]]:
    """The seeds' runs in a child process the command supervises: a job stuck in C code that
    holds the GIL is killed after --watchdog seconds and reported with its stack."""
    runs: list[dict[str, Any]] = simfs.isolated(_seed_runs, args, job, profile, watchdog=args.watchdog)
    return runs


def cmd_run(args: argparse.Namespace) -> int:
    if args.job is None:
        return _run_demo(args)
    job = _load_job(args.job)
    runs = _isolated_runs(args, job)
    for record in runs:
        print(record.pop("summary"))
        if args.trace:
            print(record.pop("trace_text"))
    _write_report(args.report, {"job": args.job, "runs": runs})
    return 0 if all(r["ok"] for r in runs) else 1


def _run_demo(args: argparse.Namespace) -> int:
    """The default job: each naive pattern fails on the profile whose real filesystem makes it
    fail, the fixed pattern next to it never does (``--profile`` runs every case on one profile)."""
    every = f", every case on profile {args.profile!r}" if args.profile else ""
    print(f"simfs demo: {args.nodes} nodes x {args.ranks_per_node} ranks, "
          f"seeds {args.seed}..{args.seed + args.seeds - 1}{every}")
    outcome: dict[str, Any] = {}
    expected = True
    for case in demo.CASES:
        profile = args.profile or case.profile
        failures = [{"profile": profile, **{k: v for k, v in run.items() if k != "summary"}}
                    for run in _isolated_runs(args, case.job, profile) if not run["ok"]]
        outcome[case.job.__name__] = failures
        expected = expected and bool(failures) == case.should_fail
        print(f"\n{case.job.__name__} on {profile}: {(case.job.__doc__ or '').strip()}")
        print(f"  failed on {len(failures)} of {args.seeds} seeds")
        if failures:
            first = failures[0]
            errors = first["errors"]
            rank, err = next(iter(errors.items())) if errors else ("?", {"type": "?", "message": "?"})
            print(f"  e.g. seed {first['seed']}: rank {rank} raised {err['type']}: {err['message']}")
            print(f"  reproduce: simfs replay {first['replay']}")
    _write_report(args.report, {"job": "demo", "failures": outcome})
    print("\n" + ("demo behaved as expected: each naive pattern fails on its profile, each fixed one does not"
                  if expected else "demo did NOT behave as expected"))
    return 0 if expected else 1


def cmd_replay(args: argparse.Namespace) -> int:
    job = _load_job(args.job) if args.job else None
    result = simfs.replay(args.replay, job)
    print(result.summary())
    if args.trace:
        print("\n".join(str(e) for e in result.trace))
    return 0 if result.ok else 1


def cmd_profiles(args: argparse.Namespace) -> int:
    if args.name is None:
        for name in simfs.profiles.names():
            print(f"{name:12} {simfs.profiles.get(name).notes}")
        return 0
    profile = simfs.profiles.get(args.name)
    for key, value in profile.to_dict().items():
        print(f"{key} = {value!r}")
        if key in ("name", "notes"):
            continue
        source = profile.source(key)
        if source is not None:
            print(f"    source: {source}")
        else:
            print(f"    source: none documented; the simfs default ({simfs.profiles.describe(key)})")
    if args.save:
        profile.save(args.save)
        print(f"saved: {args.save}")
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="simfs", description="Simulated clusters with NFS-like shared filesystems.")
    sub = top.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a job on a simulated cluster (default: the demo of real failures)")
    run.add_argument("job", nargs="?", help="'module:function' or 'file.py:function' (default: the demo)")
    run.add_argument("--nodes", type=int, default=2)
    run.add_argument("--ranks-per-node", type=int, default=4)
    run.add_argument("--profile", default=None,
                     help="built-in profile name or a .toml file (default: nfs; the demo picks one per case)")
    run.add_argument("--seed", type=int, default=0, help="first seed")
    run.add_argument("--seeds", type=int, default=20, help="how many seeds to run")
    run.add_argument("--fault", action="append", default=[],
                     help='a fault as JSON, e.g. \'{"type": "CrashNode", "node": 1, "after_ops": 5}\'')
    run.add_argument("--trace", action="store_true", help="print every simulated operation")
    run.add_argument("--watchdog", type=float, default=60.0,
                     help="real seconds a job may run without progress before it is killed (even in C code)")
    run.add_argument("--report", default=os.path.join("reports", "runs", "simfs-run.json"),
                     help="JSON report path ('' for none)")
    run.set_defaults(func=cmd_run)

    rep = sub.add_parser("replay", help="reproduce a run from its replay string")
    rep.add_argument("replay")
    rep.add_argument("--job", help="the job, if it was not importable when recorded")
    rep.add_argument("--trace", action="store_true")
    rep.set_defaults(func=cmd_replay)

    prof = sub.add_parser("profiles", help="list the built-in profiles, or show one")
    prof.add_argument("name", nargs="?")
    prof.add_argument("--save", help="write the profile as TOML")
    prof.set_defaults(func=cmd_profiles)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code: int = args.func(args)  # the chosen command's
        return code
    except (ValueError, TypeError, OSError) as exc:
        print(f"simfs: error: {exc}", file=sys.stderr)
        return 2
    except simfs.Stalled as exc:
        print(f"simfs: the job stopped making progress and was killed: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
