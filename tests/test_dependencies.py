"""Every third-party import is declared in pyproject.toml. deptry (.ci/run, [tool.deptry]) checks the
four packages; here: what tests/, benchmarks/ and .ci/ import is installed by README's test command
(core and the test extra, with the extras it names), and an optional feature's import names its extra
when its library is missing."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PACKAGES = {"simfs", "coord", "checkpoint", "scenarios"}
# each scanned flat: .ci/deps holds filelock 3.x sources, not code of this project
SCANNED = ("tests", "tests/stacks", "benchmarks", ".ci")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_with(extra: str) -> set[str]:
    """The distributions that core and ``extra`` declare, following simfs[...] to the extras it names
    (markers ignored: a requirement of another Python version is still declared)."""
    optional = PROJECT["optional-dependencies"]
    queue, extras, names = [*PROJECT["dependencies"], *optional[extra]], {extra}, set()
    while queue:
        match = re.match(r"([A-Za-z0-9._-]+)(?:\[([^\]]*)\])?", queue.pop())
        assert match is not None
        if _normalize(match[1]) != "simfs":
            names.add(_normalize(match[1]))
            continue
        for name in (e.strip() for e in match[2].split(",")):
            if name not in extras:
                extras.add(name)
                queue += optional[name]
    return names


def third_party_imports() -> dict[str, set[str]]:
    """Top-level modules that SCANNED import (also through pytest.importorskip), other than the standard
    library, the four packages and the folder's own modules, with the files that import each."""
    found: dict[str, set[str]] = defaultdict(set)
    for folder in SCANNED:
        files = sorted((ROOT / folder).glob("*.py"))
        # helpers imported by bare name (tests/stacks/ also imports tests/conftest.py); `from tests import ...`
        local = {f.stem for f in files} | {folder, "conftest"}
        for file in files:
            for node in ast.walk(ast.parse(file.read_text(), str(file))):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                      and node.func.attr == "importorskip" and node.args and isinstance(node.args[0], ast.Constant)):
                    modules = [node.args[0].value]
                else:
                    continue
                for module in modules:
                    top = module.partition(".")[0]
                    if top not in sys.stdlib_module_names and top not in PACKAGES | local:
                        found[top].add(f"{folder}/{file.name}")
    return found


@pytest.mark.slow  # imports every test and benchmark module's dependencies: run by .ci/run
def test_tests_benchmarks_and_ci_import_only_what_the_test_extra_installs() -> None:
    declared = installed_with("test")
    owners = importlib.metadata.packages_distributions()
    imports = third_party_imports()
    assert {"torch", "pytest", "playwright"} <= imports.keys()  # the scan sees imports at all
    undeclared = {}
    for module, files in sorted(imports.items()):
        # a module not installed here is taken to come from the distribution of its name, as deptry does
        distributions = {_normalize(d) for d in owners.get(module, [module])}
        if not distributions & declared:
            undeclared[module] = f"{sorted(distributions)} imported by {sorted(files)}"
    assert not undeclared, f"declare these in the test extra (or core) of pyproject.toml: {undeclared}"


@pytest.mark.parametrize("module,library,extra", [
    ("simfs.rank.fsspec_view", "fsspec", "fsspec"),
    ("scenarios.pytest_plugin", "pytest", "pytest"),
])
def test_an_optional_feature_names_its_extra_when_its_library_is_missing(module: str, library: str,
                                                                         extra: str) -> None:
    assert library in {_normalize(r).partition(">")[0] for r in PROJECT["optional-dependencies"][extra]}
    blocked = f"import sys; sys.modules[{library!r}] = None; import {module}"  # as if it were not installed
    done = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 1
    assert f"ImportError: {module} needs {library}: pip install 'simfs[{extra}]'" in done.stderr
