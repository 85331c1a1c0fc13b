"""The pytest plugin (entry point ``pytest11``, name ``simfs``): a test marked
``@pytest.mark.simfs(...)`` is a rank program that ``scenarios.explore`` searches on a simulated
cluster; the ``simfs_cluster`` fixture makes clusters; ``--simfs-report DIR`` writes the session's
report.json, report.xml and report.html there, as ``simfs run --report DIR`` does, pytest-xdist
workers included.

Options: ``--simfs-profile`` (replaces every mark's profiles), ``--simfs-examples`` (examples per
search when the mark gives none), ``--simfs-seed`` (the searches' and the clusters' seed),
``--simfs-in-process`` (search in the test's own process instead of a kernel-confined child),
``--simfs-report``. ``-p no:simfs`` turns the plugin off."""

from __future__ import annotations

import argparse
import importlib.metadata
import inspect
import os
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import Any, Literal, Protocol

import msgspec

try:
    import pytest
except ImportError as exc:  # an optional feature: say which extra brings its library
    raise ImportError("scenarios.pytest_plugin needs pytest: pip install 'simfs[pytest]'") from exc

import simfs
from simfs import carriers

from .budgets import SHRINK_TIME
from .explore import explore
from .outcome import SCHEMA, FindingRecord, Report, ScenarioOutcome
from .registry import Check, Crashes
from .reporting import write_all

EXAMPLES = 25  # examples per search unless --simfs-examples or the mark says otherwise

ProfileSpec = str | simfs.Profile  # a built-in name, a profile file (".toml") or a Profile


@dataclass(frozen=True)
class SimfsOptions:
    """The keywords of ``@pytest.mark.simfs``: the topology, the profile(s) to run on, and what
    ``scenarios.explore`` searches (``max_examples=None``: ``--simfs-examples``)."""

    nodes: int = 2
    ranks_per_node: int = 2
    profile: ProfileSpec | Sequence[ProfileSpec] = "nfs"
    recover: Callable[[], Any] | None = None
    check: Check | None = None
    crashes: Crashes = False
    faults: str | Iterable[str] = "default"
    max_examples: int | None = None
    shrink_time: float = SHRINK_TIME
    steer: bool = False

    @property
    def profiles(self) -> list[ProfileSpec]:
        """The profile, or the profiles, as a list."""
        if isinstance(self.profile, (str, simfs.Profile)):
            return [self.profile]
        return list(self.profile)


