"""``simfs.Cluster``: N ranks on M nodes running one Python function (SPMD, like torchrun)
against simulated filesystems, deterministically and in virtual time; ``simfs.replay`` runs a
reported run again."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from . import carriers, checks, hostrun
from .carriers import CARRIERS
from .choices import (
    ChoiceSource,
    RecordingChoices,
    ReplayChoices,
    SeededChoices,
    as_choice_source,
    derive_seed,
    timing_of,
)
from .errors import ConfigError, SimfsError, invalid
from .faults import CrashNode, CrashServer, EvictClient, Fault, SlowRank, fault_from_dict, fault_to_dict
from .fs.filesystems import Filesystems
from .fs.server import Server
from .hostpaths import host_paths
from .profiles import Profile, get
from .report import Result
from .runspec import (
    decode,
    hash_mismatch,
    hash_seed,
    imported_preload,
    job_reference,
    json_safe,
    profile_from_spec,
    profile_spec,
    resolve_job,
)
from .runtime.carrier.greenlet import StoreNames
from .runtime.dist import COLLECTIVES, DEFAULT_TIMEOUT, GLOO, LOCKSTEP
from .runtime.heap import garbage
from .runtime.marshal import Marshal
from .runtime.run import Run, Settings
from .supervise import in_isolated_child, isolated

_WHERE = "Cluster"
# Virtual seconds between a run that crashed and the next run (the restarted job): the NFSv4
# lease and grace period of Linux nfsd (90 s, nfsd4_init_leases_net in fs/nfsd/nfs4state.c),
# which a restarted job waits out before it can reclaim its state; a node power cycle takes
# longer. Survivors' caches age by it, as they would.
RESTART_GAP = 90.0
# how ranks are carried: "process" (the default: each an OS process of its own, confined by the
# kernel, as on a real cluster) or "greenlet" (all in one process, sharing its modules, generators
# and C++ state; ~12x faster per search example, for code that keeps no per-process state; that
# process is a confined child of the caller's unless isolate=False): docs/architecture.md, "The
# process carrier"
TORCH_DISTRIBUTED = ("patched", "c10d")  # simfs's stand-ins for torch.distributed's functions, or real c10d


class Cluster:
    """A simulated cluster whose filesystems persist across runs (the next run is the restart).

    ``profile`` is the shared mount's profile (``mounts`` maps several mount points to
    profiles); every other path is private to its node. ``seed`` fixes every decision.
    ``carrier="process"`` (the default) runs each rank as an OS process confined by the kernel;
    ``"greenlet"`` runs every rank as a greenlet of one process, sharing its modules, generators
    and C++ state (faster). That process is a forked child of the caller's, confined by the kernel
    (simfs.isolated), which keeps the cluster's filesystems: such a cluster runs once (a restart
    needs ``carrier="process"``, or the whole sequence under simfs.isolated). ``isolate=False``
    runs greenlet ranks in the caller's own process, unconfined, for code you trust (simfs's own
    filesystem-model tests): their objects are the caller's, and a cluster runs any number of times.
    ``torch_distributed``: "c10d" (the default for rank processes) runs torch's own c10d in each rank
    on simulated process groups and stores (simfs/rank/c10d); "patched" (greenlet ranks' only choice)
    replaces torch.distributed's Python functions with simfs's stand-ins. ``rank_memory``: bytes of
    memory each rank process may take (RLIMIT_DATA, which counts private memory: heap, stacks,
    private maps; its filter refuses it shared anonymous memory and memory files, which RLIMIT_DATA
    would not count); a rank that runs out ends with ``simfs.RankOutOfMemory``. None: no limit but
    the machine's. ``preload``: modules every rank process starts with (``("transformers",)``,
    ``("torch",)``), imported once in the process that forks them instead of by each rank of each
    run, as numpy and torch are where the
    caller imported them; their import-time code then runs there, outside the simulation (what it
    reads of the machine is the host's). ``collectives``: "gloo" (the default) lets each rank
    leave a collective when gloo's algorithm does (a broadcast's root once it has sent, a barrier's
    ranks each when the last arrival reached it) and its thread wakes (runtime/wakeup.py, drawn from
    the seed); "lockstep" releases every member at once (the model of replay strings recorded
    before, which replay with it).
    """

    def __init__(self, nodes: int = 1, ranks_per_node: int = 1, profile: str | Profile = "nfs", seed: int = 0,
                 faults: Iterable[Fault] = (), *, mounts: dict[str, str | Profile] | None = None,
                 local_profile: str | Profile = "local", cwd: str | None = None, watchdog: float = 60.0,
                 collective_timeout: float = DEFAULT_TIMEOUT, collective_latency: float = 5e-5,
                 collective_bandwidth: float = 1e10, dist_initialized: bool = True,
                 env: dict[str, str] | None = None, time_limit: float = 30 * 86400.0,
                 restart_gap: float = RESTART_GAP, carrier: str = carriers.DEFAULT, isolate: bool = True,
                 torch_distributed: str | None = None, rank_memory: int | None = None,
                 preload: Iterable[str] = (), collectives: str = GLOO) -> None:
        checks.count(_WHERE, "nodes", nodes, 1, checks.MAX_NODES)
        checks.count(_WHERE, "ranks_per_node", ranks_per_node, 1, checks.MAX_RANKS)
        if nodes * ranks_per_node > checks.MAX_RANKS:
            raise invalid(_WHERE, "nodes * ranks_per_node", f"at most {checks.MAX_RANKS} ranks", nodes * ranks_per_node)
        checks.count(_WHERE, "seed", seed, -(2**63), 2**63 - 1)
        if not isinstance(dist_initialized, bool):
            raise invalid(_WHERE, "dist_initialized", "a bool", dist_initialized)
        if carrier not in CARRIERS:
            raise invalid(_WHERE, "carrier", f"one of {', '.join(map(repr, CARRIERS))}", carrier)
        if not isinstance(isolate, bool):
            raise invalid(_WHERE, "isolate", "a bool", isolate)
        if collectives not in COLLECTIVES:
            raise invalid(_WHERE, "collectives", f"one of {', '.join(map(repr, COLLECTIVES))}", collectives)
        if torch_distributed is None:
            torch_distributed = "c10d" if carrier == "process" else "patched"
        if torch_distributed not in TORCH_DISTRIBUTED:
            raise invalid(_WHERE, "torch_distributed", f"one of {', '.join(map(repr, TORCH_DISTRIBUTED))}",
                          torch_distributed)
        if rank_memory is not None and carrier != "process":
            raise ConfigError("simfs.Cluster: rank_memory needs carrier='process': greenlet ranks share one process")
        preloaded = checks.preload(_WHERE, preload, carrier)
        if torch_distributed == "c10d" and carrier != "process":
            raise ConfigError("simfs.Cluster: torch_distributed='c10d' needs carrier='process': c10d, autograd and "
                              "pybind11 keep per-thread C++ state that greenlet ranks of one thread would share")
        self.isolate = isolate
        self.profiles = self._mount_profiles(profile, mounts)
        self.local_profile = get(local_profile)
        self.settings = Settings(
            nodes=nodes, ranks_per_node=ranks_per_node, seed=seed,
            cwd=checks.absolute_path(_WHERE, "cwd", cwd if cwd is not None else next(iter(self.profiles))),
            env=checks.environment(_WHERE, env),
            watchdog=checks.number(_WHERE, "watchdog", watchdog, 0.0, 86400.0, lo_open=True, unit=" real seconds"),
            time_limit=checks.seconds(_WHERE, "time_limit", time_limit, positive=True),
            collective_timeout=checks.seconds(_WHERE, "collective_timeout", collective_timeout, positive=True),
            collective_latency=checks.seconds(_WHERE, "collective_latency", collective_latency),
            collective_bandwidth=checks.bandwidth(_WHERE, "collective_bandwidth", collective_bandwidth),
            dist_initialized=dist_initialized, carrier=carrier, torch_distributed=torch_distributed,
            rank_memory=None if rank_memory is None else checks.count(_WHERE, "rank_memory", rank_memory, 64 << 20,
                                                                      1 << 50),
            preload=preloaded, collectives=collectives,
        )
        self.restart_gap = checks.seconds(_WHERE, "restart_gap", restart_gap)
        self.faults = self._check_faults(faults)
        self.fs = Filesystems(nodes, self.profiles, self.local_profile)
        self._spec: dict[str, Any] | None = None  # the replay spec's parts fixed for every run (_fixed_spec)
        self.runs = 0
        self._restarting = False  # the last run crashed a node or a server
        self._kept_by_child = False  # an isolated greenlet run kept the filesystems (see run())

    # settings, as attributes
    nodes = property(lambda self: self.settings.nodes)
    ranks_per_node = property(lambda self: self.settings.ranks_per_node)
    world_size = property(lambda self: self.settings.world_size)
    seed = property(lambda self: self.settings.seed)
    cwd = property(lambda self: self.settings.cwd)
    env = property(lambda self: dict(self.settings.env))
    watchdog = property(lambda self: self.settings.watchdog)
    time_limit = property(lambda self: self.settings.time_limit)
    carrier = property(lambda self: self.settings.carrier)

    @staticmethod
    def _mount_profiles(profile: str | Profile, mounts: dict[str, str | Profile] | None) -> dict[str, Profile]:
        table = {"/shared": profile} if mounts is None else mounts
        if not isinstance(table, dict) or not table:
            raise invalid(_WHERE, "mounts", "a non-empty dict of mount point to profile", mounts)
        out: dict[str, Profile] = {}
        for path, prof in table.items():
            checks.absolute_path(_WHERE, "mount point", path)
            if path == "/" or path == "/proc" or path.startswith("/proc/"):
                raise invalid(_WHERE, "mount point", "an absolute path other than '/' and '/proc'", path)
            out[path] = get(prof)
        return out

    def _check_faults(self, faults: Iterable[Fault]) -> list[Fault]:
        checked = list(faults)
        for fault in checked:
            node = getattr(fault, "node", None)
            if isinstance(fault, (CrashNode, EvictClient)) and not 0 <= fault.node < self.nodes:
                raise ConfigError(f"{fault!r}: node {node} does not exist (nodes 0..{self.nodes - 1})")
            ranks = [fault.rank] if isinstance(fault, SlowRank) else list(getattr(fault, "ranks", None) or [])
            bad = [r for r in ranks if not 0 <= r < self.world_size]
            if bad:
                which = f"rank {bad[0]} does" if len(bad) == 1 else f"ranks {bad} do"
                raise ConfigError(f"{fault!r}: {which} not exist (ranks 0..{self.world_size - 1})")
            mount = getattr(fault, "mount", None)
            if isinstance(fault, (CrashServer, EvictClient)) and mount not in self.profiles:
                raise ConfigError(f"{fault!r}: no shared mount at {mount!r}; mounts: {list(self.profiles)}")
        return checked

    def power_loss(self) -> list[str]:
        """Between runs: every storage server and every node lose power now, as after a job
        that ended without syncing. The next run is the restarted job. Returns what each disk
        kept, in words."""
        self._check_state_here("power_loss")
        self.fs.choices.source = SeededChoices(derive_seed(self.seed, "power loss", self.runs))
        try:
            said = [f"{mount.path}: {self.fs.crash_disk(mount)}" for mount in self.fs.shared if mount.host is None]
            for node in range(self.nodes):
                said.extend(f"node{node}:{path}: {summary}" for path, summary in self.fs.node_lost_power(node))
        finally:
            self.fs.choices.source = None
        self._restarting = True
        return said

    def restart_with(self, disks: Sequence[Server], at: float) -> None:
        """Between runs: this cluster's disks take over the state of ``disks`` (servers in the
        order of ``fs.disks()``, as a crash left them; not to be used afterwards) and its clock is
        ``at``, every node just rebooted: as if the job had run here until a power loss at ``at``.
        The next run is the restarted job (how an exhaustive search tries each crash state without
        running the job again)."""
        self._check_state_here("restart_with")
        mine = self.fs.disks()
        if len(disks) != len(mine):
            raise ConfigError(f"Cluster.restart_with: {len(disks)} disks given, this cluster has {len(mine)}")
        for mount, disk in zip(mine, disks):
            mount.server.adopt(disk)
        for mount in mine:
            for node in mount.clients:
                mount.node_crashed(node)  # every client forgets what an earlier run left it
        self.fs.clock.now = at
        for node in range(self.nodes):
            self.fs.proc[node].reboot()  # booted at the crash: restart_gap later the job starts
        self.runs = 1  # the restarted job is the cluster's second run, however often it restarted
        self._restarting = True

    def stay_down(self, until: float) -> None:
        """Between a crash and the restarted job: the cluster stays down until virtual time
        ``until`` (if later than now), and the job starts ``restart_gap`` after that (a power
        loss early in a long job can leave the cluster down for longer than one at its end)."""
        self._check_state_here("stay_down")
        until = checks.seconds("Cluster.stay_down", "until", until)
        if not self._restarting:
            raise ConfigError("Cluster.stay_down: nothing crashed since the last run; the cluster is not down")
        self.fs.clock.now = max(self.fs.clock.now, until)

    def idle(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass before the next run, the cluster doing nothing (a
        job resubmitted to a queue starts minutes after the last one ended): the nodes keep their
        caches, which expire meanwhile as they would."""
        self._check_state_here("idle")
        self.fs.clock.now += checks.seconds("Cluster.idle", "seconds", seconds)

    # -- running ----------------------------------------------------------------------------------
    def run(self, job: Callable[..., Any], *args: Any, faults: Iterable[Fault] | None = None,
            choices: Any = None, **kwargs: Any) -> Result:
        """Run ``job(*args, **kwargs)`` on every rank; ``faults`` replaces the cluster's faults
        for this run, ``choices`` (a ChoiceSource or Hypothesis data) replaces the seed."""
        if not callable(job):
            raise invalid("Cluster.run", "job", "a callable", job)
        self._check_state_here("run")
        if self.settings.carrier == "greenlet" and self.isolate and not in_isolated_child():
            return self._run_isolated(job, args, kwargs, faults, choices)
        return self._run_here(job, args, kwargs, faults, choices)

    def _run_isolated(self, job: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                      faults: Iterable[Fault] | None, choices: Any) -> Result:
        """The greenlet ranks in a confined child (simfs.isolated), which keeps what the run did to
        the filesystems: this cluster's own copy is the one before the run."""
        if choices is not None and getattr(as_choice_source(choices), "thread_bound", False):
            raise ConfigError("Cluster.run: Hypothesis data draws in this process, but greenlet ranks run in a "
                              "confined child (isolate=True); search with scenarios.explore, or pass isolate=False "
                              "for code you trust")
        self._kept_by_child = True
        result: Result = isolated(self._run_here, job, args, kwargs, faults, choices, watchdog=self.watchdog,
                                  processes=False)
        return result

    def _check_state_here(self, what: str) -> None:
        if self._kept_by_child:
            raise SimfsError(f"Cluster.{what}: this cluster's greenlet run happened in a confined child, which kept "
                             "its filesystems; a cluster that runs again (a restart, a power loss) needs "
                             "carrier='process', isolate=False (code you trust), or the whole sequence in one "
                             "simfs.isolated call")

    def _run_here(self, job: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                  faults: Iterable[Fault] | None, choices: Any) -> Result:
        collecting = gc.isenabled()
        with hostrun.prepared(self.settings.preload if self.settings.carrier == carriers.PROCESS else None):
            try:
                gc.disable()  # full collections wait for the end of the run (see runtime.heap.young_gc)
                return self._run(job, args, kwargs, faults, choices)
            finally:
                (gc.enable if collecting else gc.disable)()

    def _run(self, job: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
             faults: Iterable[Fault] | None, choices: Any) -> Result:
        index = self.runs
        self.runs += 1
        if self._restarting:
            self.fs.clock.now += self.restart_gap
        fault_list = self.faults if faults is None else self._check_faults(faults)
        source = SeededChoices(derive_seed(self.seed, "run", index)) if choices is None else as_choice_source(choices)
        recorder = None if isinstance(source, SeededChoices) else RecordingChoices(source)
        marshal = Marshal(recorder or source) if getattr(source, "thread_bound", False) else None
        draws: ChoiceSource = marshal or recorder or source
        store_names = _torch_store_names() if self.settings.carrier == carriers.GREENLET else None
        run = Run(self.settings, self.fs, host_paths(), index, fault_list, draws, marshal, store_names,
                  timing_of(draws))
        spec = self._replay_spec(job, args, kwargs, index, fault_list)
        if recorder is not None:
            spec["draws"] = recorder.draws  # filled in as the run draws
        result = run.execute(job, args, kwargs, spec)
        garbage.note(sum(m.server.usage()[0] for m in self.fs.disks()))
        self._restarting = run.machine.crashes > 0
        return result

    def _replay_spec(self, job: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], run_index: int,
                     faults: list[Fault]) -> dict[str, Any]:
        spec: dict[str, Any] = {**self._fixed_spec(), "job": job_reference(job), "run": run_index,
                                "faults": [fault_to_dict(f) for f in faults], "env": dict(self.settings.env)}
        if (not args and not kwargs) or (json_safe(list(args)) and json_safe(kwargs)):
            spec["args"], spec["kwargs"] = list(args), kwargs
        return spec

    def _fixed_spec(self) -> dict[str, Any]:
        """What every run's replay spec says of this cluster (made at its first run)."""
        if self._spec is None:
            s = self.settings
            self._spec = {
                "v": 1, "nodes": s.nodes, "rpn": s.ranks_per_node,
                "mounts": {p: profile_spec(prof) for p, prof in self.profiles.items()},
                "local": profile_spec(self.local_profile), "seed": s.seed, "cwd": s.cwd,
                "timeout": s.collective_timeout, "latency": s.collective_latency,
                "bandwidth": s.collective_bandwidth, "dist": s.dist_initialized, "hash": hash_seed(),
                "carrier": s.carrier, "torch_distributed": s.torch_distributed, "preload": list(s.preload),
                "collectives": s.collectives,
            }
        return self._spec


