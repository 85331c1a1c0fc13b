"""scenarios: search simulated clusters for the races, timeouts and crash bugs of a job's
filesystem code; the built-in library of such bugs; the ``simfs`` command; reports."""

from .explore import explore, replay
from .finding import Finding
from .registry import Scenario, scenario

__all__ = ["Finding", "Scenario", "explore", "replay", "scenario"]
