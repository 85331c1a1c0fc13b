"""Tiles: any chunk shape is cut into tiles that cover it exactly, without overlap, stored back to
back, each within the byte budget (and over half of it unless the chunk fits whole); a resharded
load into any target box reads exactly the tiles that box overlaps, and rows -> columns on 2 ranks
reads what it needs; a flipped byte in any tile is reported by verify and by any load that reads
the tile, naming the file and the tile."""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import pytest
import torch
from _checkpoint_cases import DTYPES, Layout, TensorSpec, make_tensor, raw, reshard
from hypothesis import given, settings
from hypothesis import strategies as st

import checkpoint
import coord
from _coord_sim import cluster, ok
from checkpoint import Sharded, Split
from checkpoint.boxes import describe, intersect, volume
from checkpoint.tiles import count, overlapping, tile_shape

BUDGETS = st.sampled_from([64, 100, 256, 1000, 4096])


def _boxes(shape: tuple[int, ...]) -> st.SearchStrategy[tuple[tuple[int, ...], tuple[int, ...]]]:
    """A box inside ``shape`` (possibly empty)."""
    return st.tuples(*(st.integers(0, n).flatmap(lambda o, n=n: st.tuples(st.just(o), st.integers(0, n - o)))
                       for n in shape)).map(lambda dims: (tuple(o for o, _ in dims), tuple(s for _, s in dims)))


@given(st.lists(st.integers(0, 40), max_size=3).map(tuple), st.sampled_from([1, 2, 4, 8, 16]), BUDGETS)
def test_tiles_cover_any_chunk_exactly_within_the_budget(shape, itemsize, budget):
    tile = tile_shape(shape, itemsize, budget)
    fits = volume(shape) * itemsize <= budget
    assert (tile == shape) == fits
    if not fits:
        assert budget / 2 < volume(tile) * itemsize <= budget
        assert all(t & (t - 1) == 0 for t, n in zip(tile, shape) if t != n)  # cut extents: powers of two
    hits = np.zeros(shape, dtype=np.int64)
    position = 0
    listed = list(overlapping(shape, tile, ((0,) * len(shape), shape)))
    assert len(listed) == (count(shape, tile) if volume(shape) else 0)
    for expected_number, (number, (offsets, extent), start) in enumerate(listed):
        assert number == expected_number and start == position  # storage order, back to back
        assert all(o >= 0 and 1 <= e <= t and o + e <= n for o, e, t, n in zip(offsets, extent, tile, shape))
        hits[tuple(slice(o, o + e) for o, e in zip(offsets, extent))] += 1
        position += volume(extent)
    assert (hits == 1).all() and position == volume(shape)


@given(st.lists(st.integers(1, 30), min_size=1, max_size=3).map(tuple), BUDGETS, st.data())
def test_overlapping_lists_exactly_the_tiles_a_region_touches(shape, budget, data):
    tile = tile_shape(shape, 4, budget)
    region = data.draw(_boxes(shape), label="region")
    everything = list(overlapping(shape, tile, ((0,) * len(shape), shape)))
    expected = [t for t in everything if volume(region[1]) and intersect(t[1], region) is not None]
    assert list(overlapping(shape, tile, region)) == expected


@st.composite
def reshard_loads(draw):
    shape = tuple(draw(st.lists(st.integers(1, 24), min_size=1, max_size=3)))
    dtype = draw(st.sampled_from(DTYPES))
    budget = draw(st.sampled_from([64, 256, 1024]).filter(lambda b: b >= dtype.itemsize))
    return shape, dtype, budget, draw(_boxes(shape))


