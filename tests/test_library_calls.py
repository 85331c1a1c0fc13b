"""What the training stacks call inside a rank, beyond torch.distributed: datetime keeps its C
types (pandas, pyarrow and numpy check them) with virtual now(); ctypes.util.find_library answers as
on the host; safetensors and pyarrow act on simulated paths with their installed signatures."""

from __future__ import annotations

import ctypes.util
import datetime
import os
import subprocess
import sys
import time
from typing import Any

import pytest

import simfs
from simfs.errors import BypassError


def _one(profile: str = "nfs") -> simfs.Cluster:
    return simfs.Cluster(nodes=1, ranks_per_node=1, profile=profile)


def _returns(job: Any, *args: Any) -> Any:
    result = _one().run(job, *args)
    assert result.ok, result.summary() + "\n".join(result.tracebacks.values())
    return result.returns[0]


def _clocks() -> dict[str, Any]:
    import time

    class Stamp(datetime.datetime):
        pass

    return {"class": datetime.datetime is datetime.datetime.now().__class__,
            "module": (datetime.datetime.__module__, datetime.date.__module__),
            "subclass": type(Stamp.now()).__name__, "now": datetime.datetime.now().timestamp(),
            "utcnow": datetime.datetime.utcnow().replace(tzinfo=datetime.timezone.utc).timestamp(),
            "today": datetime.date.today().isoformat(), "time": time.time()}


def test_datetime_keeps_its_c_types_and_reads_the_virtual_clock() -> None:
    seen = _returns(_clocks)
    assert seen["class"] and seen["module"] == ("datetime", "datetime")
    assert seen["subclass"] == "Stamp"  # a subclass's now() makes the subclass, as the real one does
    assert abs(seen["now"] - seen["time"]) < 1 and abs(seen["utcnow"] - seen["time"]) < 1
    assert seen["today"] == datetime.date.fromtimestamp(seen["time"]).isoformat()
    assert abs(datetime.datetime.now().timestamp() - seen["time"]) > 3600  # virtual, not the host's clock
    assert type(datetime.datetime.now()) is datetime.datetime  # the host's own after the run


def _pandas_now() -> tuple[float, float, str]:
    import time

    import pandas

    return pandas.Timestamp.now().timestamp(), time.time(), type(pandas.Timestamp.now()).__name__


def test_pandas_imports_in_a_rank_and_its_timestamps_read_the_virtual_clock() -> None:
    pytest.importorskip("pandas")
    stamp, now, kind = _returns(_pandas_now)
    assert kind == "Timestamp" and abs(stamp - now) < 1


def _find(name: str) -> str | None:
    return ctypes.util.find_library(name)


def test_find_library_answers_in_a_rank_as_on_the_host() -> None:
    for name in ("c", "pthread", "m", "no-such-library-here"):
        assert _returns(_find, name) == ctypes.util.find_library(name)


def _safetensors_roundtrip(path: str) -> dict[str, Any]:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    save_file({"b": torch.arange(6.0).reshape(2, 3), "a": torch.ones(2)}, path, metadata={"step": "7"})
    loaded = load_file(path, device="cpu")
    with safe_open(path, framework="pt") as f:
        opened = {"keys": f.keys(), "metadata": f.metadata(), "slice": f.get_slice("b")[:, 1].tolist(),
                  "shape": f.get_slice("b").get_shape(), "dtype": f.get_slice("b").get_dtype()}
    try:
        safe_open(path, framework="pt", no_such_keyword=True)
    except TypeError as exc:
        opened["wrong keyword"] = str(exc)
    return {"loaded": {k: v.tolist() for k, v in loaded.items()}, **opened}


def test_safetensors_saves_and_opens_simulated_files_with_the_installed_signature() -> None:
    pytest.importorskip("safetensors")
    seen = _returns(_safetensors_roundtrip, "/shared/t.safetensors")
    assert seen["loaded"] == {"a": [1.0, 1.0], "b": [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]}
    assert seen["keys"] == ["a", "b"] and seen["metadata"] == {"step": "7"}
    assert seen["slice"] == [1.0, 4.0] and seen["shape"] == [2, 3] and seen["dtype"] == "F32"
    assert "no_such_keyword" in seen["wrong keyword"]
    assert not os.path.exists("/shared/t.safetensors")


def _safetensors_backend(path: str) -> list[float]:
    """0.8's ``backend`` keyword, which simfs's earlier stand-in refused."""
    import inspect

    import torch
    from safetensors.torch import load_file, save_file

    save_file({"x": torch.ones(3)}, path)
    if "backend" not in inspect.signature(load_file).parameters:
        return load_file(path)["x"].tolist()
    return load_file(path, backend="pread")["x"].tolist()


