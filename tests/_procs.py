"""Real torch.distributed (gloo) processes for tests of production code.

``run_procs(fn, world_size, *args)`` starts ``world_size`` fresh Python processes (the
multiprocessing *spawn* context, so ``fn`` and its arguments must be picklable: define ``fn`` at
module level of an importable module), gives each the environment torchrun would
(``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``GROUP_RANK``), initializes the default process group with gloo, calls ``fn(*args)``, destroys
the group and sends the return value back. The parent returns ``[value of rank 0, value of rank
1, ...]``.

Several "nodes" on one machine: ``nodes=2`` splits the ranks into two consecutive groups
(ranks 0..k-1 on node 0, k..2k-1 on node 1) and sets ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` and
``GROUP_RANK`` accordingly. ``env`` adds variables: a dict for every rank, or a callable
``rank -> dict`` for per-rank values; a value of ``None`` removes the variable (e.g.
``{"LOCAL_RANK": None}`` to make the node layout come from hostnames).

Errors: if a rank raises, the parent re-raises that exception (the first one to be reported, which
is the cause; the others usually are its consequences in the collectives), with the rank's
traceback text, and every other rank's, attached as a note; the remaining processes get a short
grace period and are then killed. A rank that dies without reporting (a crash, ``os._exit``)
raises ``RankDied``. If the ranks have not all finished after ``timeout`` seconds, all are killed
and ``RanksTimedOut`` (a TimeoutError) names the ones still running.

Cost: each process imports torch (~2 s on a small machine), so group several checks into one
spawned function rather than spawning per check.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue as queue_module
import socket
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["RankDied", "RanksTimedOut", "free_port", "run_procs"]

#: after a first failure, how long the other ranks get to report before they are killed
ERROR_GRACE = 10.0


class RankDied(RuntimeError):
    """A rank's process exited without reporting a result or an exception."""


class RanksTimedOut(TimeoutError):
    """The ranks did not all finish in time; they were killed."""


class _RemoteError(RuntimeError):
    """Stands in for a rank's exception that could not be pickled back to the parent."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_env(rank: int, world_size: int, nodes: int, port: int,
              env: Mapping[str, str | None] | Callable[[int], Mapping[str, str | None]] | None,
              ) -> dict[str, str | None]:
    per_node = world_size // nodes
    out: dict[str, str | None] = {
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(rank % per_node), "LOCAL_WORLD_SIZE": str(per_node), "GROUP_RANK": str(rank // per_node),
        # one thread per process: the ranks share a small machine
        "OMP_NUM_THREADS": "1",
    }
    extra = env(rank) if callable(env) else env
    if extra:
        out.update(extra)
    return out


def _worker(fn: Callable[..., Any], args: tuple, rank: int, world_size: int, env: dict[str, str | None],
            results: Any, pg_timeout: float) -> None:
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    try:
        import datetime

        import torch.distributed as dist

        dist.init_process_group("gloo", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=pg_timeout))
        try:
            value = fn(*args)
        finally:
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - the group may already be broken by the failure being reported
                pass
        results.put((rank, "ok", pickle.dumps(value)))
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        text = traceback.format_exc()
        try:
            blob = pickle.dumps(exc)
            pickle.loads(blob)
        except Exception:  # noqa: BLE001 - an exception that does not survive pickling is sent as text
            blob = None
        results.put((rank, "error", (blob, f"{type(exc).__name__}: {exc}", text)))


def _stop(procs: list[Any]) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 3.0
    for p in procs:
        p.join(max(deadline - time.monotonic(), 0.0))
        if p.is_alive():
            p.kill()
            p.join(2.0)


def run_procs(fn: Callable[..., Any], world_size: int, *args: Any,
              env: Mapping[str, str | None] | Callable[[int], Mapping[str, str | None]] | None = None,
              timeout: float = 120.0, nodes: int = 1) -> list[Any]:
    """Run ``fn(*args)`` on ``world_size`` real gloo ranks; return their values by rank (see the
    module docstring for the environment, ``nodes``, ``env`` and failures)."""
    if world_size < 1 or nodes < 1 or world_size % nodes:
        raise ValueError(f"run_procs: world_size ({world_size}) must be a positive multiple of nodes ({nodes})")
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, name=f"rank{rank}", daemon=True,
                         args=(fn, args, rank, world_size, _rank_env(rank, world_size, nodes, port, env), results,
                               max(timeout, 1.0)))
             for rank in range(world_size)]
    for p in procs:
        p.start()
    values: dict[int, Any] = {}
    errors: list[tuple[int, Any]] = []  # in the order they were reported
    deadline = time.monotonic() + timeout
    try:
        while len(values) + len(errors) < world_size:
            now = time.monotonic()
            if now >= deadline:
                running = sorted(set(range(world_size)) - set(values) - {r for r, _ in errors})
                if errors:
                    break  # report the error, not the consequence
                raise RanksTimedOut(f"run_procs({getattr(fn, '__name__', fn)!r}): ranks {running} still running "
                                    f"after {timeout:g}s; all {world_size} processes were killed")
            try:
                rank, kind, payload = results.get(timeout=min(0.2, deadline - now))
            except queue_module.Empty:
                reported = set(values) | {r for r, _ in errors}
                dead = [r for r, p in enumerate(procs) if r not in reported and not p.is_alive()]
                if dead:
                    time.sleep(0.2)  # a result may still be in the pipe
                    while True:
                        try:
                            rank, kind, payload = results.get_nowait()
                        except queue_module.Empty:
                            break
                        (values.__setitem__(rank, pickle.loads(payload)) if kind == "ok"
                         else errors.append((rank, payload)))
                    reported = set(values) | {r for r, _ in errors}
                    dead = [r for r in dead if r not in reported]
                    if dead and not errors:
                        codes = {r: procs[r].exitcode for r in dead}
                        raise RankDied(f"run_procs({getattr(fn, '__name__', fn)!r}): rank(s) {dead} exited without "
                                       f"reporting (exit codes {codes})") from None
                    if dead:
                        break
                continue
            if kind == "ok":
                values[rank] = pickle.loads(payload)
            else:
                errors.append((rank, payload))
                deadline = min(deadline, time.monotonic() + ERROR_GRACE)
    finally:
        _stop(procs)
    if errors:
        rank, (blob, summary, text) = errors[0]
        exc = pickle.loads(blob) if blob is not None else _RemoteError(summary)
        note = [f"--- raised on rank {rank} of {world_size} (first failure) ---", text.rstrip()]
        for other, (_, other_summary, other_text) in errors[1:]:
            note += [f"--- rank {other} also failed: {other_summary} ---", other_text.rstrip()]
        exc.add_note("\n".join(note))
        raise exc
    return [values[r] for r in range(world_size)]


def error_of(fn) -> tuple[str, str] | None:
    """(exception type, message) if ``fn()`` raises, else None: lets a rank report an expected
    failure to the parent instead of dying."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - reported to the test
        return type(exc).__name__, str(exc)
    return None
