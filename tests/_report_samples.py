"""Reports built by hand for the report tests, from traces that simfs really recorded: the
makedirs(exist_ok=True) race on BeeGFS and a torn 'latest' file read back after a power loss."""

from __future__ import annotations

from scenarios.outcome import SCHEMA, Event, Failure, FindingRecord, RankOutput, Report, ScenarioOutcome, Warned

STALE = "(stale: node 0's lookup cache answered 'not found' for 'trace')"

# run time rank node op path outcome
_MAKEDIRS = f"""
0 0.0000000 0 0 stat /shared/trace ENOENT
0 0.0000000 3 1 stat /shared/trace ENOENT
0 0.0000000 2 1 stat /shared/trace ENOENT
0 0.0000000 1 0 stat /shared/trace ENOENT
0 0.0000002 2 1 stat /shared ok
0 0.0000002 1 0 stat /shared ok
0 0.0000003 2 1 mkdir /shared/trace ok
0 0.0000003 1 0 mkdir /shared/trace EEXIST
0 0.0002503 2 1 barrier WORLD arrived
0 0.0002503 1 0 stat /shared/trace ENOENT {STALE}
0 0.0005000 0 0 stat /shared ok
0 0.0005000 3 1 stat /shared ok
0 0.0005001 0 0 mkdir /shared/trace EEXIST
0 0.0005001 3 1 mkdir /shared/trace EEXIST
0 0.0007501 0 0 stat /shared/trace ENOENT {STALE}
0 0.0007501 3 1 stat /shared/trace ok
0 0.0010003 3 1 barrier WORLD arrived
0 1800.0002503 2 1 barrier WORLD timeout waiting for ranks [0, 1]
0 1800.0010003 3 1 barrier WORLD timeout waiting for ranks [0, 1]
"""

_CRASH = """
0 0.0 0 0 stat /shared ok
0 0.0 3 1 barrier WORLD arrived
0 0.0 2 1 barrier WORLD arrived
0 0.0 1 0 barrier WORLD arrived
0 0.00025 0 0 mkdir /shared/ckpt ok
0 0.0005 0 0 barrier WORLD arrived
0 0.00055 0 0 open /shared/ckpt/shard-0 ok
0 0.00055 2 1 open /shared/ckpt/shard-2 ok
0 0.00055 1 0 open /shared/ckpt/shard-1 ok
0 0.00055 3 1 open /shared/ckpt/shard-3 ok
0 0.0008002 0 0 write /shared/ckpt/shard-0 ok
0 0.0008002 3 1 write /shared/ckpt/shard-3 ok
0 0.0008002 1 0 write /shared/ckpt/shard-1 ok
0 0.0010502 0 0 close /shared/ckpt/shard-0 ok
0 0.0010502 1 0 close /shared/ckpt/shard-1 ok
0 0.0010502 3 1 close /shared/ckpt/shard-3 ok
0 0.0013 2 1 write /shared/ckpt/shard-2 ok
0 0.00155 2 1 close /shared/ckpt/shard-2 ok
0 0.0015503 0 0 barrier WORLD arrived
0 0.0015503 3 1 barrier WORLD arrived
0 0.0015503 1 0 barrier WORLD arrived
0 0.0020501 2 1 barrier WORLD arrived
0 0.0021001 0 0 open /shared/ckpt/latest ok
0 0.0023503 -1 -1 server-crash /shared 0 of 0 unsynced operations persisted (PowerLoss(after_ops=23))
0 0.0023503 -1 1 crash node1 PowerLoss(after_ops=23)
0 0.0023503 -1 1 disk-crash node1:/ 0 of 0 unsynced operations persisted
0 0.0023503 -1 0 crash node0 PowerLoss(after_ops=23)
0 0.0023503 -1 0 disk-crash node0:/ 0 of 0 unsynced operations persisted
1 90.0023503 0 0 stat /shared/ckpt/latest ok
1 90.0023503 3 1 stat /shared/ckpt/latest ok
1 90.0023503 2 1 stat /shared/ckpt/latest ok
1 90.0023503 1 0 stat /shared/ckpt/latest ok
1 90.0023508 2 1 open /shared/ckpt/latest ok
1 90.0023508 1 0 open /shared/ckpt/latest ok
1 90.0026012 2 1 read /shared/ckpt/latest ok
1 90.0026012 1 0 read /shared/ckpt/latest ok
1 90.0028513 2 1 close /shared/ckpt/latest ok
1 90.0028513 1 0 close /shared/ckpt/latest ok
1 90.0036003 0 0 open /shared/ckpt/latest ok
1 90.0036003 3 1 open /shared/ckpt/latest ok
1 90.0038507 0 0 read /shared/ckpt/latest ok
1 90.0038507 3 1 read /shared/ckpt/latest ok
"""

MAKEDIRS_REPLAY = ("scenarios1:eNplj7sOgzAMRf_FcwaeIvWvVB1IcAptmiCHsCD-nUCVpR2P70O-G-iR9BvQRWsFaO7DmMH00S4B8P4QMF73D"
                   "citWZ7ZKwJsm1tRS1nWlZRN0bVdU-0CXl4Bgp1WwgJPEAkMLdOHQi5wfjihuqrMZFMZKKKnCcnNpP1KnL38l-bZXVkOacEQz_RX-OX0cLkf2SVLbw")
MAKEDIRS_ERROR = "FileExistsError: [Errno 17] File exists: '/shared/trace'"
CRASH_ERROR = "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)"


def events(table: str) -> list[Event]:
    """Events from lines of 'run time rank node op path outcome' (the outcome may have spaces)."""
    out = []
    for line in table.strip().splitlines():
        run, time, rank, node, op, path, outcome = line.split(" ", 6)
        out.append(Event(int(run), float(time), int(rank), int(node), op, path, outcome))
    return out


