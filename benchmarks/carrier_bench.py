"""Carriers side by side: ranks as greenlets of one process ("greenlet": measured in this process,
isolate=False, as a search's confined child runs them) and ranks as forked, kernel-confined OS
processes ("process"), in one run; with ``--against REF``, the same measures of the code at git
commit REF (exported to a temporary directory, run in a subprocess) beside this tree's.

  python benchmarks/carrier_bench.py [--repeats 5] [--against REF] [--scale 1024,2048] [--record]

Measures, as medians of several runs: what starting a rank costs (an empty job on 8 ranks, per
rank), simulated operations per wall second with 8 ranks on 2 nodes, and examples per wall second
of the 8-rank makedirs search (the built-in makedirs-every-rank scenario on nfs, 2 nodes x 4 ranks,
where it passes: every example runs; searched in this process, as simfs run's workers do). With
``--scale``, wall seconds of one run of N ranks (8 per node) that make a directory, write a file
each, meet at a barrier and list the directory, each measured in a fresh interpreter.

Then what a message between a rank process and the host costs to write and to read, side by side:
the port's typed messages of plain data (simfs/port/schema.py, plaindata: msgpack, strict decoding)
against the pickles they replaced (a rank's requests, read by the host through a restricted
unpickler before issue 29; the host's answers, pickled until issue 30), for the requests ranks
make most, the host's answer to a stat, and a rank's return value and error."""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import subprocess
import sys
import tempfile
import timeit
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simfs
from common import add_record_flag, median_of, table, timed, write_report
from scenarios import explore
from scenarios.registry import get
from simfs import plaindata
from simfs.port import schema

CARRIERS = ("greenlet", "process")
OPS = 4000  # simulated operations per rank per run (create, write, close, stat, list)
EXAMPLES = 30  # examples per makedirs search
TOPOLOGY = (2, 4)
MAKEDIRS = "makedirs-every-rank"  # passes on nfs (scenarios/library/makedirs.py)


def empty() -> None:
    """Nothing: the run's cost is starting and ending its ranks."""


def mixed_ops(n: int) -> int:
    """Create, write, close, stat and list: each rank its own files."""
    base = f"/shared/r{os.environ['RANK']}"
    os.makedirs(base, exist_ok=True)
    done = 0
    while done < n:
        path = f"{base}/f{done % 16}"
        with open(path, "w") as f:
            f.write("x")
        os.stat(path)
        os.listdir(base)
        done += 5  # makedirs-free loop: open, write, close, stat, listdir
    return done


def start_cost(carrier: str) -> float:
    """Milliseconds per rank of an empty 8-rank run (a fresh cluster each time)."""
    cluster = simfs.Cluster(*TOPOLOGY, carrier=carrier, isolate=False)
    cluster.run(empty)  # warm: the first process run imports torch for its ranks
    seconds, result = timed(lambda: cluster.run(empty))
    assert not result.errors, result.tracebacks
    return seconds * 1000 / (TOPOLOGY[0] * TOPOLOGY[1])


def ops_per_second(carrier: str) -> float:
    cluster = simfs.Cluster(*TOPOLOGY, carrier=carrier, isolate=False)
    seconds, result = timed(lambda: cluster.run(mixed_ops, OPS))
    assert not result.errors, result.tracebacks
    return result.ops / seconds


def makedirs_examples_per_second(carrier: str) -> float:
    scenario = get(MAKEDIRS)
    seconds, finding = timed(lambda: explore(scenario.job, nodes=TOPOLOGY[0], ranks_per_node=TOPOLOGY[1],
                                             profile="nfs", max_examples=EXAMPLES, isolate=False, carrier=carrier))
    assert not finding.failed, finding
    return finding.examples / seconds


