"""The exhaustive walk runs the job once and copies the disks at every cut (scenarios/exhaustive.py):
each copy must be exactly the disks a power loss at that cut leaves in a rerun of the job (the
reference), and the restarted job must reach the same verdict on both."""

from __future__ import annotations

import pytest
from conftest import MODEL_CARRIER

import simfs
from scenarios.example import finish, start
from scenarios.exhaustive import CrashWalk
from scenarios.library.latest import resume, tracker_atomic, tracker_in_place
from scenarios.target import Target


@pytest.mark.parametrize("profile", ["local", "local-posix", "nfs", "lustre", "objectstore"])
@pytest.mark.parametrize("job", [tracker_in_place, tracker_atomic], ids=["in-place", "atomic"])
def test_the_copied_disks_are_those_a_power_loss_leaves_in_a_rerun(profile: str, job: object) -> None:
    target = Target(job, 2, 1, simfs.profiles.get(profile), recover=resume, carrier=MODEL_CARRIER)  # type: ignore[arg-type]
    walk = CrashWalk(target, limit=1000)
    assert len(walk.cuts) > 1
    copied = {id(cut): tuple((d.digest(), d.usage()) for d in cut.disks) for cut in walk.cuts}  # before restarts
    verdicts = {id(cut): failure is None for cut, failure in walk.restarts()}
    for cut in walk.cuts:
        example = walk.example(cut)
        assert example.crash is not None
        cluster, execution = start(target, example, example.crash.picker())
        assert tuple((m.server.digest(), m.server.usage()) for m in cluster.fs.disks()) == copied[id(cut)], cut
        assert (finish(cluster, target, example, execution).failure is None) == verdicts[id(cut)], cut
