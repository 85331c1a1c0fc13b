"""Which calls of a rank come from the import system. Those read the real disk, read-only, as the
host's import system would (editable finders, ``.pth`` and ``PYTHONPATH`` entries, namespace
packages, zip imports, the current directory): a rank imports whatever the host can. The same
path opened by the rank's own code is on its simulated machine.

A call belongs to the import system when, walking out from it, the first frame that decides is
one of importlib's or zipimport's: a finder's search (setuptools' editable finders included: they
run under importlib's ``_find_spec``) or a loader reading code. A module body (``<module>``)
decides the other way: what a module does while it is imported is the rank's own code. So does
``_handle_fromlist``, which calls a module's ``__getattr__``."""

from __future__ import annotations

import importlib._bootstrap as _bootstrap
import importlib._bootstrap_external as _bootstrap_external
import sys
import zipimport
from types import FrameType

from .task import current_task

# the code objects' file names ("<frozen importlib._bootstrap>" where the modules are frozen, their
# real paths under -X frozen_modules=off)
_IMPORT_SYSTEM = frozenset({
    _bootstrap._find_and_load.__code__.co_filename,  # type: ignore[attr-defined]  # private, not in typeshed
    _bootstrap_external.FileFinder.find_spec.__code__.co_filename,
    zipimport.zipimporter.get_code.__code__.co_filename,
})
_USER_CODE_CALLED_BY_IMPORTLIB = "_handle_fromlist"
_DEPTH = 64  # a finder nests a few frames below importlib; deeper than this is the rank's own code


def from_import_system() -> bool:
    """True when the intercepted call being handled was made by the import system (only looked
    for while the calling task imports: rank/intercept/imports.py counts that)."""
    task = current_task()
    if task is None or not task.importing:
        return False
    frame: FrameType | None = sys._getframe(1)
    for _ in range(_DEPTH):
        if frame is None:
            return False
        code = frame.f_code
        if code.co_filename in _IMPORT_SYSTEM:
            return code.co_name != _USER_CODE_CALLED_BY_IMPORTLIB
        if code.co_name == "<module>":
            return False
        frame = frame.f_back
    return False
