"""Replay strings and job references are data: a string from an untrusted source makes the caller
import nothing it did not name itself (neither its preload list nor a module that does not define
the job it names), and inflates to no more than a replay string holds. Each case runs the caller in
a fresh interpreter and checks it afterwards: what it imported, what the bait module's top-level
code left behind, what it allocated."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

import scenarios
from scenarios.example import Example
from scenarios.explore import make_target
from scenarios.library import drift
from scenarios.replaying import encode

BAIT = "simfs_replay_bait"


def _bait(tmp_path: Path) -> Path:
    """A package whose import leaves a file behind, with a submodule defining no job."""
    package = tmp_path / "mods" / BAIT
    package.mkdir(parents=True)
    marker = tmp_path / "imported"
    (package / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (package / "sub.py").write_text(f"open({str(marker)!r}, 'w').close()\njob = print\n")
    return marker


def _caller(tmp_path: Path, code: str) -> str:
    """``code`` run by a fresh interpreter that has the bait on its path; its last printed line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "mods"), *sys.path])}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def _respelled(text: str, prefix: str, **changes: object) -> str:
    body = text[len(prefix):]
    spec = json.loads(zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))))
    spec.update(changes)
    raw = zlib.compress(json.dumps(spec, separators=(",", ":"), sort_keys=True).encode(), 9)
    return prefix + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _finding_string(**changes: object) -> str:
    target = make_target(drift.check_before_barrier, recover=None, check=None, nodes=1, ranks_per_node=2,
                         profile="local", carrier="process")
    return _respelled(encode(target, Example()), scenarios.replaying.PREFIX, **changes)


def test_a_finding_strings_preload_imports_nothing_the_caller_did_not(tmp_path: Path) -> None:
    marker = _bait(tmp_path)
    text = _finding_string(preload=[f"{BAIT}.sub"])
    seen = _caller(tmp_path, f"""
        import sys, scenarios
        found = scenarios.replay({text!r})
        print(found.failed, {BAIT!r} in sys.modules)
    """)
    assert seen == "False False"
    assert not marker.exists(), "the replay string's preload ran the bait package's code in the caller"


@pytest.mark.parametrize("entry", ["scenarios", "simfs"])
def test_a_job_its_module_does_not_define_is_refused_before_the_module_is_imported(tmp_path: Path,
                                                                                     entry: str) -> None:
    marker = _bait(tmp_path)
    if entry == "scenarios":
        text, call = _finding_string(job=f"{BAIT}.sub:job"), "scenarios.replay"
    else:
        import simfs

        run = simfs.Cluster(nodes=1, ranks_per_node=1).run(drift.check_before_barrier)
        text, call = _respelled(run.replay, "simfs1:", job=f"{BAIT}.sub:job"), "simfs.replay"
    seen = _caller(tmp_path, f"""
        import sys, scenarios, simfs
        try:
            {call}({text!r})
        except (ValueError, simfs.ConfigError) as exc:
            print("refused:", exc)
    """)
    assert seen.startswith("refused:") and "is not a function its module's source defines" in seen, seen
    assert not marker.exists(), "the bait module's top-level code ran in the caller"


@pytest.mark.parametrize("prefix", ["scenarios1:", "simfs1:"])
def test_a_short_string_inflating_to_gigabytes_is_refused_within_its_bound(tmp_path: Path, prefix: str) -> None:
    """64 MiB of JSON whitespace compresses to ~64 KiB; the reader stops at the bound."""
    body = base64.urlsafe_b64encode(zlib.compress(b" " * (64 << 20), 9)).decode().rstrip("=")
    path = tmp_path / "string.txt"
    path.write_text(prefix + body)
    seen = _caller(tmp_path, f"""
        import tracemalloc, scenarios, simfs
        text = open({str(path)!r}).read()
        tracemalloc.start()
        try:
            (scenarios.replay if text.startswith("scenarios1:") else simfs.replay)(text)
        except (ValueError, simfs.ConfigError) as exc:
            print(tracemalloc.get_traced_memory()[1], "refused:", exc)
    """)
    peak, _, why = seen.partition(" ")
    assert why.startswith("refused:") and "inflates to more than 8 MiB" in why, why
    assert int(peak) < 32 << 20, f"the reader held {int(peak) >> 20} MiB"
