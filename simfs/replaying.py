"""``simfs.replay``: rebuild the cluster a replay string describes and run the job again."""

from __future__ import annotations

from typing import Any, Callable

from .choices import ReplayChoices
from .cluster import Cluster
from .faults import fault_from_dict
from .replay import decode, profile_from_spec, resolve_job
from .report import Result


def cluster_from_spec(spec: dict[str, Any]) -> Cluster:
    return Cluster(
        nodes=spec["nodes"], ranks_per_node=spec["rpn"], seed=spec["seed"],
        mounts={path: profile_from_spec(p) for path, p in spec["mounts"].items()},
        local_profile=profile_from_spec(spec["local"]), cwd=spec["cwd"],
        faults=[fault_from_dict(f) for f in spec["faults"]], env=spec["env"],
        collective_timeout=spec["timeout"], collective_latency=spec["latency"],
        collective_bandwidth=spec["bandwidth"], dist_initialized=spec["dist"],
    )


def replay(text: str, job: Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> Result:
    """Run again exactly the run a replay string came from. ``job`` defaults to the recorded
    importable job; its arguments default to the recorded ones (when they were JSON data)."""
    spec = decode(text)
    if not args and not kwargs:
        args, kwargs = tuple(spec.get("args", ())), dict(spec.get("kwargs", {}))
    if spec["run"] != 0:
        raise ValueError(f"this replay string is run #{spec['run']} of its cluster: its filesystem came from "
                         "earlier runs, which a replay string does not hold; replay the whole scenario instead")
    if job is None:
        if spec["job"] is None:
            raise ValueError("the replayed job was not importable (a lambda, closure or __main__ function); "
                             "pass it: simfs.replay(text, job)")
        job = resolve_job(spec["job"])
    try:
        cluster = cluster_from_spec(spec)
    except (TypeError, KeyError) as exc:
        raise ValueError(f"simfs replay string describes an invalid cluster: {exc}") from None
    choices = ReplayChoices(spec["draws"]) if "draws" in spec else None
    return cluster.run(job, *args, choices=choices, **kwargs)
