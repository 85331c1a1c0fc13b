"""checkpoint reads torch.distributed.checkpoint (DCP) checkpoints: written by DCP's
FileSystemWriter in one process and on 2 real gloo ranks (sharded DTensors), loaded bit-exact by
checkpoint.load into the same and other layouts and world sizes, with a warning that nothing is
checksummed; DCP's pickled metadata is unpickled through an allowlist only. Model + optimizer
state dicts from get_state_dict round-trip through checkpoint.save/load and set_state_dict."""

from __future__ import annotations

import os
import pickle
import warnings

import pytest
import torch
import torch.distributed.checkpoint as dcp

import checkpoint
from _procs import run_procs


def _dcp_save(sd: dict, path: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no process group, saving in a single process"
        dcp.save(sd, checkpoint_id=path, no_dist=True)


class Opaque:
    def __init__(self, x: int) -> None:
        self.x = x


def test_one_process_checkpoint_loads_bit_exact_with_a_warning(tmp_path):
    sd = {"w": torch.randn(5, 3), "h": torch.arange(12, dtype=torch.bfloat16).reshape(3, 4).t(),
          "n": {"step": 7, "lr": 0.1, "betas": (0.9, 0.99), "params": ["a", "b"], "name": "adam", "none": None},
          "layers": [torch.ones(2, dtype=torch.int64), torch.tensor(3.5, dtype=torch.float64)],
          "flags": torch.tensor([True, False])}
    _dcp_save(sd, str(tmp_path))
    target = {"w": torch.zeros(5, 3), "h": torch.zeros(4, 3, dtype=torch.bfloat16),
              "n": {"step": 0, "lr": 0.0, "betas": (0, 0), "params": ["x", "y"], "name": "", "none": 1},
              "layers": [torch.zeros(2, dtype=torch.int64), torch.tensor(0.0, dtype=torch.float64)],
              "flags": torch.zeros(2, dtype=torch.bool)}
    with pytest.warns(checkpoint.DcpCheckpointWarning, match="no checksums"):
        stats = checkpoint.load(target, tmp_path)
    assert torch.equal(target["w"], sd["w"]) and torch.equal(target["h"], sd["h"])
    assert torch.equal(target["layers"][0], sd["layers"][0]) and torch.equal(target["layers"][1], sd["layers"][1])
    assert torch.equal(target["flags"], sd["flags"])
    assert target["n"] == sd["n"]
    assert stats.bytes_needed == 5 * 3 * 4 + 12 * 2 + 2 * 8 + 8 + 2 and stats.files == 1


def test_an_object_needs_allow_pickle(tmp_path):
    _dcp_save({"obj": Opaque(4), "w": torch.ones(2)}, str(tmp_path))
    target = {"obj": None, "w": torch.zeros(2)}
    with pytest.warns(checkpoint.DcpCheckpointWarning), pytest.raises(checkpoint.StateDictError, match="allow_pickle"):
        checkpoint.load(target, tmp_path)
    with pytest.warns(checkpoint.DcpCheckpointWarning):
        checkpoint.load(target, tmp_path, allow_pickle=True)
    assert isinstance(target["obj"], Opaque) and target["obj"].x == 4 and torch.equal(target["w"], torch.ones(2))


def test_mismatches_and_missing_keys_are_named(tmp_path):
    _dcp_save({"w": torch.ones(2, 3)}, str(tmp_path))
    with pytest.warns(checkpoint.DcpCheckpointWarning):
        with pytest.raises(checkpoint.StateDictError, match=r"'w'.*shape \[2, 3\]"):
            checkpoint.load({"w": torch.zeros(3, 2)}, tmp_path)
        with pytest.raises(checkpoint.StateDictError, match="float32"):
            checkpoint.load({"w": torch.zeros(2, 3, dtype=torch.float64)}, tmp_path)
        with pytest.raises(checkpoint.StateDictError, match="'v' is not in the checkpoint"):
            checkpoint.load({"v": torch.zeros(1)}, tmp_path)


def test_truncated_data_file_is_reported(tmp_path):
    _dcp_save({"w": torch.ones(100)}, str(tmp_path))
    (data,) = [p for p in os.listdir(tmp_path) if p.endswith(".distcp")]
    os.truncate(tmp_path / data, 100)
    with pytest.warns(checkpoint.DcpCheckpointWarning), pytest.raises(checkpoint.CorruptCheckpoint, match=data):
        checkpoint.load({"w": torch.zeros(100)}, tmp_path)


class _Evil:
    def __reduce__(self):
        return os.mkdir, (self.path,)


def test_metadata_with_foreign_globals_is_refused_without_running_them(tmp_path):
    marker = tmp_path / "pwned"
    evil = _Evil()
    evil.path = str(marker)
    (tmp_path / ".metadata").write_bytes(pickle.dumps(evil))
    # (pickle names os.mkdir by its __module__: posix, or os once simfs has patched it in this process)
    with pytest.raises(checkpoint.ManifestError, match=r"refusing to unpickle (posix|os)\.mkdir"):
        checkpoint.load({"w": torch.zeros(1)}, tmp_path)
    assert not marker.exists()
    (tmp_path / ".metadata").write_bytes(b"\x80\x05garbage")
    with pytest.raises(checkpoint.ManifestError, match="unreadable DCP metadata"):
        checkpoint.load({"w": torch.zeros(1)}, tmp_path)


def test_no_manifest_and_no_dcp_metadata_is_not_found(tmp_path):
    with pytest.raises(checkpoint.CheckpointNotFound):
        checkpoint.load({"w": torch.zeros(1)}, tmp_path)


FULL_W = torch.arange(8 * 6, dtype=torch.float32).reshape(8, 6)
FULL_V = torch.arange(5 * 4, dtype=torch.int64).reshape(5, 4) * 3


def _ranks(base: str) -> dict:
    """On 2 gloo ranks: DCP saves sharded DTensors; checkpoint.load reads them into other layouts;
    a model + optimizer state from get_state_dict round-trips through checkpoint.save/load."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (2,))
    sd = {"w": distribute_tensor(FULL_W, mesh, [Shard(0)]), "v": distribute_tensor(FULL_V, mesh, [Shard(1)]),
          "r": distribute_tensor(torch.ones(3), mesh, [Replicate()]), "step": 11}
    dcp.save(sd, checkpoint_id=f"{base}/dcp")
    target = {"w": distribute_tensor(torch.zeros(8, 6), mesh, [Shard(1)]),
              "v": distribute_tensor(torch.zeros(5, 4, dtype=torch.int64), mesh, [Replicate()]),
              "r": distribute_tensor(torch.zeros(3), mesh, [Shard(0)]), "step": 0}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stats = checkpoint.load(target, f"{base}/dcp")
    resharded = {k: target[k].full_tensor() for k in ("w", "v", "r")} | {"step": target["step"]}
    return {"resharded": resharded, "warned": any(issubclass(w.category, checkpoint.DcpCheckpointWarning)
                                                  for w in caught),
            "needed": stats.bytes_needed, "optimizer": _optimizer_round_trip(f"{base}/ours")}


def _model_and_optimizer(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, betas=(0.8, 0.95))
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    return model, opt


def _optimizer_round_trip(path: str) -> bool:
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model, opt = _model_and_optimizer(0)
    model_sd, optim_sd = get_state_dict(model, opt)
    checkpoint.save({"model": model_sd, "optim": optim_sd}, path)
    other, other_opt = _model_and_optimizer(1)
    other_opt.param_groups[0]["lr"] = 0.5
    target_model, target_optim = get_state_dict(other, other_opt)
    checkpoint.load({"model": target_model, "optim": target_optim}, path)
    set_state_dict(other, other_opt, model_state_dict=target_model, optim_state_dict=target_optim)
    same_params = all(torch.equal(a, b) for a, b in zip(model.parameters(), other.parameters()))
    states = zip(opt.state_dict()["state"].values(), other_opt.state_dict()["state"].values())
    same_state = all(torch.equal(a[k], b[k]) for a, b in states for k in a)
    return same_params and same_state and other_opt.param_groups[0]["lr"] == 0.01 \
        and other_opt.param_groups[0]["betas"] == (0.8, 0.95)


def test_two_rank_dcp_checkpoint_reshards_into_other_layouts_and_world_sizes(tmp_path):
    results = run_procs(_ranks, 2, str(tmp_path))
    for result in results:
        assert result["warned"] and result["optimizer"]
        assert torch.equal(result["resharded"]["w"], FULL_W) and torch.equal(result["resharded"]["v"], FULL_V)
        assert torch.equal(result["resharded"]["r"], torch.ones(3)) and result["resharded"]["step"] == 11
    assert [r["needed"] for r in results] == [8 * 3 * 4 + 5 * 4 * 8 + 2 * 4, 8 * 3 * 4 + 5 * 4 * 8 + 1 * 4]
    one = {"w": torch.zeros(8, 6), "v": torch.zeros(5, 4, dtype=torch.int64), "r": torch.zeros(3), "step": 0}
    with pytest.warns(checkpoint.DcpCheckpointWarning):
        checkpoint.load(one, tmp_path / "dcp")  # world size 1, plain tensors
    assert torch.equal(one["w"], FULL_W) and torch.equal(one["v"], FULL_V) and one["step"] == 11
    part = {"w": checkpoint.Sharded(torch.zeros(3, 4), (8, 6), (4, 1))}
    with pytest.warns(checkpoint.DcpCheckpointWarning):
        stats = checkpoint.load(part, tmp_path / "dcp")
    assert torch.equal(part["w"].local, FULL_W[4:7, 1:5]) and stats.bytes_needed == 3 * 4 * 4


def test_get_state_dict_round_trips_in_one_process(tmp_path):
    assert _optimizer_round_trip(str(tmp_path / "ours"))
