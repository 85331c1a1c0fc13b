"""Setting an attribute of a C type that Python marks immutable (``datetime.datetime``), the one
way to change what such a class does without replacing the class: C extensions (pandas, pyarrow,
numpy) check the real type and its size, so a stand-in subclass breaks them."""

from __future__ import annotations

import ctypes
import gc
from typing import Any

_IMMUTABLE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE (Include/object.h)
_type_modified = ctypes.pythonapi.PyType_Modified
_type_modified.argtypes = [ctypes.py_object]
_type_modified.restype = None


def assign(owner: Any, name: str, value: Any) -> None:
    """``setattr(owner, name, value)``, also for an immutable type: its namespace, which Python
    shows only through a read-only proxy, is written directly and the type's attribute cache
    (and its subclasses') invalidated with PyType_Modified, as type.__setattr__ itself does."""
    if not (isinstance(owner, type) and owner.__flags__ & _IMMUTABLE):
        setattr(owner, name, value)
        return
    namespace: dict[str, Any] = gc.get_referents(owner.__dict__)[0]  # the dict behind the proxy
    namespace[name] = value
    _type_modified(owner)
