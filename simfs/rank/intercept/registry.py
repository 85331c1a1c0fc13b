"""Patching machinery: replace attributes of modules and classes with dispatchers that send
calls from simulated ranks to the simulation and every other call to the real function, then
find references to the originals that other modules imported by name."""

from __future__ import annotations

import functools
import inspect
import operator
import os
import posix
import sys
import warnings
from collections.abc import Callable
from types import FunctionType, MappingProxyType, ModuleType
from typing import Any

from greenlet import getcurrent

from ...errors import BypassError
from ...tasks.task import TASKS, Task
from .immutable import assign

_replacements: dict[int, tuple[Any, Any]] = {}  # id(original) -> (original, replacement)
_originals: dict[tuple[int, str], Any] = {}
_installed: list[tuple[Any, str, Any]] = []  # (owner, name, replacement): what verify() puts back
_generation = [0]  # bumped when _installed changes
_grouped: list[Any] = [-1, []]  # _installed as _flattened() lays it out, and the generation it was made at
_scanned: dict[str, int] = {}
_placed: dict[int, list[tuple[dict[str, Any], str]]] = {}  # id(replacement) -> where a scan put it by name
_OWN_PREFIX = "simfs"


def current() -> Task | None:
    """The simulated task running on this thread, if any (None while simfs itself calls the
    real machine on its behalf)."""
    try:
        task = TASKS.get(getcurrent())
    except RuntimeError:  # asked from a finalizer while a greenlet is being torn down
        return None
    return None if task is None or task.host_calls else task


class host_calls:  # lowercase: used as a context manager, like a function
    """Inside a rank, calls made in this block act on the real machine (simfs's own reads of
    real files, such as source lines for tracebacks)."""

    def __enter__(self) -> None:
        try:
            self._task = TASKS.get(getcurrent())
        except RuntimeError:
            self._task = None
        if self._task is not None:
            self._task.host_calls += 1

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.host_calls -= 1


def patch(owner: Any, name: str, replacement: Any, *, scan: bool = True) -> Any:
    """Set ``owner.name`` to ``replacement``; returns the original. With ``scan``, other
    modules' references to the original are replaced too. A patched os function also takes
    the original's place in os.supports_fd / supports_dir_fd / supports_follow_symlinks.
    A dispatcher is named after where it is installed, so pickle finds it there."""
    original = owner.__dict__.get(name, getattr(owner, name)) if isinstance(owner, type) else getattr(owner, name)
    _originals.setdefault((id(owner), name), original)
    if getattr(replacement, "__simfs_patched__", False) and not hasattr(replacement, "__simfs_home__"):
        replacement.__simfs_home__ = (owner, name)
        if isinstance(owner, ModuleType):
            replacement.__module__, replacement.__qualname__ = owner.__name__, name
        else:
            replacement.__module__, replacement.__qualname__ = owner.__module__, f"{owner.__qualname__}.{name}"
    assign(owner, name, replacement)
    _installed.append((owner, name, replacement))
    _generation[0] += 1
    if scan:
        _replacements[id(original)] = (original, replacement)
    if owner is os and callable(original):
        for support in (os.supports_fd, os.supports_dir_fd, os.supports_follow_symlinks):
            if original in support:
                support.add(replacement)
    return original


def unpatch(owners: list[Any], names: list[str]) -> None:
    """Put the originals of the ``owners``' patched ``names`` back in this process, also where a
    scan copied a replacement into another module by name (a rank process that runs the library
    itself)."""
    restored: set[int] = set()
    for owner in owners:
        for name in names:
            original = _originals.get((id(owner), name))
            current = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
            if original is None or current is original:
                continue
            assign(owner, name, original)
            restored.add(id(current))
            _replacements.pop(id(original), None)
            for namespace, key in _placed.pop(id(current), []):
                if namespace.get(key) is current:
                    namespace[key] = original
    _installed[:] = [entry for entry in _installed if id(entry[2]) not in restored]
    _generation[0] += 1


def original(owner: Any, name: str) -> Any:
    return _originals[(id(owner), name)]


def verify() -> None:
    """Put back any patch that something replaced since (e.g. importlib.reload(os) in a rank)."""
    if all(all(map(operator.is_, map(get, spaces, names), replacements))
           for get, spaces, names, replacements in _flattened()):
        return  # (the common case, checked at C speed)
    for owner, name, replacement in _installed:
        current = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
        if current is not replacement:
            assign(owner, name, replacement)


Lookup = tuple[Callable[..., Any], list[Any], list[str], list[Any]]  # (get, namespaces, names, replacements)


def _flattened() -> list[Lookup]:
    """The patches as verify() looks them up: one flat lookup per kind of namespace they live in
    (a module's dict; a class's, read-only), ``get(namespace, name)`` the value there now; made
    again when the patches changed."""
    if _grouped[0] != _generation[0]:
        dicts: Lookup = (dict.get, [], [], [])
        proxies: Lookup = (MappingProxyType.get, [], [], [])
        for owner, name, replacement in _installed:
            # what getattr reads for a module, a class's own as verify() reads it (an object
            # without a __dict__: nothing, and the slow way decides)
            namespace = getattr(owner, "__dict__", None)
            _, spaces, names, replacements = proxies if isinstance(namespace, MappingProxyType) else dicts
            spaces.append(namespace if isinstance(namespace, (dict, MappingProxyType)) else {})
            names.append(name)
            replacements.append(replacement)
        _grouped[:] = [_generation[0], [dicts, proxies]]
    flattened: list[Lookup] = _grouped[1]
    return flattened


