"""The built-in scenario library: each family of naive patterns next to the fix, registered
with the profiles where the real filesystem makes the naive one fail, one module each.
``scenarios.registry.load_library`` imports every module here (each registers its family's
scenarios as it is imported); a module whose name starts with an underscore holds what the
families share; the families import simfs's own checkpoint and coord, whatever lies first on
``sys.path`` (scenarios.importpath)."""

from ..importpath import require_own

require_own(("checkpoint", "coord"), "the built-in scenarios")
