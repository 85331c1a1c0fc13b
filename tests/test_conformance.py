"""One suite of jobs (tests/_conformance_jobs.py) that makes every kind of request a rank makes of
the simulated kernel, run on both carriers with the same seed: greenlet ranks, which call the
kernel in the host, and rank processes, which ask it over their channel, must give the same trace,
returns, verdict and virtual time. A difference is a carrier that serves a request differently."""

from __future__ import annotations

from typing import Any

import _conformance_jobs as jobs
import pytest

import simfs

# job -> (nodes, ranks per node, extra Cluster arguments)
CASES: dict[str, tuple[int, int, dict[str, Any]]] = {
    "files": (2, 2, {}),
    "directories": (2, 2, {}),
    "locks": (2, 2, {}),
    "clocks_and_sleeps": (2, 2, {}),
    "threads": (1, 2, {}),
    "signals": (1, 2, {}),
    "collectives": (2, 2, {"torch_distributed": "patched"}),
    "stores": (2, 2, {}),
    "crash": (2, 1, {"faults": [simfs.CrashNode(node=1, at_time=3.0)]}),
    "exits": (2, 2, {}),
}


def _outcome(result: simfs.Result) -> dict[str, Any]:
    return {"returns": result.returns, "errors": {r: (type(e).__name__, str(e)) for r, e in result.errors.items()},
            "crashed": sorted(result.crashed), "hung": sorted(result.hung), "ok": result.ok,
            "virtual_time": result.virtual_time, "trace": [str(event) for event in result.trace]}


@pytest.mark.parametrize("profile", ["nfs", "local"])
@pytest.mark.parametrize("job", sorted(CASES))
def test_both_carriers_give_the_same_run(job: str, profile: str) -> None:
    nodes, per_node, extra = CASES[job]
    if job in ("collectives", "stores"):
        pytest.importorskip("torch")
    runs = {carrier: _outcome(simfs.Cluster(nodes, per_node, profile=profile, seed=7, carrier=carrier, **extra)
                              .run(getattr(jobs, job)))
            for carrier in ("greenlet", "process")}
    greenlet, process = runs["greenlet"], runs["process"]
    for key in greenlet:
        assert process[key] == greenlet[key], f"{job} on {profile}: {key} differs between carriers"
    assert greenlet["trace"], "the job made no traced request"