@given(reshard_loads())
@settings(max_examples=60, deadline=None)
def test_a_resharded_load_reads_exactly_the_tiles_its_box_overlaps(case):
    shape, dtype, budget, box = case
    full = make_tensor(dtype, shape, 5)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint.save_staged(checkpoint.stage({"t": full}), tmp, comm=coord.LocalComm(), tile_bytes=budget)
        (chunk,) = checkpoint.read_manifest(tmp).tensors["t"].chunks
        target = {"t": Sharded(torch.zeros(box[1], dtype=dtype), shape, box[0])}
        stats = checkpoint.load(target, tmp, comm=coord.LocalComm())
    touched = [extent for _, extent, _ in overlapping(shape, chunk.tile, ((0,) * len(shape), shape))
               if intersect(extent, box) is not None]
    assert stats.bytes_read == sum(volume(e[1]) for e in touched) * dtype.itemsize
    assert stats.bytes_needed == volume(box[1]) * dtype.itemsize
    assert raw(target["t"].local) == raw(full[tuple(slice(o, o + s) for o, s in zip(*box))])


def _rows_to_columns_job(spec: TensorSpec) -> dict:
    saved = Layout((2,), ((Split(0),),))
    loaded = Layout((2,), ((Split(1),),))
    return reshard(coord.get_comm(), [spec], saved, loaded, "/shared/ckpt/step-1")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_to_columns_on_two_ranks_reads_what_it_needs(dtype):
    """A (1024, 2048) tensor saved split by rows on 2 ranks, loaded split by columns: each rank
    needs half of every row; square tiles let it read no more than that."""
    spec = TensorSpec("w", dtype, (1024, 2048), 3)
    returns = ok(cluster("local", nodes=1, rpn=2).run(_rows_to_columns_job, spec), 2)
    for rank in (0, 1):
        stats = returns[rank]["stats"]
        assert stats.bytes_needed == 1024 * 1024 * dtype.itemsize
        assert stats.bytes_read <= 1.1 * stats.bytes_needed


STATE = {"a": make_tensor(torch.float32, (30, 50), 1), "b": make_tensor(torch.int16, (700,), 2),
         "c": make_tensor(torch.float64, (3, 4, 5), 3)}


@pytest.fixture(scope="module")
def tiled(tmp_path_factory):
    """STATE saved with 256-byte tiles: many tiles per tensor, in one file."""
    path = str(tmp_path_factory.mktemp("tiled") / "ck")
    checkpoint.save_staged(checkpoint.stage(STATE), path, comm=coord.LocalComm(), tile_bytes=256)
    return path


@given(st.data())
@settings(max_examples=40, deadline=None)
def test_a_flipped_byte_in_any_tile_is_reported_naming_the_file_and_tile(tiled, data):
    manifest = checkpoint.read_manifest(tiled)
    key = data.draw(st.sampled_from(sorted(manifest.tensors)), label="tensor")
    entry = manifest.tensors[key]
    (chunk,) = entry.chunks
    tiles = list(overlapping(chunk.shape, chunk.tile, ((0,) * len(chunk.shape), chunk.shape)))
    _, box, start = data.draw(st.sampled_from(tiles), label="tile")
    itemsize = STATE[key].element_size()
    position = chunk.offset + start * itemsize + data.draw(st.integers(0, volume(box[1]) * itemsize - 1), label="byte")
    target_box = data.draw(_boxes(entry.shape), label="target")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ck")
        shutil.copytree(tiled, path)
        with open(os.path.join(path, chunk.file), "r+b") as f:
            f.seek(position)
            byte = f.read(1)[0]
            f.seek(position)
            f.write(bytes([byte ^ 0x10]))
        message = rf"data file {chunk.file} is corrupt: the tile {describe(box)} of '{key}'".replace("[", r"\[")
        with pytest.raises(checkpoint.CorruptCheckpoint, match=message):
            checkpoint.verify(path)
        target = {key: Sharded(torch.zeros(target_box[1], dtype=STATE[key].dtype), entry.shape, target_box[0])}
        reads_it = volume(target_box[1]) > 0 and intersect(box, target_box) is not None
        if reads_it:
            with pytest.raises(checkpoint.CorruptCheckpoint, match=message):
                checkpoint.load(target, path, comm=coord.LocalComm())
        else:  # the damaged tile is not read: the load succeeds
            checkpoint.load(target, path, comm=coord.LocalComm())