def _mark_options(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> SimfsOptions:
    """The options of a ``simfs`` mark; ValueError names a wrong keyword."""
    names = [f.name for f in fields(SimfsOptions)]
    if args:
        raise ValueError(f"@pytest.mark.simfs takes keywords only ({', '.join(names)}), got {args!r}")
    unknown = sorted(set(kwargs) - set(names))
    if unknown:
        raise ValueError(f"@pytest.mark.simfs got unknown keyword(s) {', '.join(unknown)}; it knows {', '.join(names)}")
    return SimfsOptions(**kwargs)


def simfs_test(**options: Any) -> pytest.MarkDecorator:
    """``@simfs_test(nodes=..., profile=...)``: ``@pytest.mark.simfs`` with its keywords checked
    where the test is defined."""
    _mark_options((), options)
    return pytest.mark.simfs.with_args(**options)


def _profile(spec: ProfileSpec) -> simfs.Profile:
    """A profile by name, from a ``.toml`` file, or as given."""
    if isinstance(spec, str) and spec.endswith(".toml"):
        return simfs.Profile.load(spec)
    return simfs.profiles.get(spec)


def _examples(text: str) -> int:
    """--simfs-examples: a count (argparse reports anything else as a usage error)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an int >= 1 (examples per search), got {text!r}")
    return value


def pytest_addoption(parser: pytest.Parser) -> None:
    """--simfs-profile, --simfs-examples, --simfs-seed, --simfs-in-process and --simfs-report."""
    group = parser.getgroup("simfs", "simfs: search simulated clusters (@pytest.mark.simfs, simfs_cluster)")
    group.addoption("--simfs-profile", metavar="PROFILE", default=None,
                    help="filesystem profile (a name such as nfs or beegfs, or a .toml file) replacing the "
                         "profiles of every @pytest.mark.simfs test; the simfs_cluster default (default: nfs)")
    group.addoption("--simfs-examples", metavar="N", type=_examples, default=EXAMPLES,
                    help=f"examples per search of a @pytest.mark.simfs test that sets no max_examples "
                         f"(default: {EXAMPLES})")
    group.addoption("--simfs-seed", metavar="SEED", type=int, default=0,
                    help="seed of the searches and of simfs_cluster's clusters (default: 0)")
    group.addoption("--simfs-in-process", action="store_true", default=False,
                    help="search each @pytest.mark.simfs test in the test's own process (default: in a forked "
                         "child confined by the kernel, scenarios.explore(isolate=True), as `simfs run` does)")
    group.addoption("--simfs-carrier", choices=carriers.SEARCHES, default=carriers.SEARCH_DEFAULT,
                    help="how a marked test's ranks are carried: 'auto' (default: greenlet ranks where the test "
                         "shows no per-process state, each finding confirmed on rank processes; else rank "
                         "processes), 'process' (each rank an OS process confined by the kernel, as on a real "
                         "cluster) or 'greenlet' (all ranks greenlets of one process, sharing its modules)")
    group.addoption("--simfs-report", metavar="DIR", default=None,
                    help="write report.json, report.xml (JUnit) and report.html of every @pytest.mark.simfs test "
                         "into this directory (made if missing), as `simfs run --report DIR` does, pytest-xdist "
                         "workers included")


@dataclass
class _Session:
    """The plugin's state in one pytest process: its options and the outcomes recorded here (a
    worker's go to the controller in ``workeroutput``)."""

    profile: simfs.Profile | None
    examples: int
    seed: int
    report: str | None
    isolate: bool = True
    carrier: str = carriers.SEARCH_DEFAULT
    started: float = field(default_factory=time.time)
    outcomes: list[ScenarioOutcome] = field(default_factory=list)

    def record(self, nodeid: str, profile: str, finding: FindingRecord | None, wall: float, error: str = "") -> None:
        """Keep a marked test's outcome for the report (if one was asked for)."""
        if self.report is None:
            return
        verdict: Literal["pass", "fail", "error"] = "error" if finding is None else "fail" if finding.failed else "pass"
        self.outcomes.append(ScenarioOutcome(
            scenario=nodeid, profile=profile, family="pytest", expected="pass", verdict=verdict,
            examples=finding.examples if finding else 0, virtual_time=finding.virtual_time if finding else 0.0,
            wall_time=wall, finding=finding, error=error, coverage=finding.coverage if finding else {}))


_SESSION = pytest.StashKey[_Session]()
_WORKER_KEY = "simfs_outcomes"


def pytest_configure(config: pytest.Config) -> None:
    """Register the mark and check the options (a usage error names a wrong one)."""
    config.addinivalue_line(
        "markers", "simfs(nodes=2, ranks_per_node=2, profile='nfs', recover=None, check=None, crashes=False, "
                   "faults='default', max_examples=None, shrink_time=10.0, steer=False): the test is a rank program, "
                   "searched by scenarios.explore on a simulated cluster (one test per profile when it lists several)")
    name: str | None = config.getoption("simfs_profile")
    try:
        profile = None if name is None else _profile(name)
    except (simfs.SimfsError, OSError) as exc:
        raise pytest.UsageError(f"--simfs-profile: {exc}") from None
    given: str | None = config.getoption("simfs_report")
    report = _report_directory(given, str(config.invocation_params.dir)) if given else None  # ('': none)
    config.stash[_SESSION] = _Session(profile, config.getoption("simfs_examples"), config.getoption("simfs_seed"),
                                      report, not config.getoption("simfs_in_process"),
                                      config.getoption("simfs_carrier"))


def _report_directory(value: str, invoked_in: str) -> str:
    """--simfs-report's directory, relative to where pytest was invoked; a usage error, before any
    test runs, for a value that names a file or lies under one."""
    path = os.path.join(invoked_in, value)
    if os.path.splitext(value)[1] in (".json", ".xml", ".html") or (os.path.exists(path) and not os.path.isdir(path)):
        raise pytest.UsageError(f"--simfs-report {value}: give a directory, not a file: it gets report.json, "
                                f"report.xml and report.html, as `simfs run --report DIR`")
    above = path
    while not os.path.exists(above):
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise pytest.UsageError(f"--simfs-report {value}: {above} is a file, so the directory cannot be made")
    return path


def _options(mark: pytest.Mark, function: Callable[..., Any], config: pytest.Config) -> SimfsOptions:
    """A marked test's options, checked: ValueError says what is wrong."""
    options = _mark_options(mark.args, mark.kwargs)
    if not options.profiles:
        raise ValueError("@pytest.mark.simfs: profile lists no profile")
    if inspect.signature(function).parameters:
        raise ValueError("a @pytest.mark.simfs test is the rank program run on every rank: it takes no arguments "
                         "(use the simfs_cluster fixture in a plain test instead)")
    if config.stash[_SESSION].profile is None:
        for spec in options.profiles:
            try:
                _profile(spec)
            except (simfs.SimfsError, OSError) as exc:
                raise ValueError(f"@pytest.mark.simfs profile: {exc}") from None
    return options


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Check a ``simfs`` mark (a collection error otherwise); one test per profile when it lists
    several and --simfs-profile is not given."""
    mark = metafunc.definition.get_closest_marker("simfs")
    if mark is None:
        return
    try:
        if metafunc.cls is not None:
            raise ValueError("a @pytest.mark.simfs test must be a module-level function (its replay string names "
                             "it by module and name)")
        profiles = _options(mark, metafunc.function, metafunc.config).profiles
    except ValueError as exc:
        raise pytest.fail.Exception(f"{metafunc.definition.nodeid}: {exc}", pytrace=False) from None
    if metafunc.config.stash[_SESSION].profile is None and len(profiles) > 1:
        metafunc.fixturenames.append("simfs_profile")
        metafunc.parametrize("simfs_profile", profiles, ids=[_profile(p).name for p in profiles])


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run a marked test as a search instead of calling it; fail it with the finding."""
    mark = pyfuncitem.get_closest_marker("simfs")
    if mark is None:
        return None
    session = pyfuncitem.config.stash[_SESSION]
    options = _mark_options(mark.args, mark.kwargs)
    callspec = getattr(pyfuncitem, "callspec", None)
    spec = session.profile or (callspec.params["simfs_profile"] if callspec is not None and
                               "simfs_profile" in callspec.params else options.profiles[0])
    profile = _profile(spec)
    start = time.perf_counter()
    try:
        finding = explore(pyfuncitem.obj, recover=options.recover, check=options.check, nodes=options.nodes,
                          ranks_per_node=options.ranks_per_node, profile=profile, faults=options.faults,
                          crashes=options.crashes,
                          max_examples=session.examples if options.max_examples is None else options.max_examples,
                          seed=session.seed, shrink_time=options.shrink_time, steer=options.steer,
                          isolate=session.isolate,
                          carrier=session.carrier)
    except Exception:
        session.record(pyfuncitem.nodeid, profile.name, None, time.perf_counter() - start, traceback.format_exc())
        raise
    session.record(pyfuncitem.nodeid, profile.name, finding.record(), time.perf_counter() - start)
    if finding.failed:
        pytest.fail(str(finding), pytrace=False)
    return True


class ClusterFactory(Protocol):
    """What the ``simfs_cluster`` fixture is: ``simfs_cluster(nodes=2, ranks_per_node=2, profile=None,
    **kw)`` makes a ``simfs.Cluster`` (``kw``: its other arguments: faults, mounts, seed...)."""

    def __call__(self, nodes: int = 2, ranks_per_node: int = 2, profile: ProfileSpec | None = None,
                 **kw: Any) -> simfs.Cluster: ...


@pytest.fixture
def simfs_cluster(request: pytest.FixtureRequest) -> ClusterFactory:
    """A factory of simulated clusters; the profile defaults to --simfs-profile (else "nfs"), the
    seed to --simfs-seed, the carrier to --simfs-carrier where it names one (else each rank a process)."""
    session = request.config.stash[_SESSION]

    def make(nodes: int = 2, ranks_per_node: int = 2, profile: ProfileSpec | None = None,
             **kw: Any) -> simfs.Cluster:
        kw.setdefault("seed", session.seed)
        kw.setdefault("carrier", carriers.DEFAULT if session.carrier == carriers.AUTO else session.carrier)
        chosen = _profile(profile) if profile is not None else session.profile or "nfs"
        return simfs.Cluster(nodes, ranks_per_node, chosen, **kw)

    return make


def pytest_sessionfinish(session: pytest.Session, exitstatus: int | pytest.ExitCode) -> None:
    """Write the report (a pytest-xdist worker hands its outcomes to the controller instead). A
    report that cannot be written is said, and the session exits 3 (internal error), after pytest
    still shows its summary: the failures, each with its finding."""
    state = session.config.stash[_SESSION]
    if state.report is None:
        return
    outcomes = sorted(state.outcomes, key=lambda o: o.scenario)
    workeroutput: dict[str, Any] | None = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[_WORKER_KEY] = [msgspec.json.encode(o).decode() for o in outcomes]
        return
    try:
        version = importlib.metadata.version("simfs")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    started = datetime.fromtimestamp(state.started, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    command = shlex.join(["pytest", *session.config.invocation_params.args])
    report = Report(schema=SCHEMA, simfs_version=version, command=command, seed=state.seed, started=started,
                    wall_time=time.time() - state.started, interrupted=exitstatus == pytest.ExitCode.INTERRUPTED,
                    outcomes=outcomes)
    try:
        write_all(report, state.report)
    except OSError as exc:
        said = f"simfs: --simfs-report {state.report}: the report could not be written: {exc}"
        terminal = session.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.write_line(said, red=True)
        else:
            print(said, file=sys.stderr)
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist, on the controller: a worker finished (or crashed); keep the outcomes it sent."""
    state = node.config.stash[_SESSION]
    state.outcomes.extend(msgspec.json.decode(text, type=ScenarioOutcome)
                          for text in getattr(node, "workeroutput", {}).get(_WORKER_KEY, ()))
