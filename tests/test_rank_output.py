"""A rank's stdout, stderr, logging and warnings are kept per rank and per run in its Result (as
pytest captures a test's), bounded, on both carriers; none of it reaches the host's console."""

from __future__ import annotations

import io
import logging
import os
import sys
import warnings

import pytest

import simfs
from simfs.capture import KEEP, MAX_WARNINGS, Capture, RankOutput, RankWarning, distinct_warnings, ranks_words, render

CARRIERS = ["process", "greenlet"]


def _writes_everywhere() -> None:
    rank = int(os.environ["RANK"])
    print(f"print from rank {rank}")
    print(f"stderr from rank {rank}", file=sys.stderr)
    os.write(1, b"os.write to 1\n")
    os.write(2, b"os.write to 2\n")
    logger = logging.getLogger(f"simfs-test-output-{rank}")
    logger.propagate = False  # (pytest's handlers on the root logger left out)
    logger.addHandler(logging.StreamHandler())  # on sys.stderr
    logger.warning("logged by rank %d", rank)


@pytest.mark.parametrize("carrier", CARRIERS)
def test_what_a_rank_writes_is_kept_by_rank_and_not_shown(carrier: str, capfd: pytest.CaptureFixture[str]) -> None:
    result = simfs.Cluster(1, 2, carrier=carrier).run(_writes_everywhere)
    assert result.ok, result.summary()
    assert sorted(result.output) == [0, 1]
    for rank, out in result.output.items():
        assert out.stdout.splitlines() == [f"print from rank {rank}", "os.write to 1"]
        assert out.stderr.splitlines() == [f"stderr from rank {rank}", "os.write to 2", f"logged by rank {rank}"]
        assert (out.stdout_left_out, out.stderr_left_out, out.warnings) == (0, 0, [])
    shown = capfd.readouterr()
    assert "from rank" not in shown.out + shown.err and "os.write" not in shown.out + shown.err


def _logs_to_the_hosts_console() -> None:
    logging.getLogger("simfs-test-host-handler").warning("through the host's handler")


@pytest.mark.parametrize("carrier", CARRIERS)
def test_a_handler_on_the_hosts_console_writes_to_the_ranks(carrier: str, capfd: pytest.CaptureFixture[str]) -> None:
    """A handler the host made on its real stderr (descriptor 2, which capfd reads): a greenlet
    rank's records go to the rank's stderr (greenlet ranks share the host's handlers), as a rank
    process's do (its handlers made before the fork are pointed at its own console)."""
    logger = logging.getLogger("simfs-test-host-handler")
    handler = logging.StreamHandler(sys.__stderr__)
    logger.addHandler(handler)
    try:
        result = simfs.Cluster(1, 1, carrier=carrier).run(_logs_to_the_hosts_console)
    finally:
        logger.removeHandler(handler)
    assert result.ok, result.summary()
    assert result.output[0].stderr == "through the host's handler\n"
    assert "through the host's handler" not in capfd.readouterr().err


def _warns() -> None:
    warnings.simplefilter("always")  # every showing counted (the default filter shows one per location)
    for _ in range(3):
        warnings.warn("careful", UserWarning, stacklevel=1)
    warnings.warn_explicit("elsewhere", DeprecationWarning, "lib.py", 7)
    with warnings.catch_warnings(record=True) as caught:  # the job's own capture sees its warnings
        warnings.warn("caught by the job", stacklevel=1)
    assert [str(w.message) for w in caught] == ["caught by the job"]
    buffer = io.StringIO()
    warnings.showwarning("to a file of the job's", UserWarning, "x.py", 1, file=buffer)
    print(buffer.getvalue(), end="")


@pytest.mark.parametrize("carrier", CARRIERS)
def test_each_distinct_warning_is_kept_once_with_its_count(carrier: str, capfd: pytest.CaptureFixture[str]) -> None:
    result = simfs.Cluster(1, 2, carrier=carrier).run(_warns)
    assert result.ok, result.summary()
    line = _warns.__code__.co_firstlineno + 3
    for out in result.output.values():
        assert out.warnings == [RankWarning("UserWarning", "careful", __file__, line, 3),
                                RankWarning("DeprecationWarning", "elsewhere", "lib.py", 7, 1)]
        assert out.stderr == ""  # kept as warnings, not as their two lines of text
        assert "x.py:1: UserWarning: to a file of the job's" in out.stdout
    shared = distinct_warnings(result.output)
    assert [(w.message, w.count, ranks) for w, ranks in shared] == [("careful", 6, [0, 1]), ("elsewhere", 2, [0, 1])]
    assert "careful" not in capfd.readouterr().err