def scale_seconds(carrier: str, ranks: int) -> float:
    """Wall seconds of one run of ``ranks`` ranks, 8 per node, in a fresh interpreter (as a user
    runs one; 2048 rank processes forked from this one, grown by the other measures, ran out of
    this machine's 24 GB), under the same code (PYTHONPATH)."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--scale-one", f"{carrier}:{ranks}"],
                         check=True, capture_output=True, text=True).stdout
    return float(out.split()[-1])


def scale_seconds_here(carrier: str, ranks: int) -> float:
    """scale_seconds() in this process (a warm cluster: its first run done), with torch.distributed
    imported here first, as a test module that uses it does and as the process carrier always
    does (the row measures the ranks, not torch's import in each greenlet rank)."""
    import torch.distributed  # noqa: F401 - see above

    cluster = simfs.Cluster(max(1, ranks // 8), min(8, ranks), carrier=carrier, isolate=False)
    cluster.run(empty)
    seconds, result = timed(lambda: cluster.run(barrier_and_list))
    assert result.ok and set(result.returns.values()) == {ranks}, result.summary()
    return seconds


def barrier_and_list() -> int:
    """A directory, a file per rank, a barrier, a listing."""
    import torch.distributed as dist

    os.makedirs("/shared/run", exist_ok=True)
    with open(f"/shared/run/{os.environ['RANK']}", "w") as f:
        f.write("x")
    dist.init_process_group("gloo")
    dist.barrier()
    return len(os.listdir("/shared/run"))


MEASURES = (
    ("rank start, empty 8-rank run (ms per rank)", start_cost, "{:.2f}"),
    ("simulated ops per wall second, 8 ranks on 2 nodes (mixed)", ops_per_second, "{:,.0f}"),
    ("8-rank makedirs search, examples per wall second (nfs)", makedirs_examples_per_second, "{:.1f}"),
)


class _RestrictedUnpickler(pickle.Unpickler):
    """The host's reader before issue 29: pickles whose classes come from an allow-list (plain data,
    numpy arrays, standard exceptions). Typical requests name no class, so this costs what
    pickle.loads does."""

    ALLOWED = frozenset({("builtins", "FileNotFoundError"), ("builtins", "OSError"), ("builtins", "tuple"),
                         ("os", "stat_result")})

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name}")
        return super().find_class(module, name)


def _pickled(message: tuple[Any, ...]) -> tuple[Any, Any]:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return (lambda: pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL),
            lambda: _RestrictedUnpickler(io.BytesIO(data)).load())


def _typed(write: Any, read: Any = schema.decode) -> tuple[Any, Any]:
    data = write()
    return write, lambda: read(data)


ERROR = FileNotFoundError(2, "No such file or directory", "/shared/ckpt/step-3/shard-0")
RETURNED = {"loss": [0.5 * i for i in range(100)], "step": 3}
WHERE = "train.py:41 in save"
STAT = os.stat_result((0o100644, 12, 40, 1, 0, 0, 4096, 1e9, 1e9, 1e9))
MESSAGES: dict[str, tuple[tuple[Any, ...], Any, Any]] = {
    "stat request": (("call", 7, "sys", WHERE, "stat", ("/shared/ckpt/latest",), {}, False, 0o22),
                     lambda: schema.call(7, WHERE, schema.SystemCall("stat", ["/shared/ckpt/latest"], {})),
                     schema.decode),
    "write request, 4 KiB": (("call", 7, "sys", WHERE, "write", (1001, b"x" * 4096), {}, False, 0o22),
                             lambda: schema.call(7, WHERE, schema.SystemCall("write", [1001, b"x" * 4096], {})),
                             schema.decode),
    "trace note": (("call", 7, "note", WHERE, "sleep", "", "1s"),
                   lambda: schema.call(7, WHERE, schema.Note("sleep", "", "1s")), schema.decode),
    "the host's answer to a stat": ((7, "ok", STAT, [], 12.5), lambda: schema.answer(7, 12.5, [], STAT),
                                    schema.decode_answer),
    "return value (dict of 100 floats)": (("done", 7, pickle.dumps(RETURNED)),
                                          lambda: schema.encode(schema.Done(7, plaindata.dumps(RETURNED))),
                                          schema.decode),
    "raised FileNotFoundError": (("raised", 7, pickle.dumps(ERROR), "builtins.FileNotFoundError", str(ERROR),
                                  "Traceback ...", WHERE),
                                 lambda: schema.encode(schema.Raised(7, plaindata.dumps(ERROR),
                                                                     "builtins.FileNotFoundError", str(ERROR),
                                                                     "Traceback ...", WHERE)),
                                 schema.decode),
}


def microseconds(fn: Any, repeats: int) -> float:
    """Median microseconds per call, over ``repeats`` timings of many calls."""
    number = 2000
    return median_of(repeats, lambda: timeit.timeit(fn, number=number) / number * 1e6)[0]


def message_rows(repeats: int) -> tuple[list[list[str]], dict[str, Any]]:
    rows, data = [], {}
    for what, (old, write, read) in MESSAGES.items():
        (old_write, old_read), (new_write, new_read) = _pickled(old), _typed(write, read)
        times = {"pickle write": microseconds(old_write, repeats), "pickle read": microseconds(old_read, repeats),
                 "typed write": microseconds(new_write, repeats), "typed read": microseconds(new_read, repeats)}
        before, after = times["pickle write"] + times["pickle read"], times["typed write"] + times["typed read"]
        rows.append([what, *(f"{times[k]:.2f}" for k in times), f"{after - before:+.2f}"])
        data[what] = times
    return rows, data


def measure_all(repeats: int, scale: list[int]) -> dict[str, dict[str, float]]:
    """Every measure on both carriers (medians); scale rows measured once."""
    data: dict[str, dict[str, float]] = {}
    for what, measure, _ in MEASURES:
        data[what] = {carrier: median_of(repeats, lambda c=carrier, m=measure: m(c))[0] for carrier in CARRIERS}
    for ranks in scale:
        data[_scale_row(ranks)] = {carrier: scale_seconds(carrier, ranks) for carrier in CARRIERS}
    return data


def _scale_row(ranks: int) -> str:
    return f"{ranks} ranks: directory, a file each, barrier, listing (wall seconds, one run)"


def measured_at(ref: str, repeats: int, scale: list[int]) -> dict[str, dict[str, float]]:
    """measure_all() of the code at git commit ``ref``, exported to a temporary directory (git
    archive: the repository is left as it is) and imported first by a subprocess."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as tree:
        archive = subprocess.run(["git", "-C", root, "archive", ref], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        out = os.path.join(tree, "measured.json")
        env = {**os.environ, "PYTHONPATH": tree}
        subprocess.run([sys.executable, os.path.abspath(__file__), "--repeats", str(repeats), "--scale",
                        ",".join(map(str, scale)), "--measure-into", out], check=True, env=env, cwd=tree)
        with open(out) as f:
            return json.load(f)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--against", metavar="REF", help="also measure the code at this git commit, side by side")
    parser.add_argument("--scale", default="", help="rank counts of the scale rows, e.g. 1024,2048")
    parser.add_argument("--measure-into", help=argparse.SUPPRESS)  # --against's subprocess
    parser.add_argument("--scale-one", help=argparse.SUPPRESS)  # a scale row's subprocess: CARRIER:RANKS
    add_record_flag(parser)
    args = parser.parse_args()
    scale = [int(n) for n in args.scale.split(",") if n]
    if args.scale_one:
        carrier, ranks = args.scale_one.split(":")
        print(scale_seconds_here(carrier, int(ranks)))
        return
    if args.measure_into:
        with open(args.measure_into, "w") as f:
            json.dump(measure_all(args.repeats, scale), f)
        return
    data: dict[str, Any] = {"now": measure_all(args.repeats, scale)}
    shown = {what: fmt for what, _, fmt in MEASURES} | {_scale_row(n): "{:.1f}" for n in scale}
    headers = ["what", "greenlet", "process", "process / greenlet"]
    if args.against:
        data[args.against] = measured_at(args.against, args.repeats, scale)
        headers = ["what", f"greenlet at {args.against}", f"process at {args.against}", "greenlet now",
                   "process now", "process / greenlet now"]
    rows = []
    for what, fmt in shown.items():
        now = data["now"][what]
        before = [fmt.format(data[args.against][what][c]) for c in CARRIERS] if args.against else []
        ratio = f"{now['process'] / now['greenlet']:.2f}x"
        rows.append([what, *before, *(fmt.format(now[c]) for c in CARRIERS), ratio])
    message_table, data["messages"] = message_rows(args.repeats)
    command = f"python benchmarks/carrier_bench.py --repeats {args.repeats}" + \
        (f" --against {args.against}" if args.against else "") + (f" --scale {args.scale}" if scale else "")
    markdown = "## carriers\n\nMedians of " + str(args.repeats) + " runs each (scale rows: one run), both " \
        "carriers in one process" + (f", and the code at {args.against} in a subprocess of the same run" if
                                     args.against else "") + ".\n\n" + table(headers, rows) + \
        "\n\nA message between a rank process and the host, microseconds to write and to read: pickles (a " \
        "rank's requests read through a restricted unpickler, as before issue 29; the host's answers, as " \
        "before issue 30) beside the port's typed messages of plain data (msgpack, strict decoding), as " \
        "now.\n\n" + \
        table(["message", "pickle write", "pickle read", "typed write", "typed read", "per message, now"],
              message_table)
    print(markdown)
    write_report("carriers", command, markdown, data, record=args.record)


if __name__ == "__main__":
    main()
