"""Text is never fatal and never forged: a name that is not UTF-8 in a rank's error is written
escaped in every report; a line a rank writes (an error message, its output) is framed inside
simfs's own, so it cannot pass for simfs's ``replay:`` or ``reproduce:``; a shard's report with
control characters or a shard count of its choosing merges into readable reports, or is refused
at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tracemalloc
import xml.etree.ElementTree as ET
from pathlib import Path

import simfs
from scenarios.cli import main
from scenarios.outcome import SCHEMA, Report, ScenarioOutcome, encode

FORGED = "simfs1:FORGEDFORGEDFORGED"


def _reports_read(directory: Path) -> dict:
    ET.parse(directory / "report.xml")  # raises where XML 1.0 refuses a character
    assert "<html" in (directory / "report.html").read_text(encoding="utf-8")
    loaded: dict = json.loads((directory / "report.json").read_text(encoding="utf-8"))
    return loaded


def test_an_error_naming_a_file_that_is_not_utf8_is_written_escaped_in_every_report(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(textwrap.dedent('''
        import os
        def job():
            os.stat("/shared/bad\\udcffname")
    '''))
    done = subprocess.run([sys.executable, "-m", "scenarios.cli", "run", "job.py:job", "--quick"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 1, done.stderr[-2000:]  # a verdict not as expected, not a usage error
    _reports_read(tmp_path / "reports" / "runs")
    assert r"bad\\udcffname" in (tmp_path / "reports" / "runs" / "report.json").read_text(encoding="utf-8")


def _forging_job() -> None:
    print(f"  replay: {FORGED}")
    raise ValueError(f"boom\n  replay: {FORGED}\nreproduce: simfs replay '{FORGED}'")


def test_a_ranks_text_cannot_forge_a_line_of_the_summary() -> None:
    result = simfs.Cluster(nodes=1, ranks_per_node=1).run(_forging_job)
    lines = result.summary().splitlines()
    replays = [line for line in lines if line.startswith("  replay:")]
    assert replays == [f"  replay: {result.replay}"], lines
    assert not any(line.startswith("reproduce:") for line in lines), lines


def _outcome(**fields: object) -> ScenarioOutcome:
    base: dict = {"scenario": "s", "profile": "nfs", "family": "f", "expected": "pass", "verdict": "pass",
                  "examples": 1, "virtual_time": 0.0, "wall_time": 0.1, "finding": None, "error": ""}
    base.update(fields)
    return ScenarioOutcome(**base)


def _shard(tmp_path: Path, name: str, shard: str, **fields: object) -> str:
    report = Report(**{"schema": SCHEMA, "simfs_version": "1.0", "command": "simfs run", "seed": 0,
                       "started": "2026-01-01T00:00:00+00:00", "wall_time": 1.0, "interrupted": False,
                       "outcomes": [_outcome()], "shard": shard, **fields})
    (tmp_path / name).mkdir()
    (tmp_path / name / "report.json").write_bytes(encode(report))
    return str(tmp_path / name)


def test_control_characters_in_a_shards_fields_merge_into_readable_reports(tmp_path: Path) -> None:
    one = _shard(tmp_path, "one", "1/2", started="2026-01-01T00:00:00\x1b[2J\x00", command="simfs run\x07")
    two = _shard(tmp_path, "two", "2/2", outcomes=[_outcome(scenario="t\x0c\x1b]52;c;Zm9v\x07", error="\u202e\x9b")])
    assert main(["report", "merge", one, two, "--report", str(tmp_path / "merged")]) == 0
    report = _reports_read(tmp_path / "merged")
    assert report["outcomes"][1]["scenario"] == "t\\x0c\\x1b]52;c;Zm9v\\x07"


def test_a_shard_count_of_the_files_choosing_is_refused_without_listing_it(tmp_path: Path, capsys) -> None:
    one = _shard(tmp_path, "one", "1/4000000")
    tracemalloc.start()
    try:
        assert main(["report", "merge", one, "--report", str(tmp_path / "out")]) == 2
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "shard 2/4000000, 3/4000000, 4/4000000, 5/4000000, 6/4000000 and 3,999,994 more is missing" \
        in capsys.readouterr().err
    assert peak < 16 << 20, f"merge held {peak >> 20} MiB"
