"""``python -m simfs``: the ``simfs`` command. ``-m`` puts the current directory first on
``sys.path``; it comes off again before the command's packages are imported, as the console
script starts (a module there named like one of simfs's would pass for it), and
scenarios.importpath.for_jobs puts it back for a job."""

import os
import sys

_INSTALLED_AT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # simfs's packages lie here
if sys.path and os.path.realpath(sys.path[0] or os.curdir) == os.path.realpath(os.getcwd()) != os.path.realpath(
        _INSTALLED_AT):
    del sys.path[0]

from scenarios.cli import console  # noqa: E402 - once the current directory is off the import path

console()
