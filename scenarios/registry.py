"""Named scenarios: a rank program with its recovery, property, topology and the verdict
expected on each profile. ``@scenario`` registers one; the built-in library's modules register
their own when ``load_library`` imports them."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from simfs import Result, carriers, profiles
from simfs.carriers import CARRIERS
from simfs.checks import installed

from .budgets import QUICK_LEAST, QUICK_SHARE

Expectation = Literal["pass", "fail"]
Crashes = bool | Literal["exhaustive"]
Check = Callable[[Result], object]


@dataclass(frozen=True)
class Scenario:
    """One registered scenario. ``expect`` maps each profile it runs on to "pass" or "fail"."""

    name: str
    job: Callable[[], Any]
    expect: Mapping[str, Expectation]
    nodes: int = 2
    ranks_per_node: int = 2
    recover: Callable[[], Any] | None = None
    check: Check | None = None
    crashes: Crashes = False
    faults: str | tuple[str, ...] = "default"
    max_examples: int = 100
    family: str = ""
    doc: str = ""
    tags: tuple[str, ...] = field(default=())
    carrier: str = carriers.DEFAULT  # how its ranks are carried (scenarios.explore's carrier)
    needs: tuple[str, ...] = ()  # the libraries its job imports (a scenario of the stacks family)
    preload: tuple[str, ...] = ()  # modules its rank processes start with (simfs.Cluster's preload)
    example_cost: int | None = None  # one example's cost against a greenlet one's (None: its carrier's)

    @property
    def profiles(self) -> list[str]:
        return list(self.expect)

    def quick_examples(self) -> int:
        """Examples per search in `simfs run --quick`: a third of its own, at least 5 (the naive
        scenarios fail within them: each search's finding says at which example)."""
        return max(QUICK_LEAST, self.max_examples // QUICK_SHARE)

    def quick_profiles(self) -> list[str]:
        """One profile per verdict it expects (`simfs run --quick`): the first listed that is a
        shared filesystem, else the first listed."""
        chosen: dict[str, str] = {}
        for name, verdict in self.expect.items():
            if verdict not in chosen or (profiles.get(chosen[verdict]).on_node and not profiles.get(name).on_node):
                chosen[verdict] = name
        return [name for name in self.expect if name in chosen.values()]

    def missing(self) -> list[str]:
        """The libraries it needs that are not installed here."""
        return [name for name in self.needs if not installed(name)]


_REGISTRY: dict[str, Scenario] = {}


def _check_expect(name: str, expect: Mapping[str, str]) -> dict[str, Expectation]:
    if not isinstance(expect, Mapping) or not expect:
        raise ValueError(f"scenario {name!r}: expect must map at least one profile to 'pass' or 'fail', "
                         f"got {expect!r}")
    out: dict[str, Expectation] = {}
    for profile, verdict in expect.items():
        if verdict == "pass":
            out[profile] = "pass"
        elif verdict == "fail":
            out[profile] = "fail"
        else:
            raise ValueError(f"scenario {name!r}: expect[{profile!r}] must be 'pass' or 'fail', got {verdict!r}")
    return out


def scenario(name: str | None = None, *, expect: Mapping[str, str], nodes: int = 2, ranks_per_node: int = 2,
             recover: Callable[[], Any] | None = None, check: Check | None = None, crashes: Crashes = False,
             faults: str | Iterable[str] = "default", max_examples: int = 100, family: str = "",
             tags: Iterable[str] = (), carrier: str = carriers.DEFAULT, needs: Iterable[str] = (),
             preload: Iterable[str] = (), example_cost: int | None = None
             ) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Register the decorated rank program as a scenario (its name defaults to the function's).

    ``expect={"nfs": "fail", "local": "pass"}``: the profiles it runs on and the verdict a
    correct simulation must reach on each (a naive pattern fails where the real filesystem
    makes it fail). ``carrier``: "process" (each rank an OS process, as on a real cluster) or
    "greenlet" (faster; only for a job that keeps no per-process state: scenarios.explore).
    ``needs``: libraries the job imports (where one is missing, `simfs run` leaves the scenario out
    and says so); ``preload``: modules its rank processes start with, imported once per worker of
    `simfs run`; ``example_cost``: what one example costs against a greenlet example of simfs's own
    library, where its job's own code costs more than its carrier's start (a trainer's), measured
    (reports/BENCHMARKS.md): it orders `simfs run`'s searches, never limits one."""

    def register(job: Callable[[], Any]) -> Callable[[], Any]:
        key = name or job.__name__
        if key in _REGISTRY and _REGISTRY[key].job is not job:
            raise ValueError(f"scenario {key!r} is already registered (by {_REGISTRY[key].job.__module__})")
        if crashes not in (False, True, "exhaustive"):
            raise ValueError(f"scenario {key!r}: crashes must be False, True or 'exhaustive', got {crashes!r}")
        if carrier not in CARRIERS:
            raise ValueError(f"scenario {key!r}: carrier must be one of {', '.join(map(repr, CARRIERS))}, "
                             f"got {carrier!r}")
        if crashes and recover is None:
            raise ValueError(f"scenario {key!r}: crashes need a recover program (the restarted job)")
        if example_cost is not None and (type(example_cost) is not int or example_cost < 1):
            raise ValueError(f"scenario {key!r}: example_cost must be a whole number >= 1, got {example_cost!r}")
        _REGISTRY[key] = Scenario(
            name=key, job=job, expect=_check_expect(key, expect), nodes=nodes, ranks_per_node=ranks_per_node,
            recover=recover, check=check, crashes=crashes,
            faults=faults if isinstance(faults, str) else tuple(faults), max_examples=max_examples,
            family=family, doc=(job.__doc__ or "").strip().split("\n\n")[0].replace("\n", " "), tags=tuple(tags),
            carrier=carrier, needs=tuple(needs), preload=tuple(preload), example_cost=example_cost)
        return job

    return register


def load_library() -> None:
    """Import the built-in library: every module of scenarios/library but the shared ones (each
    registers its family's scenarios as it is imported)."""
    from . import library

    for module in pkgutil.iter_modules(library.__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{library.__name__}.{module.name}")


def get(name: str) -> Scenario:
    load_library()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"no scenario named {name!r}; `simfs list` shows them") from None


def all_scenarios() -> list[Scenario]:
    load_library()
    return list(_REGISTRY.values())
