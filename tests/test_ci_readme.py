""".ci/run runs README's two commands as README writes them: .ci/readme_commands.py reads them from
README's first ```bash block, and .ci/run calls it and keeps no copy of them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXTRACTOR = ROOT / ".ci" / "readme_commands.py"


def _extract(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(EXTRACTOR), *args], capture_output=True, text=True, timeout=60)


def test_the_extractor_prints_readmes_two_lines_verbatim() -> None:
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block is not None
    done = _extract()
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == block.group(1).splitlines()
    assert len(done.stdout.splitlines()) == 2


def test_ci_run_calls_the_extractor_and_keeps_no_copy_of_the_commands() -> None:
    run = (ROOT / ".ci" / "run").read_text()
    assert "python \"$clone/.ci/readme_commands.py\"" in run
    for line in _extract().stdout.splitlines():
        for part in line.split("&&"):  # neither a whole line nor any command of one
            assert part.strip() not in run, f".ci/run holds a copy of README's {part.strip()!r}"


GOOD = "```bash\npip install a\npip install b\n```\n"


@pytest.mark.parametrize("text,why", [
    ("# simfs\n", "no ```bash block"),
    ("```python\npip install a\npip install b\n```\n", "no ```bash block"),
    ("```bash\npip install -e .\n```\n" + GOOD, "exactly two"),  # the first block counts, not a later one
    ("```bash\npip install -e .\npip install -e .\npip install -e .\n```\n", "exactly two"),
    ("```bash\npip install -e .\npython -m pytest\n```\n", "exactly two"),
])
def test_the_extractor_refuses_any_other_shape(tmp_path: Path, text: str, why: str) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(text)
    done = _extract(str(readme))
    assert done.returncode == 1
    assert done.stdout == ""
    assert why in done.stderr and str(readme) in done.stderr


def test_the_extractor_reads_a_readme_of_that_shape(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# simfs\n\n" + GOOD + "\n```bash\nsomething else\n```\n")
    assert _extract(str(readme)).stdout == "pip install a\npip install b\n"


def test_each_readme_command_installs_the_cpu_torch_before_anything_that_needs_torch() -> None:
    """On plain PyPI, Linux x86_64's torch is the CUDA build (gigabytes): each command's first install
    takes torch from PyTorch's CPU index, as PyTorch's install page gives it, so that the install of
    simfs after it finds torch installed and pulls nothing."""
    for line in _extract().stdout.splitlines():
        first, *rest = [part.split() for part in line.split("&&")]
        assert first[:3] == ["pip", "install", "torch==2.13.0"], line
        assert first[3:] == ["--index-url", "https://download.pytorch.org/whl/cpu"], line
        assert rest and rest[0][:2] == ["pip", "install"] and "torch" not in " ".join(rest[0]), line