def cluster_from_spec(spec: dict[str, Any]) -> Cluster:
    return Cluster(
        nodes=spec["nodes"], ranks_per_node=spec["rpn"], seed=spec["seed"],
        mounts={path: profile_from_spec(p) for path, p in spec["mounts"].items()},
        local_profile=profile_from_spec(spec["local"]), cwd=spec["cwd"],
        faults=[fault_from_dict(f) for f in spec["faults"]], env=spec["env"],
        collective_timeout=spec["timeout"], collective_latency=spec["latency"],
        collective_bandwidth=spec["bandwidth"], dist_initialized=spec["dist"],
        carrier=spec.get("carrier", carriers.BEFORE_CARRIERS), torch_distributed=spec.get("torch_distributed"),
        preload=imported_preload(spec.get("preload", [])), collectives=spec.get("collectives", LOCKSTEP),
    )


def replay(text: str, job: Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> Result:
    """Run again exactly the run a replay string came from. ``job`` defaults to the recorded
    importable job; its arguments default to the recorded ones (when they were JSON data)."""
    spec = decode(text)
    if not args and not kwargs:
        recorded_args, recorded_kwargs = spec.get("args", []), spec.get("kwargs", {})
        if not isinstance(recorded_args, list) or not isinstance(recorded_kwargs, dict):
            raise ConfigError("simfs replay string: its job arguments are not JSON lists and objects")
        args, kwargs = tuple(recorded_args), dict(recorded_kwargs)
    if spec["run"] != 0:
        raise ConfigError(f"this replay string is run #{spec['run']} of its cluster: its filesystem came from "
                          "earlier runs, which a replay string does not hold; replay the whole scenario instead")
    if job is None:
        if spec["job"] is None:
            raise ConfigError("the replayed job was not importable (a lambda, closure or __main__ function); "
                              "pass it: simfs.replay(text, job)")
        job = resolve_job(spec["job"])
    try:
        cluster = cluster_from_spec(spec)
    except (TypeError, KeyError) as exc:
        raise ConfigError(f"simfs replay string describes an invalid cluster: {exc}") from None
    draws = spec.get("draws")
    if draws is not None and (not isinstance(draws, list) or not all(
            isinstance(d, (int, float)) and not isinstance(d, bool) for d in draws)):
        raise ConfigError("simfs replay string: its draws are not a list of numbers; copy it whole from the report")
    result = cluster.run(job, *args, choices=ReplayChoices(draws) if draws is not None else None, **kwargs)
    mismatch = hash_mismatch(spec.get("hash"))
    if mismatch:
        result.notes.append(mismatch)
    return result


def _torch_store_names() -> StoreNames | None:
    """What gives torch's store names to simfs's stores on greenlet ranks (simfs/rank/c10d/greenlets.py),
    when torch.distributed is loaded; a job that loads it only inside its ranks, in the process's
    first run, finds torch's C++ stores refused there (docs/limits.md)."""
    if "torch.distributed" not in sys.modules:
        return None
    try:
        from .rank.c10d import greenlets
    except ImportError:  # a torch built without distributed support
        return None
    return greenlets
