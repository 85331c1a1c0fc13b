"""datasets, unmodified, in rank processes on 2 nodes x 2 ranks: ``map`` with a cache file on the
shared mount, ``save_to_disk`` and ``load_from_disk``, every Arrow file on the simulated
filesystem (pyarrow routed), none on the real disk."""

from __future__ import annotations

import os
from typing import Any

import pytest
from _stacks import PROFILES, cluster, needs, ok, writers

PRELOAD = ("datasets",)  # imported once, before the ranks are forked


def map_save_load_job(root: str) -> dict[str, Any]:
    import datasets

    rank = int(os.environ["RANK"])
    os.makedirs(f"{root}/cache", exist_ok=True)
    table = datasets.Dataset.from_dict({"x": list(range(32))})
    cache = f"{root}/cache/doubled-{rank}.arrow"
    doubled = table.map(lambda row: {"y": row["x"] * 2}, cache_file_name=cache)
    again = table.map(lambda row: {"y": row["x"] * 2}, cache_file_name=cache)  # the cache file answers
    doubled.save_to_disk(f"{root}/saved-{rank}")
    loaded = datasets.load_from_disk(f"{root}/saved-{rank}")
    return {"y": list(loaded["y"]), "cached": [f["filename"] for f in again.cache_files],
            "saved": sorted(os.listdir(f"{root}/saved-{rank}"))}


@pytest.mark.slow
@pytest.mark.parametrize("profile", PROFILES)
def test_map_save_to_disk_and_load_from_disk_act_on_the_simulated_mount(profile: str) -> None:
    needs("datasets")
    result = cluster(profile, PRELOAD).run(map_save_load_job, "/shared/data")
    returns = ok(result)
    for rank in range(4):
        assert returns[rank]["y"] == [2 * x for x in range(32)]
        assert returns[rank]["cached"] == [f"/shared/data/cache/doubled-{rank}.arrow"]
        assert "dataset_info.json" in returns[rank]["saved"]
        assert writers(result, f"/shared/data/saved-{rank}/*.arrow") == {rank}
    assert not os.path.exists("/shared/data")  # nothing reached the real disk
