"""``python -m simfs``: the ``simfs`` command."""

from scenarios.cli import console

console()
