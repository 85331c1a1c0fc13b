"""scenarios.explore(isolate=True, the default): the search runs in a forked child confined by the kernel. It
finds exactly what the in-process search finds (the same seed: the same replay string, trace and
examples), a closure job and check work, nothing a rank or the check does stays in the caller's
process, C code that holds the GIL is stopped by the watchdog, and rank code's own system calls
past simfs's Python layer are refused by the kernel. Also through the pytest plugin, and
with --simfs-in-process."""

from __future__ import annotations

import os
import re
from pathlib import Path

import _explore_jobs as jobs
import pytest
import torch.distributed as dist
from conftest import missing

import scenarios
import simfs
from simfs.confinement import landlock

pytest_plugins = ["pytester"]


def test_the_same_seed_finds_the_same_thing_in_the_child() -> None:
    here = scenarios.explore(jobs.lingua_makedirs, nodes=2, ranks_per_node=2, profile="beegfs", max_examples=100,
                             seed=5, isolate=False)
    child = scenarios.explore(jobs.lingua_makedirs, nodes=2, ranks_per_node=2, profile="beegfs", max_examples=100,
                              seed=5, isolate=True)
    assert here.failed and child.failed
    assert (child.replay, child.trace, child.examples, child.failure) == \
        (here.replay, here.trace, here.examples, here.failure)
    assert child.target.job is jobs.lingua_makedirs and str(child).startswith("FAILED: lingua_makedirs")
    assert scenarios.replay(child.replay).trace == here.trace


def test_a_closure_job_and_check_run_in_the_child_and_leave_this_process_alone() -> None:
    calls: list[int] = []

    def job() -> int:
        os.environ["SIMFS_ISOLATED_MARK"] = "set by a rank"
        if dist.get_rank() == 0:
            os.makedirs("/shared/d")
        dist.barrier()
        return len(os.listdir("/shared"))

    def check(result: simfs.Result) -> bool:
        calls.append(1)  # the child's copy of the list
        return set(result.returns.values()) == {1}

    finding = scenarios.explore(job, check=check, nodes=2, ranks_per_node=2, profile="nfs", max_examples=20,
                                isolate=True)
    assert not finding.failed, str(finding)
    assert finding.target.job is job and finding.target.check is check
    assert calls == [] and "SIMFS_ISOLATED_MARK" not in os.environ


def _backtracks() -> None:
    re.match(r"(a+)+$", "a" * 64 + "b")  # the regex engine holds the GIL for ages


def test_c_code_holding_the_gil_is_stopped_by_the_watchdog() -> None:
    """On greenlets the whole search is stuck: its child is killed. A rank process is killed
    alone, and its example fails with the rank's stack."""
    with pytest.raises(simfs.Stalled, match="no progress"):
        scenarios.explore(_backtracks, nodes=1, ranks_per_node=1, profile="local", max_examples=1,
                          isolate=True, watchdog=2, carrier="greenlet")
    finding = scenarios.explore(_backtracks, nodes=1, ranks_per_node=1, profile="local", max_examples=1,
                                isolate=True, watchdog=2)
    assert finding.failed and finding.failure is not None, str(finding)
    assert "OutsideSimulation: rank 0: it ran 2s" in finding.failure.error and "_backtracks" in finding.failure.error


def test_rank_code_past_the_python_layer_is_refused_by_the_kernel(tmp_path: Path) -> None:
    if not landlock.abi():
        missing("landlock", "this kernel has no Landlock (Linux 5.13+, enabled at boot: lsm=...,landlock)")
    import torch

    from simfs.rank.intercept.registry import original

    canary = tmp_path / "canary.pt"

    def job() -> str:
        writer = torch._C.PyTorchFileWriter.__new__(torch._C.PyTorchFileWriter)
        try:
            original(torch._C.PyTorchFileWriter, "__init__")(writer, str(canary))  # as C++ code would open(2)
        except RuntimeError as exc:
            return str(exc)
        return "opened"

    finding = scenarios.explore(job, check=lambda r: "Permission denied" in r.returns[0], nodes=1,
                                ranks_per_node=1, profile="local", max_examples=1, isolate=True)
    assert not finding.failed, str(finding)
    assert not canary.exists()


@pytest.mark.parametrize("option", [[], ["--simfs-in-process"]])
def test_the_pytest_plugin_finds_the_same_in_a_child_and_in_process(pytester: pytest.Pytester,
                                                                     option: list[str]) -> None:
    pytester.makepyfile('''
        import os
        import pytest
        import torch.distributed as dist

        @pytest.mark.simfs(profile="beegfs")
        def test_naive():
            if not os.path.exists("/shared/t"):
                os.makedirs("/shared/t", exist_ok=True)
            dist.barrier()
    ''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--simfs-examples", "5", *option)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FileExistsError*", "*replay*"])
