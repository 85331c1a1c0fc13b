"""The built-in scenario library: each family of naive patterns next to the fix, registered
with the profiles where the real filesystem makes the naive one fail. Importing the package
registers every family (one module each)."""

from . import (
           ddp,
           decide,
           latest,
           locks,
           makedirs,
           rendezvous,
           replace,
           rotation,
           sharded,
           stacks,
           sync,
           torch_dcp,
           wait,
)

__all__ = ["ddp", "decide", "latest", "locks", "makedirs", "rendezvous", "replace", "rotation", "sharded", "stacks",
           "sync", "torch_dcp", "wait"]