def makedirs_finding() -> FindingRecord:
    """Every rank's `if not exists(d): makedirs(d, exist_ok=True)` on BeeGFS (lingua #49)."""
    failure = Failure(0, 1, "raised", MAKEDIRS_ERROR, "jobs.py:5 in job",
                      'Traceback (most recent call last):\n  File "jobs.py", line 5, in job\n'
                      f'  File "<frozen os>", line 225, in makedirs\n{MAKEDIRS_ERROR}\n')
    description = (f"root cause: rank 1 (node 0) raised {MAKEDIRS_ERROR}\n  at jobs.py:5 in job\n"
                   "the counterexample:\n  - stale cache: rank 1's stat /shared/trace -> ENOENT at 0.000s: "
                   "node 0's lookup cache answered 'not found' for 'trace'\n"
                   "then in the job: rank 0 FileExistsError, ranks [2, 3] hung <script>alert(1)</script>")
    return FindingRecord(True, description, MAKEDIRS_REPLAY, 1, 0.21, 1800.001, failure, events(_MAKEDIRS),
                         MAKEDIRS_OUTPUT, MAKEDIRS_WARNINGS, 1, {"stale lookup answer": 1})


LEFT_OUT = "\n[... 81,920 bytes left out: simfs keeps the first and last 16,384 ...]\n"
MAKEDIRS_OUTPUT = [
    RankOutput(0, 0, "step 0 of rank 0\n" + "loss 0.5 " * 400 + "\n", "", 0, 0, 0),
    RankOutput(0, 1, "step 0 of rank 1\n", "making /shared/trace <script>alert(2)</script>" + LEFT_OUT + "gave up\n",
               0, 81920, 0),
]
MAKEDIRS_WARNINGS = [Warned(0, "UserWarning", "Detected an existing checkpoint in /shared/dcp/model, overwriting",
                            "torch/distributed/checkpoint/state_dict_saver.py", 472, 4, [0, 1, 2, 3])]


def crash_finding() -> FindingRecord:
    """A 'latest' file written in place, the cluster loses power, the restarted job reads it torn."""
    failure = Failure(1, 1, "raised", CRASH_ERROR, "jobs.py:15 in resume",
                      f'Traceback (most recent call last):\n  File "jobs.py", line 15, in resume\n{CRASH_ERROR}\n')
    description = (f"root cause: rank 1 (node 0) of the restarted job (recover) raised {CRASH_ERROR}\n"
                   "the counterexample:\n  - crash: the whole cluster lost power before operation 24, "
                   "after rank 0's open /shared/ckpt/latest")
    return FindingRecord(True, description, "scenarios1:eNo-crash'quote", 37, 1.5, 90.0038507, failure,
                         events(_CRASH))


def polling_finding(ranks: int = 8, polls: int = 40) -> FindingRecord:
    """Hundreds of events (the OLMo pattern: rank 0 makes a directory late, the others poll for it
    with a fixed timeout): every rank writes 3 shards and ends at a barrier, polls in between."""
    trace = []
    for rank in range(ranks):
        node, t = rank // 4, 0.0
        for step in range(3):
            for op in ("open", "write", "close"):
                trace.append(Event(0, t, rank, node, op, f"/shared/ckpt/step{step}/shard-{rank}", "ok"))
                t += 0.00025
        if rank:
            for _ in range(polls):
                trace.append(Event(0, t, rank, node, "stat", "/shared/ckpt/done", "ENOENT"))
                trace.append(Event(0, t, rank, node, "sleep", "", "0.25s"))
                t += 0.25
        if rank != 5:  # rank 5 gives up: its wait timed out
            trace.append(Event(0, t, rank, node, "barrier", "WORLD", "arrived"))
    trace.sort(key=lambda e: e.time)
    error = "TimeoutError: /shared/ckpt/done did not appear within 10 s"
    failure = Failure(0, 5, "raised", error, "jobs.py:30 in wait_for", error)
    return FindingRecord(True, f"root cause: rank 5 raised {error}", "scenarios1:poll", 12, 2.0, 10.0, failure,
                         trace)


def outcome(scenario: str, profile: str, expected: str, verdict: str, finding: FindingRecord | None = None,
            error: str = "", family: str = "makedirs") -> ScenarioOutcome:
    examples = finding.examples if finding else 100
    return ScenarioOutcome(scenario, profile, family, expected, verdict, examples,
                           finding.virtual_time if finding else 12.5, 0.4, finding, error)


def sample_report() -> Report:
    """One of each: failed as expected, passed as expected, failed unexpectedly (with a crash and
    a restart), passed unexpectedly, and a scenario that could not run."""
    return Report(SCHEMA, "0.1.0", "simfs run --seed 3", 3, "2026-05-01T12:00:00Z", 4.25, False, [
        outcome("makedirs_every_rank", "beegfs", "fail", "fail", makedirs_finding()),
        outcome("makedirs_every_rank", "nfs", "pass", "pass",
                FindingRecord(False, "", "scenarios1:x", 100, 0.3, 12.5,
                              coverage={"start skew": 52, "stale lookup answer": 37, "slow <operations>": 3})),
        outcome("latest_atomic_write", "nfs", "pass", "fail", crash_finding(), family="latest"),
        outcome("rank0_no_barrier", "lustre", "fail", "pass"),
        outcome("sync_files_changing", "objectstore", "pass", "error",
                error="Traceback (most recent call last):\nTypeError: sync_files() got an unexpected keyword\x1b[0m",
                family="sync"),
    ])
