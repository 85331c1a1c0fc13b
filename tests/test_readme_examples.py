"""README's scenario and checkpoint examples run as written, and say what README says they do."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from conftest import missing

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def _blocks(containing: str) -> list[str]:
    return [b for b in re.findall(r"```python\n(.*?)```", README, re.S) if containing in b]


def test_the_search_examples_run_as_written() -> None:
    first, crashes = _blocks("scenarios.explore") [:2]
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(first, "README.md", "exec"), namespace)
    assert namespace["finding"].failed  # type: ignore[attr-defined]
    exec(compile(crashes, "README.md", "exec"), namespace)  # it asserts that both searches pass
    assert namespace["drawn"].examples >= 50 and namespace["walked"].examples > 10  # type: ignore[attr-defined]


def test_the_kept_zygote_example_runs_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    (block,) = _blocks("simfs.zygote_kept")
    exec(compile(block, "README.md", "exec"), {"__name__": "readme_example"})
    assert capsys.readouterr().out.strip() == "[{0: 0, 1: 1}, {0: 0, 1: 1}, {0: 0, 1: 1}]"


def test_the_checkpoint_example_runs_as_written() -> None:
    (block,) = _blocks("checkpoint.CheckpointManager")
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["step"] == 100
    assert namespace["report"].files  # type: ignore[attr-defined]
    assert namespace["future"].done()  # type: ignore[attr-defined]


def test_the_stacks_example_runs_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    (block,) = _blocks("Accelerator(cpu=True)")
    if importlib.util.find_spec("accelerate") is None:
        missing("stacks", "accelerate not installed (pip install -e '.[stacks]')")
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(block, "README.md", "exec"), namespace)
    assert "{0: 0, 1: 1, 2: 2, 3: 3}" in capsys.readouterr().out


def test_the_shared_database_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (block,) = _blocks("ReadOnlyDatabase(shared)")
    monkeypatch.chdir(tmp_path)  # its databases are directories relative to the current one
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(block, "README.md", "exec"), namespace)  # it asserts the shared failure came first
    assert (tmp_path / "ci-db").is_dir() and (tmp_path / ".hypothesis" / "examples").is_dir()
