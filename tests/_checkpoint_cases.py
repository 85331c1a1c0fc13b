"""What the checkpoint tests share: deterministic tensors of every dtype, Hypothesis strategies
for state dicts and layouts (a mesh and per-tensor Split/Broadcast placements), the state dict a
rank holds under a layout, and bit-exact comparison."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from hypothesis import strategies as st

import checkpoint
from checkpoint import Broadcast, Sharded, Split

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32,
          torch.int64, torch.uint8, torch.bool, torch.complex64)
NUMPY_DTYPES = (np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_, np.float16)


def make_tensor(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Random bits of ``dtype`` (NaN payloads and all): equal only if copied bit for bit."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    raw = torch.randint(0, 256, (math.prod(shape) * dtype.itemsize,), dtype=torch.uint8, generator=g)
    return raw.view(dtype).reshape(shape)


def raw(x: torch.Tensor | np.ndarray) -> bytes:
    """The row-major bytes of a tensor or array."""
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x).tobytes()
    return x.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def assert_same(a: object, b: object, where: str = "") -> None:
    """Bit-exact equality of two state dicts (tensors by dtype, shape and bytes; floats by bits)."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}.{i}")
    elif isinstance(a, Sharded):
        assert (a.global_shape, a.offsets) == (b.global_shape, b.offsets), f"{where}: another part"
        assert_same(a.local, b.local, f"{where}.local")
    elif isinstance(a, (torch.Tensor, np.ndarray)):
        assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape), f"{where}: {a.dtype}{a.shape} vs {b.shape}"
        assert raw(a) == raw(b), f"{where}: bytes differ"
    elif isinstance(a, float):
        assert a.hex() == b.hex() or (math.isnan(a) and math.isnan(b)), f"{where}: {a!r} != {b!r}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def blank(x: object) -> object:
    """A load target shaped like ``x``: zeroed tensors and arrays, None for every value."""
    if isinstance(x, dict):
        return {k: blank(v) for k, v in x.items()}
    if isinstance(x, list):
        return [blank(v) for v in x]
    if isinstance(x, torch.Tensor):
        return torch.zeros_like(x)
    if isinstance(x, np.ndarray):
        return np.zeros_like(x)
    return None


# -- single-process state dicts ---------------------------------------------------------------

shapes = st.lists(st.integers(0, 5), max_size=3).map(tuple)
tensors = st.builds(make_tensor, st.sampled_from(DTYPES), shapes, st.integers(0, 2**31))
arrays = st.builds(lambda dtype, shape, seed: np.random.default_rng(seed).integers(0, 100, shape).astype(dtype),
                   st.sampled_from(NUMPY_DTYPES), shapes, st.integers(0, 2**31))
scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8)
values = scalars | st.tuples(scalars, scalars)
keys = st.text(alphabet="abcxyz_-", min_size=1, max_size=4)
state_dicts = st.dictionaries(keys, st.recursive(
    tensors | arrays | values,
    lambda children: st.dictionaries(keys, children, max_size=3) | st.lists(children, max_size=3),
    max_leaves=12), max_size=5)


# -- layouts over ranks -------------------------------------------------------------------------

@dataclass(frozen=True)
class TensorSpec:
    key: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    seed: int

    def full(self) -> torch.Tensor:
        return make_tensor(self.dtype, self.shape, self.seed)


@dataclass(frozen=True)
class Layout:
    """A mesh of ``mesh`` ranks (world = its product) and each tensor's placements on it."""

    mesh: tuple[int, ...]
    placements: tuple[tuple[Split | Broadcast, ...], ...]  # per tensor, one per mesh dimension

    @property
    def world(self) -> int:
        return math.prod(self.mesh)

    def coords(self, rank: int) -> tuple[int, ...]:
        return tuple(int(c) for c in np.unravel_index(rank, self.mesh))

    def state_dict(self, specs: list[TensorSpec], rank: int, blank_: bool = False) -> dict:
        """What ``rank`` holds: a plain tensor where every placement is Broadcast, else a
        Sharded part (zeroed with ``blank_``, as a load target)."""
        out: dict = {}
        for spec, placements in zip(specs, self.placements):
            full = torch.zeros(spec.shape, dtype=spec.dtype) if blank_ else spec.full()
            if all(isinstance(p, Broadcast) for p in placements):
                out[spec.key] = full
            else:
                out[spec.key] = Sharded.of(full.clone() if blank_ else full, placements, self.mesh, self.coords(rank))
        return out


def tensor_specs(max_tensors: int = 4) -> st.SearchStrategy[list[TensorSpec]]:
    spec = st.builds(lambda dtype, shape, seed: (dtype, shape, seed), st.sampled_from(DTYPES),
                     st.lists(st.integers(0, 9), max_size=3).map(tuple), st.integers(0, 2**31))
    return st.lists(spec, min_size=1, max_size=max_tensors).map(
        lambda items: [TensorSpec(f"t{i}", *item) for i, item in enumerate(items)])


@st.composite
def layouts(draw: st.DrawFn, specs: list[TensorSpec], world: int) -> Layout:
    """A 1-D or 2-D mesh of ``world`` ranks and random Split/Broadcast placements."""
    factors = [a for a in range(1, world + 1) if world % a == 0]
    a = draw(st.sampled_from(factors))
    mesh = (world,) if a in (1, world) else (a, world // a)
    placements = []
    for spec in specs:
        options = [Broadcast()] + [Split(d) for d in range(len(spec.shape))]
        placements.append(tuple(draw(st.sampled_from(options)) for _ in mesh))
    return Layout(mesh, tuple(placements))



def _group(comm, size: int):
    """A communicator over ranks 0..size-1 (None elsewhere); a collective on ``comm``."""
    return comm if size == comm.world_size else comm.subgroup(list(range(size)))


def reshard(comm, specs: list[TensorSpec], saved: Layout, loaded: Layout, path: str) -> dict:
    """Rank code: save with ``saved`` on ranks 0..saved.world-1, load into ``loaded`` on ranks
    0..loaded.world-1 and check every part bit for bit. Returns the load's stats (loading
    ranks) and the manifest and verify report (rank 0)."""
    save_comm, load_comm = _group(comm, saved.world), _group(comm, loaded.world)
    if save_comm is not None:
        checkpoint.save(saved.state_dict(specs, comm.rank), path, comm=save_comm)
    comm.barrier()
    out: dict = {}
    if load_comm is not None:
        target = loaded.state_dict(specs, comm.rank, blank_=True)
        out["stats"] = checkpoint.load(target, path, comm=load_comm)
        expected = loaded.state_dict(specs, comm.rank)
        assert_same({k: v.local if isinstance(v, Sharded) else v for k, v in expected.items()},
                    {k: v.local if isinstance(v, Sharded) else v for k, v in target.items()}, f"rank {comm.rank}")
    if comm.rank == 0:
        out["manifest"] = checkpoint.read_manifest(path)
        out["verify"] = checkpoint.verify(path)
    return out