def dispatcher(real: Callable[..., Any], sim: Callable[..., Any]) -> Callable[..., Any]:
    """A function that calls ``sim(task, *args)`` inside a rank and ``real(*args)`` elsewhere."""

    @functools.wraps(real)
    def patched(*args: Any, **kwargs: Any) -> Any:
        try:
            task = TASKS.get(getcurrent())
        except RuntimeError:  # called from a finalizer while a greenlet is being torn down
            task = None
        if task is None or task.host_calls:
            return real(*args, **kwargs)
        return sim(task, *args, **kwargs)

    patched.__simfs_patched__ = True  # type: ignore[attr-defined]
    return patched


def bind_as(real: Callable[..., Any]) -> Callable[..., inspect.BoundArguments]:
    """What binds a call's arguments as ``real``'s own signature does, defaults applied: a stand-in
    for a library's entry point takes whatever the installed release takes (a keyword a later
    release adds passes through; a wrong one raises TypeError, as the real call would)."""
    signature = inspect.signature(real)

    def bind(*args: Any, **kwargs: Any) -> inspect.BoundArguments:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound
    return bind


def refusal(call: str, why: str, instead: str = "") -> Callable[..., Any]:
    """A ``sim`` for patch_function that refuses the call inside a rank with a BypassError."""

    def sim(task: Task, *args: Any, **kwargs: Any) -> Any:
        raise BypassError(call, why, instead)
    return sim


def patch_function(owner: Any, name: str, sim: Callable[..., Any], *, scan: bool = True) -> None:
    """Replace ``owner.name`` with a dispatcher to ``sim(task, *args, **kwargs)``."""
    real = getattr(owner, name)
    if getattr(real, "__simfs_patched__", False):
        return
    replacement = dispatcher(real, sim)
    patch(owner, name, replacement, scan=scan)
    if owner is os and getattr(posix, name, None) is real:
        patch(posix, name, replacement, scan=False)  # os and posix name the same functions


_seen = [-1, -1]  # len(sys.modules), len(_replacements) at the last scan


def scan_modules() -> None:
    """Replace by-name imports of patched originals in modules not scanned yet (nothing to do
    when no module and no patch came since the last scan)."""
    if not _replacements or _seen == [len(sys.modules), len(_replacements)]:
        return
    _seen[:] = [len(sys.modules), len(_replacements)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # merely looking at deprecated module attributes warns
        _scan()


def _scan() -> None:
    table = _replacements
    for name, module in list(sys.modules.items()):
        if not isinstance(module, ModuleType) or _scanned.get(name) == id(module):
            continue
        _scanned[name] = id(module)
        if name in sys.builtin_module_names or name == _OWN_PREFIX or name.startswith(_OWN_PREFIX + "."):
            continue  # C modules (e.g. _io.open, which importlib's open_code calls) keep the originals
        try:
            namespace = module.__dict__
        except AttributeError:
            continue
        for key, value in list(namespace.items()):
            hit = table.get(id(value))
            if hit is not None and hit[0] is value:
                namespace[key] = hit[1]
                _placed.setdefault(id(hit[1]), []).append((namespace, key))
            elif isinstance(value, FunctionType):
                _rebind_defaults(value)
            elif isinstance(value, type) and getattr(value, "__module__", None) == name:
                _rebind_class(value)


def _rebind_class(cls: type) -> None:
    """Originals kept as class attributes (Python 3.10's ``pathlib._NormalAccessor.stat =
    os.stat``) and as defaults of methods."""
    for key, member in list(vars(cls).items()):
        hit = _replacements.get(id(member))
        if hit is not None and hit[0] is member:
            try:
                setattr(cls, key, staticmethod(hit[1]) if callable(hit[1]) else hit[1])
            except (AttributeError, TypeError):
                pass  # a C type's attributes cannot change
        elif isinstance(member, FunctionType):
            _rebind_defaults(member)


def _rebind_defaults(fn: FunctionType) -> None:
    """Default arguments bound to originals (``def close(self, unlink=_os.unlink)``)."""
    defaults = fn.__defaults__
    if defaults and any(id(d) in _replacements for d in defaults):
        fn.__defaults__ = tuple(_swap(d) for d in defaults)
    kwdefaults = fn.__kwdefaults__
    if kwdefaults and any(id(d) in _replacements for d in kwdefaults.values()):
        fn.__kwdefaults__ = {k: _swap(d) for k, d in kwdefaults.items()}


def _swap(value: Any) -> Any:
    hit = _replacements.get(id(value))
    return hit[1] if hit is not None and hit[0] is value else value