def test_safetensors_load_file_takes_the_installed_release_s_keywords() -> None:
    pytest.importorskip("safetensors")
    assert _returns(_safetensors_backend, "/shared/x.safetensors") == [1.0, 1.0, 1.0]


def _arrow(root: str) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(root)
    table = pa.table({"n": list(range(5))})
    pq.write_table(table, f"{root}/t.parquet")
    with pa.output_stream(f"{root}/s.arrow.gz") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    with pa.input_stream(f"{root}/s.arrow.gz") as source:
        streamed = pa.ipc.open_stream(source).read_all()
    with open(f"{root}/s.arrow.gz", "rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
    with pa.OSFile(f"{root}/f.arrow", "w") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    mapped = pa.ipc.open_file(pa.memory_map(f"{root}/f.arrow")).read_all()
    import pyarrow.fs as pafs

    local = pafs.LocalFileSystem()  # one the job makes itself: its operations act on simulated paths
    with local.open_output_stream(f"{root}/own.bin") as sink:
        sink.write(b"own")
    with local.open_input_file(f"{root}/own.bin") as source:
        own = source.read()
    refused = ""
    try:
        pa.memory_map(f"{root}/f.arrow", "r+")
    except BypassError as exc:
        refused = str(exc)
    return {"parquet": pq.read_table(f"{root}/t.parquet")["n"].to_pylist(), "gzipped": gzipped,
            "streamed": streamed["n"].to_pylist(), "mapped": mapped["n"].to_pylist(), "refused": refused,
            "listed": sorted(os.listdir(root)), "own": own}


def test_pyarrow_reads_and_writes_simulated_paths() -> None:
    pytest.importorskip("pyarrow")
    seen = _returns(_arrow, "/shared/arrow")
    assert seen["parquet"] == seen["streamed"] == seen["mapped"] == [0, 1, 2, 3, 4]
    assert seen["gzipped"]  # the extension's compression, as pyarrow detects it for a path
    assert "pyarrow.memory_map(mode='r+')" in seen["refused"]
    assert seen["listed"] == ["f.arrow", "own.bin", "s.arrow.gz", "t.parquet"] and seen["own"] == b"own"
    assert not os.path.exists("/shared/arrow")


def _maps(root: str) -> dict[str, Any]:
    import mmap

    import numpy as np
    import torch

    os.makedirs(root)
    np.save(f"{root}/a.npy", np.arange(4))
    copied = np.load(f"{root}/a.npy", mmap_mode="c")
    copied[0] = 99  # a private map: the file keeps its 0
    seen: dict[str, Any] = {"r": np.load(f"{root}/a.npy", mmap_mode="r").tolist(), "c": copied.tolist(),
                            "after c": np.load(f"{root}/a.npy").tolist()}
    with open(f"{root}/b.bin", "wb") as f:
        f.write(b"0123456789")
    with open(f"{root}/b.bin", "rb") as f, mmap.mmap(f.fileno(), 4, access=mmap.ACCESS_READ, offset=0) as m:
        seen["mapped"] = m[:]
        try:
            m[0:1] = b"X"
        except TypeError as exc:
            seen["read-only"] = str(exc)
    try:
        np.memmap(f"{root}/b.bin", dtype="uint8", mode="r+")
    except BypassError as exc:
        seen["shared"] = exc.call
    torch.save({"w": torch.arange(3.0)}, f"{root}/t.pt")
    seen["torch"] = torch.load(f"{root}/t.pt", mmap=True)["w"].tolist()
    source, target = os.open(f"{root}/b.bin", os.O_RDONLY), os.open(f"{root}/c.bin", os.O_WRONLY | os.O_CREAT)
    seen["sent"] = os.sendfile(target, source, 2, 5), os.lseek(source, 0, os.SEEK_CUR)
    os.close(source)
    os.close(target)
    with open(f"{root}/c.bin", "rb") as f:
        seen["copy"] = f.read()
    return seen


def test_private_maps_of_simulated_files_copy_them_and_shared_writable_maps_are_refused() -> None:
    seen = _returns(_maps, "/shared/maps")
    assert seen["r"] == [0, 1, 2, 3] and seen["c"] == [99, 1, 2, 3] and seen["after c"] == [0, 1, 2, 3]
    assert seen["mapped"] == b"0123" and seen["read-only"] == "mmap can't modify a readonly memory map."
    assert seen["shared"] == "mmap.mmap(shared, writable)"
    assert seen["torch"] == [0.0, 1.0, 2.0]
    assert seen["sent"] == (5, 0) and seen["copy"] == b"23456"  # from the offset, the position unmoved
    assert not os.path.exists("/shared/maps")


def _every_keyword(root: str) -> list[str]:
    """Each routed pyarrow entry point called with every parameter of the installed release's own
    signature, by keyword: a stand-in that trails a new release raises TypeError here."""
    import inspect

    import pyarrow as pa

    from simfs.rank.intercept.registry import original

    os.makedirs(root)
    with open(f"{root}/in.bin", "wb") as f:
        f.write(b"data")
    given = {"input_stream": {"source": f"{root}/in.bin"}, "output_stream": {"source": f"{root}/out.bin"},
             "memory_map": {"path": f"{root}/in.bin"}}
    called = []
    for name, required in given.items():
        parameters = inspect.signature(original(pa, name)).parameters.values()
        with getattr(pa, name)(**{p.name: required.get(p.name, p.default) for p in parameters}):
            called.append(name)
    return called


def test_routed_pyarrow_entry_points_take_every_keyword_of_the_installed_release() -> None:
    pytest.importorskip("pyarrow")
    assert _returns(_every_keyword, "/shared/keywords") == ["input_stream", "output_stream", "memory_map"]


def _uses_the_patched_calls(root: str) -> bool:
    """A rank that goes through what this module's patches replace."""
    _maps(root)
    _arrow(f"{root}/arrow")
    _safetensors_roundtrip(f"{root}/t.safetensors")
    return _find("c") is not None and datetime.datetime.now().year < 2030


def test_the_host_after_runs_calls_the_real_machine(tmp_path: Any) -> None:
    """After runs that went through every call the stacks' interception patches (on greenlet ranks
    in this process, so the patches are installed here), the host's own calls act on the real
    machine and the real clock, as before."""
    for module in ("pyarrow", "safetensors", "pandas"):
        pytest.importorskip(module)
    import mmap

    import numpy as np
    import pandas
    import pyarrow as pa
    import pyarrow.fs as pafs
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    greenlets = simfs.Cluster(nodes=1, ranks_per_node=1, carrier="greenlet", isolate=False)
    assert greenlets.run(_uses_the_patched_calls, "/shared/host-check").ok
    assert simfs.Cluster(nodes=1, ranks_per_node=1).run(_uses_the_patched_calls, "/shared/host-check").ok

    class Stamp(datetime.datetime):
        pass

    assert abs(datetime.datetime.now().timestamp() - time.time()) < 5
    assert type(Stamp.now()) is Stamp and datetime.datetime.utcnow().year >= 2024
    assert abs(pandas.Timestamp.now().timestamp() - time.time()) < 5
    fresh = subprocess.run([sys.executable, "-c", "import ctypes.util; print(ctypes.util.find_library('c'))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert str(ctypes.util.find_library("c")) == fresh
    real = tmp_path / "real.bin"
    real.write_bytes(b"0123456789")
    with open(real, "r+b") as f, mmap.mmap(f.fileno(), 0) as shared:  # a shared writable map of a real file
        shared[0:1] = b"X"
    assert real.read_bytes() == b"X123456789"
    np.save(tmp_path / "a.npy", np.arange(3))
    assert np.load(tmp_path / "a.npy", mmap_mode="r+").tolist() == [0, 1, 2]
    source, target = os.open(real, os.O_RDONLY), os.open(tmp_path / "copy.bin", os.O_WRONLY | os.O_CREAT)
    assert os.sendfile(target, source, 0, 10) == 10
    os.close(source)
    os.close(target)
    torch.save({"w": torch.ones(2)}, tmp_path / "t.pt")
    assert torch.load(tmp_path / "t.pt", mmap=True)["w"].tolist() == [1.0, 1.0]
    save_file({"x": torch.zeros(2)}, tmp_path / "x.safetensors")
    assert load_file(tmp_path / "x.safetensors")["x"].tolist() == [0.0, 0.0]
    with safe_open(tmp_path / "x.safetensors", framework="pt") as f:
        assert type(f).__module__ == "builtins"  # the Rust class itself, not the rank's stand-in
    with pa.output_stream(str(tmp_path / "s.bin")) as sink:
        sink.write(b"arrow")
    assert pa.memory_map(str(tmp_path / "s.bin"), "r+").read() == b"arrow"
    assert pafs.LocalFileSystem().get_file_info(str(tmp_path / "s.bin")).size == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy", "copy.bin", "real.bin", "s.bin", "t.pt",
                                                          "x.safetensors"]
    assert not os.path.exists("/shared/host-check")