def _floods() -> None:
    sys.stdout.write("BEGIN" + "x" * (5 * KEEP) + "END\n")
    for index in range(MAX_WARNINGS + 5):
        warnings.warn(f"distinct {index}", stacklevel=1)


@pytest.mark.parametrize("carrier", CARRIERS)
def test_output_is_bounded_and_says_what_was_left_out(carrier: str) -> None:
    out = simfs.Cluster(1, 1, carrier=carrier).run(_floods).output[0]
    assert out.stdout.startswith("BEGIN") and out.stdout.endswith("END\n")
    assert out.stdout_left_out == 5 * KEEP + 9 - 2 * KEEP
    assert f"[... {out.stdout_left_out:,} bytes left out" in out.stdout
    assert len(out.stdout) < 2 * KEEP + 200
    assert len(out.warnings) == MAX_WARNINGS and out.warnings_left_out == 5
    text = render({0: out})  # what a failed run's summary and a finding's account show
    assert f"rank 0: 5 more warnings shown and not kept (over {MAX_WARNINGS} distinct ones)" in text


def _prints_then_fails() -> None:
    print("the last words of rank", os.environ["RANK"])
    if os.environ["RANK"] == "1":
        raise ValueError("failed")


def test_a_failed_runs_summary_shows_the_output_and_a_good_one_does_not() -> None:
    failed = simfs.Cluster(1, 2).run(_prints_then_fails)
    assert not failed.ok
    assert "rank 1 stdout:\n      | the last words of rank 1" in failed.summary()
    good = simfs.Cluster(1, 1).run(_prints_then_fails)
    assert good.ok and good.output[0].stdout and "stdout" not in good.summary()


def test_a_rank_that_writes_nothing_has_no_output() -> None:
    assert simfs.Cluster(1, 2).run(lambda: None).output == {}


def test_the_output_crosses_from_a_confined_child_as_plain_data() -> None:
    result = simfs.isolated(lambda: simfs.Cluster(1, 1, carrier="greenlet").run(_writes_everywhere))
    assert isinstance(result.output[0], RankOutput)
    assert result.output[0].stdout.startswith("print from rank 0")


def test_a_capture_keeps_the_first_and_last_bytes() -> None:
    capture = Capture()
    assert capture.output() is None
    for _ in range(10):
        capture.write(2, b"y" * KEEP)
    capture.write(2, b"\xff")  # not UTF-8: kept, as an escape
    out = capture.output()
    assert out is not None and out.stderr_left_out == 10 * KEEP + 1 - 2 * KEEP
    assert out.stderr.endswith("\\xff") and out.stdout == ""


def test_ranks_in_words() -> None:
    assert ranks_words([3]) == "rank 3"
    assert ranks_words([0, 1, 2, 3]) == "ranks 0-3"
    assert ranks_words([5, 0, 2, 6, 7]) == "ranks 0, 2, 5-7"


def test_a_findings_account_shows_the_failing_examples_output() -> None:
    """What a failing search prints (and the pytest plugin's failure shows): the counterexample's
    output, each distinct warning once with its count and ranks."""
    from _output_jobs import warns_and_races

    import scenarios

    finding = scenarios.explore(warns_and_races, nodes=2, ranks_per_node=2, profile="beegfs", max_examples=20, seed=0)
    assert finding.failed
    text = str(finding)
    assert text.count("a rank warns at every example") == 1
    assert "output of the ranks (the job):\n  warning (4 times, ranks 0-3): " in text
    assert "  rank 3 stdout:\n    | printed by a rank at every example" in text
    record = finding.record()
    assert [(w.count, w.ranks) for w in record.warnings] == [(4, [0, 1, 2, 3])]
    assert len(record.output) == 4
