"""numpy and torch in rank processes whose host never imported them: the host forks its ranks
without them (a job that never uses torch pays none of its memory), and a rank that imports them
itself runs as one forked with them would: the same generators' draws for the same seed, one
intra-op thread, c10d on the simulation, collectives the host serves. Each host is a fresh
interpreter (this one has torch)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

_HOST = """
import json, sys
if {preimported}:
    import torch
import simfs

def job():
    import random

    import numpy as np
    import torch
    import torch.distributed as dist

    total = torch.ones(2) * (dist.get_rank() + 1)
    dist.all_reduce(total)  # on the group simfs made before the job, then on the job's own
    dist.destroy_process_group()
    dist.init_process_group("gloo")
    again = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(again)
    return [torch.rand(1).item(), float(np.random.rand()), random.random(), torch.get_num_threads(),
            total.tolist(), again.item()]

result = simfs.Cluster(nodes=2, ranks_per_node=2, seed=7).run(job)
assert result.ok, result.summary()
print(json.dumps([{{str(k): v for k, v in result.returns.items()}}, "torch" in sys.modules]))
"""


def _fresh(script: str) -> str:
    """What ``script`` prints, run in a fresh interpreter (which must succeed)."""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _host(preimported: bool) -> tuple[dict[str, list[Any]], bool]:
    returns, host_has_torch = json.loads(_fresh(_HOST.format(preimported=preimported)).splitlines()[-1])
    return returns, bool(host_has_torch)


def test_a_rank_that_imports_torch_itself_runs_as_one_forked_with_it() -> None:
    """Before, the host's own import of torch while it served the ranks' all_reduce (to reduce
    their tensors) was routed to the simulation for the rank's proxy, and all_reduce failed."""
    lazily, host_imported = _host(preimported=False)
    forked_with_it, _ = _host(preimported=True)
    assert lazily == forked_with_it
    assert [draws[3:] for draws in lazily.values()] == [[1, [10.0, 10.0], 6.0]] * 4
    assert len({tuple(draws[:3]) for draws in lazily.values()}) == 4  # each rank its own seed
    assert host_imported  # to reduce the ranks' tensors


_PLAIN = """
import sys
import simfs

def job():
    import sys
    return sorted(name for name in ("numpy", "torch") if name in sys.modules)

result = simfs.Cluster(nodes=1, ranks_per_node=2, carrier="process").run(job)
assert result.ok, result.summary()
print(result.returns[0], sorted(name for name in ("numpy", "torch") if name in sys.modules))
"""


@pytest.mark.parametrize("preload", [[], ["torch"]])
def test_a_host_that_never_imported_torch_forks_ranks_without_it(preload: list[str]) -> None:
    """torch and torch._dynamo took ~250 MB of every process run's host before; Cluster's preload
    still gives the ranks torch before their fork."""
    script = _PLAIN.replace('carrier="process"', f'carrier="process", preload={preload!r}')
    expected = "[] []" if not preload else "['numpy', 'torch'] ['numpy', 'torch']"
    assert _fresh(script).strip() == expected


_LEARNS = """
import simfs

def job():
    import sys
    forked_with_it = "torch" in sys.modules
    import torch  # noqa: F401
    return forked_with_it

cluster = simfs.Cluster(nodes=1, ranks_per_node=2, carrier="process", isolate=False)
with simfs.zygote_kept(job):  # a search's runs
    kept = [cluster.run(job).returns[0] for _ in range(3)]
alone = simfs.Cluster(nodes=1, ranks_per_node=1, carrier="process").run(job).returns[0]
print(kept, alone)
"""


def test_once_ranks_imported_torch_themselves_later_runs_preload_it() -> None:
    """A caller that imports torch only inside its job: its first run's ranks import it each, and
    say so; later runs, a search's kept zygote included, fork their ranks with it (else every rank
    of every example paid ~2.5 s)."""
    assert _fresh(_LEARNS).strip() == "[False, True, True] True"
