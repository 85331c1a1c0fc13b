"""Step directories under a checkpoint root: their names (``step-00000100``: zero-padded to 8
digits so that listings sort, longer for steps past 10**8) and their state as one process sees
it. The manager asks these on rank 0 only and broadcasts the answer."""

from __future__ import annotations

import logging
import os
import re
from enum import Enum

from coord import revalidate

from .errors import CheckpointError
from .files import read_manifest
from .leases import is_marked

log = logging.getLogger("checkpoint")

_NAME = re.compile(r"step-([0-9]{8,})")


class State(Enum):
    COMMITTED = "committed"  # a valid manifest, not marked for deletion
    DELETING = "deleting"  # marked for deletion (by a deleter now, or one that crashed)
    INCOMPLETE = "incomplete"  # no valid manifest: being written, or a save or deletion that crashed


def step_name(step: int) -> str:
    return f"step-{step:08d}"


def parse(name: str) -> int | None:
    """The step of a step directory's name; None for any other name (``step-7`` included)."""
    match = _NAME.fullmatch(name)
    if match is None or step_name(int(match[1])) != name:
        return None
    return int(match[1])


def listing(root: str) -> list[int]:
    """The steps with a directory under ``root``, newest first ([] if there is no root; a 'not
    found' a network filesystem cached is asked again first)."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        revalidate(root)
        try:
            names = os.listdir(root)
        except FileNotFoundError:
            return []
    found = [(step, name) for step, name in ((parse(n), n) for n in names) if step is not None]
    return sorted((step for step, name in found if os.path.isdir(os.path.join(root, name))), reverse=True)


def state(directory: str) -> State:
    """Whether ``directory`` holds a checkpoint that can be loaded now. A manifest that fails
    validation counts as incomplete (logged): it is never offered as the latest."""
    try:
        if is_marked(directory):
            return State.DELETING
        read_manifest(directory)
    except FileNotFoundError:
        return State.INCOMPLETE
    except (CheckpointError, OSError) as exc:
        log.warning("checkpoint: ignoring %s: %s", directory, exc)
        return State.INCOMPLETE
    return State.COMMITTED
