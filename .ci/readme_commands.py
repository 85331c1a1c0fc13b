"""Print the two commands of README.md's first ```bash block, one a line, for .ci/run to run as a
user would: the install and main job, then the install and test run. CI reads them here rather than
keeping a copy, so that what README tells users to type is what CI proves.

Usage: python .ci/readme_commands.py [README]  (default: the README.md beside .ci/)
Exits 1, saying why, when that block does not hold exactly two `pip install ...` lines: CI must
not guess which lines to run after README changes shape."""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def commands(text: str) -> list[str]:
    """The non-blank lines of the first ```bash block, verbatim; ValueError unless they are two
    `pip install ...` lines."""
    block = re.search(r"^```bash\n(.*?)^```", text, re.S | re.M)
    if block is None:
        raise ValueError("it has no ```bash block")
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    if len(lines) != 2 or not all(line.startswith("pip install ") for line in lines):
        raise ValueError(f"its first ```bash block must hold exactly two `pip install ...` lines, not {lines!r}")
    return lines


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else README
    try:
        lines = commands(path.read_text())
    except ValueError as exc:
        print(f"readme_commands.py: {path}: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
