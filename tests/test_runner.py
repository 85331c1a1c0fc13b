"""simfs run's tasks: results and replay strings do not depend on the number of worker
processes or on the shard split."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from conftest import missing

from scenarios.replaying import PREFIX
from scenarios.runner import Task, run_order, run_tasks, shard

REPO = Path(__file__).resolve().parents[1]
TASKS = [Task(name, profile, examples=15) for name, profile in (
    ("makedirs-every-rank", "beegfs"), ("makedirs-once", "nfs"), ("wait-fixed-timeout", "local"),
    ("decide-from-exists", "nfs"))]


def _spec(replay: str) -> dict[str, object]:
    """A replay string's content, less the note of how its process hashed str (simfs run fixes
    PYTHONHASHSEED for every process; this test's own process has a random one)."""
    body = replay[len(PREFIX):]
    spec: dict[str, object] = json.loads(zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))))
    spec.pop("hash")
    return spec


def _outcomes(tasks: list[Task], jobs: int) -> dict[tuple[str, str], tuple[str, object]]:
    return {(o.scenario, o.profile): (o.verdict, _spec(o.finding.replay) if o.finding else None)
            for _, o in run_tasks(tasks, jobs)}


def test_results_do_not_depend_on_jobs_or_shards() -> None:
    alone = _outcomes(TASKS, 1)
    assert [alone[(t.scenario, t.profile)][0] for t in TASKS] == ["fail", "pass", "fail", "fail"]
    assert _outcomes(TASKS, 2) == alone
    halves = {**_outcomes(shard(TASKS, "1/2"), 1), **_outcomes(shard(TASKS, "2/2"), 2)}
    assert halves == alone


_FORKED_WORKERS = """
import json
from scenarios.runner import Task, _workers_context, run_tasks
tasks = [Task(name, profile, examples=15) for name, profile in {tasks!r}]
def outcomes(jobs):
    return {{f"{{o.scenario}} {{o.profile}}": [o.verdict, o.finding.replay if o.finding else None]
            for _, o in run_tasks(tasks, jobs)}}
print(json.dumps([_workers_context(tasks).get_start_method(), outcomes(1), outcomes(2)]))
"""


def test_workers_forked_from_a_process_that_hashes_as_they_must_find_the_same() -> None:
    """Started with PYTHONHASHSEED=0 (as the simfs command is), the process forks its workers
    after preparing once what each would (not a fresh interpreter's imports each), and they find
    what one process finds, replay strings and all; a process with a random hash seed (this one)
    spawns them."""
    from scenarios.runner import _workers_context

    assert _workers_context(TASKS).get_start_method() == "spawn"
    code = _FORKED_WORKERS.format(tasks=[(t.scenario, t.profile) for t in TASKS])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONHASHSEED": "0"}, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    method, alone, forked = json.loads(done.stdout.splitlines()[-1])
    assert method == "fork"
    assert forked == alone and sorted(v for v, _ in alone.values()) == ["fail", "fail", "fail", "pass"]


@pytest.mark.parametrize("spec", ["0/2", "3/2", "1", "a/b", "1/0"])
def test_bad_shards_are_named(spec: str) -> None:
    with pytest.raises(ValueError, match="--shard"):
        shard(TASKS, spec)


def test_shards_cover_every_task_once() -> None:
    parts = [shard(TASKS, f"{k}/3") for k in (1, 2, 3)]
    assert sorted((t.scenario, t.profile) for part in parts for t in part) == \
        sorted((t.scenario, t.profile) for t in TASKS)


def test_workers_take_the_heaviest_searches_first() -> None:
    """A search on rank processes costs several times one on greenlets of as many examples, so
    it weighs more; a larger budget weighs more; a job on auto (its default) between the two."""
    greenlet_scenario = Task("makedirs-once", "nfs")
    process_scenario = Task("download-cache-flock", "nfs")
    assert process_scenario.weight() > greenlet_scenario.weight()
    assert Task("makedirs-once", "nfs", examples=400).weight() > greenlet_scenario.weight()
    assert Task("mod:job", "nfs", carrier="process").weight() > Task("mod:job", "nfs").weight() > \
        Task("mod:job", "nfs", carrier="greenlet").weight()
    assert Task("download-cache-flock", "nfs", carrier="greenlet").weight() < process_scenario.weight()


def test_a_worker_imports_the_stack_a_scenarios_rank_processes_start_with() -> None:
    """transformers' Trainer, which trainer-rotate's ranks start with, is imported by the worker
    once for every search it forks (each search's confined child imported it again: ~2 s)."""
    if importlib.util.find_spec("transformers") is None:
        missing("stacks", "transformers not installed (pip install -e '.[stacks]', after the CPU torch)")
    code = _PREPARED_FOR.format(spec="trainer-rotate", carrier=None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[-2] == repr(["simfs.rank.c10d.install", "torch", "torch._dynamo",
                                                "transformers.trainer"])


def test_searches_whose_ranks_start_with_a_training_stack_run_after_every_other() -> None:
    """A worker imports a scenario's preloaded stack (transformers' Trainer: ~2 s) once, and every
    rank process it forks after is larger: those searches run last, the heaviest first among them
    too (a trainer's example costs ~5 DDP examples: its scenario says so)."""
    from scenarios.registry import all_scenarios

    tasks = [Task(sc.name, profile) for sc in all_scenarios() for profile in sc.profiles]
    order = [tasks[index] for index in run_order(tasks)]
    stacked = [bool(task.preloads()) for task in order]
    assert any(stacked) and stacked == sorted(stacked)  # False..., then True...
    for group in ([task for task in order if not task.preloads()], [task for task in order if task.preloads()]):
        assert [task.weight() for task in group] == sorted((task.weight() for task in group), reverse=True)
    trainer, ddp = Task("trainer-rotate", "nfs"), Task("ddp-save-atomic", "nfs")
    assert trainer.weight() / trainer.budget()[0] > 4 * ddp.weight() / ddp.budget()[0]
    assert Task("trainer-rotate", "nfs", carrier="greenlet").preloads() == ()
    assert Task("mod:job", "nfs").preloads() == ()


_PREPARED_FOR = """
import sys
from scenarios.runner import Task, _ready_for
_ready_for(Task({spec!r}, "nfs", carrier={carrier!r}))
print(sorted(name for name in ("torch", "torch._dynamo", "simfs.rank.c10d.install", "transformers.trainer")
             if name in sys.modules))
"""


@pytest.mark.parametrize(("spec", "carrier", "prepared"), [
    ("jobs/train.py:job", None, ["simfs.rank.c10d.install", "torch", "torch._dynamo"]),
    ("jobs/train.py:job", "greenlet", []),
])
def test_a_jobs_search_children_start_with_torch_for_its_rank_processes(spec: str, carrier: str | None,
                                                                        prepared: list[str]) -> None:
    """A job's module is imported only in its search's confined child (it runs the job's code), so
    the worker imports torch and what rank processes start with once, for every search it forks,
    instead of each search importing them (~2.5 s on 2 cores); greenlet ranks need neither."""
    code = _PREPARED_FOR.format(spec=spec, carrier=carrier)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[-2] == repr(prepared)
