"""checkpoint in one process: bit-exact round trips over Hypothesis-drawn nested state dicts
(every dtype, 0-dim and empty shapes, numpy arrays, JSON values); pickle only when allowed on
both sides; clear errors for state dicts that do not match the checkpoint; overwrites."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
import torch
from _checkpoint_cases import assert_same, blank, make_tensor, state_dicts
from hypothesis import given, settings
from hypothesis import strategies as st

import checkpoint


@given(state_dicts)
@settings(max_examples=60)
def test_round_trip_is_bit_exact(sd):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ckpt")
        checkpoint.save(sd, path)
        target = blank(sd)
        checkpoint.load(target, path)
        assert_same(sd, target)
        report = checkpoint.verify(path)
        assert report.files == len(checkpoint.read_manifest(path).files)


def test_special_values_and_types_survive():
    sd = {"f": [float("nan"), float("-inf"), -0.0, 5e-324], "i": [2**80, -(2**64)], "betas": (0.9, 0.999),
          "s": "é\n", "none": None, "flag": True,
          "big_endian": np.arange(6, dtype=">f4").reshape(2, 3), "conj": torch.tensor([1 + 2j]).conj(),
          "strided": torch.arange(12).reshape(3, 4).t(), "param": torch.nn.Parameter(torch.ones(2))}
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint.save(sd, tmp)
        target = blank(sd) | {"big_endian": np.zeros((2, 3), np.float32), "conj": torch.zeros(1, dtype=torch.complex64),
                              "strided": torch.zeros(4, 3, dtype=torch.int64),
                              "param": torch.nn.Parameter(torch.zeros(2))}
        checkpoint.load(target, tmp)
    assert_same(sd["f"], target["f"])
    assert target["i"] == [2**80, -(2**64)] and target["betas"] == (0.9, 0.999) and target["s"] == "é\n"
    assert target["none"] is None and target["flag"] is True
    assert target["big_endian"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert target["conj"].item() == 1 - 2j
    assert torch.equal(target["strided"], sd["strided"])
    assert torch.equal(target["param"].detach(), torch.ones(2)) and target["param"].requires_grad


class Opaque:
    def __init__(self, x):
        self.x = x

    def __eq__(self, other):
        return isinstance(other, Opaque) and other.x == self.x


def test_objects_need_allow_pickle_on_save_and_load(tmp_path):
    sd = {"model": {"w": torch.ones(2)}, "extra": {"obj": Opaque(3)}}
    with pytest.raises(checkpoint.SaveError, match=r"'extra.obj'.*allow_pickle=True") as info:
        checkpoint.save(sd, tmp_path / "a")
    assert info.value.failures.keys() == {0}
    assert not checkpoint.is_committed(tmp_path / "a")
    checkpoint.save(sd, tmp_path / "a", allow_pickle=True)
    target = {"model": {"w": torch.zeros(2)}, "extra": {"obj": None}}
    with pytest.raises(checkpoint.StateDictError, match=r"'extra.obj' was saved with pickle; pass allow_pickle=True"):
        checkpoint.load(target, tmp_path / "a")
    checkpoint.load(target, tmp_path / "a", allow_pickle=True)
    assert target["extra"]["obj"] == Opaque(3) and torch.equal(target["model"]["w"], torch.ones(2))


def test_unsupported_numpy_dtype_is_pickled_only_when_allowed(tmp_path):
    sd = {"names": np.array(["a", "bc"])}
    with pytest.raises(checkpoint.SaveError, match=r"'names'.*numpy\.ndarray.*allow_pickle"):
        checkpoint.save(sd, tmp_path)
    checkpoint.save(sd, tmp_path, allow_pickle=True)
    target = {"names": None}
    checkpoint.load(target, tmp_path, allow_pickle=True)
    assert target["names"].tolist() == ["a", "bc"]


def test_bad_state_dicts_are_refused_with_the_key(tmp_path):
    with pytest.raises(checkpoint.SaveError, match=r"'a\.b'"):
        checkpoint.save({"a.b": 1, "a": {"b": 2}}, tmp_path)
    with pytest.raises(checkpoint.SaveError, match="keys must be str or int"):
        checkpoint.save({("a",): 1}, tmp_path)
    with pytest.raises(checkpoint.SaveError, match=r"sparse.*cannot be saved"):
        checkpoint.save({"s": torch.eye(2).to_sparse()}, tmp_path)
    assert os.listdir(tmp_path) == []


def test_a_path_that_is_a_file_is_refused_as_a_checkpoint_error(tmp_path):
    (tmp_path / "f").write_bytes(b"keep")
    with pytest.raises(checkpoint.CheckpointError, match=r"save of .*/f: cannot make the checkpoint directory"):
        checkpoint.save({"w": torch.ones(2)}, tmp_path / "f")
    assert (tmp_path / "f").read_bytes() == b"keep" and os.listdir(tmp_path) == ["f"]


@pytest.fixture()
def saved(tmp_path):
    sd = {"w": make_tensor(torch.float32, (4, 3), 1), "b": make_tensor(torch.bfloat16, (3,), 2), "step": 7}
    checkpoint.save(sd, tmp_path / "ck")
    return sd, str(tmp_path / "ck")


@pytest.mark.parametrize(("target", "message"), [
    ({"w": torch.zeros(4, 4)}, r"'w': the checkpoint holds shape \[4, 3\], the state dict \[4, 4\]"),
    ({"w": torch.zeros(4, 3, dtype=torch.float64)}, r"'w': the checkpoint holds float32, the state dict float64"),
    ({"missing": torch.zeros(1)}, r"'missing' is not in the checkpoint"),
    ({"step": torch.zeros(1)}, r"'step' was saved as a JSON value, the state dict holds a tensor"),
    ({"w": 3}, r"'w' was saved as a tensor, the state dict holds a int"),
    ({"w": np.zeros((4, 3), np.float32)[::-1]}, r"'w': cannot load into this numpy array in place"),
    ({"b": np.zeros(3, np.float32)}, r"'b': the checkpoint holds bfloat16, the state dict float32"),
])
def test_mismatched_targets_name_path_key_and_problem(saved, target, message):
    _, path = saved
    before = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in target.items()}
    with pytest.raises(checkpoint.StateDictError, match=message) as info:
        checkpoint.load(target, path)
    assert path in str(info.value)
    for k, v in target.items():  # nothing was touched: every target is checked before any read
        assert_same(before[k], v)


def test_read_only_array_is_refused(saved):
    _, path = saved
    w = np.zeros((4, 3), np.float32)
    w.flags.writeable = False
    with pytest.raises(checkpoint.StateDictError, match="'w': the numpy array is read-only"):
        checkpoint.load({"w": w}, path)


def test_partial_targets_and_missing_checkpoints(saved, tmp_path):
    sd, path = saved
    target = {"b": torch.zeros(3, dtype=torch.bfloat16)}  # a subset of the keys is fine
    stats = checkpoint.load(target, path)
    assert torch.equal(target["b"], sd["b"]) and stats.bytes_needed == 6 and stats.files == 1
    with pytest.raises(checkpoint.CheckpointNotFound, match=r"no committed checkpoint at .*nowhere"):
        checkpoint.load(target, tmp_path / "nowhere")
    assert checkpoint.is_committed(path) and not checkpoint.is_committed(tmp_path / "nowhere")


@given(st.lists(st.integers(1, 3000), min_size=1, max_size=3))
@settings(max_examples=10)
def test_overwrite_replaces_data_and_removes_old_files(sizes):
    with tempfile.TemporaryDirectory() as tmp:
        versions = [{"t": torch.full((n,), float(i))} for i, n in enumerate(sizes)]
        for sd in versions:
            checkpoint.save(sd, tmp)
            manifest = checkpoint.read_manifest(tmp)
            assert sorted(os.listdir(tmp)) == sorted([checkpoint.MANIFEST_NAME, *manifest.files])
        target = {"t": torch.zeros(sizes[-1])}
        checkpoint.load(target, tmp)
        assert torch.equal(target["t"], versions[-1]["t"])


def test_leftovers_of_failed_saves_are_removed_by_the_next_save(saved):
    sd, path = saved
    stray = os.path.join(path, "ab12-r3-0.bin")
    open(stray, "wb").close()
    unrelated = os.path.join(path, "notes.txt")
    open(unrelated, "w").close()
    checkpoint.save(sd, path)
    assert not os.path.exists(stray) and os.path.exists(unrelated)
