"""c10d's stores inside a rank process: a TCPStore (keys in the host) and a FileStore (a file of
the simulated filesystem) answer every sequence of operations alike, as c10d's own stores do, and
compare_set follows c10d's rules."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import simfs
from simfs.port.storeops import compare_and_swap

KEYS = st.sampled_from(["a", "b", "c"])
VALUES = st.binary(min_size=0, max_size=4)
OPS = st.one_of(
    st.tuples(st.just("set"), KEYS, VALUES),
    st.tuples(st.just("add"), KEYS, st.integers(-3, 3)),
    st.tuples(st.just("append"), KEYS, VALUES),
    st.tuples(st.just("compare_set"), KEYS, VALUES, VALUES),
    st.tuples(st.just("check"), KEYS),
    st.tuples(st.just("delete_key"), KEYS),
    st.tuples(st.just("num_keys")),
    st.tuples(st.just("get"), KEYS),
)


def apply_job(sequences: list[list[list[Any]]]) -> list[list[list[Any]]]:
    """Each sequence on a fresh TCPStore and a fresh FileStore: what each operation returned."""
    from datetime import timedelta

    import torch.distributed as dist

    def run(store: Any, ops: list[list[Any]]) -> list[Any]:
        out: list[Any] = []
        for name, *args in ops:
            try:
                if name == "check":
                    out.append(store.check([args[0]]))
                elif name == "get":
                    out.append(store.get(args[0]))
                elif name in ("set", "append"):
                    getattr(store, name)(args[0], bytes(args[1]))
                    out.append(None)
                elif name == "compare_set":
                    out.append(store.compare_set(args[0], bytes(args[1]), bytes(args[2])))
                elif name == "add":
                    out.append(store.add(args[0], args[1]))
                else:
                    out.append(getattr(store, name)(*args))
            except Exception as exc:  # noqa: BLE001 - compared between the stores
                out.append(type(exc).__name__)
        return out

    results = []
    for i, ops in enumerate(sequences):
        tcp = dist.TCPStore("localhost", 40000 + i, 1, True, timeout=timedelta(seconds=1))
        file = dist.FileStore(f"/shared/store{i}", 1)
        file.set_timeout(timedelta(seconds=1))
        results.append([run(tcp, ops), run(file, ops)])
    return results


@settings(max_examples=3, deadline=None)
@given(st.lists(st.lists(OPS, max_size=12), min_size=5, max_size=5))
def test_a_tcp_store_and_a_file_store_answer_every_sequence_alike(sequences: list[list[tuple[Any, ...]]]) -> None:
    plain = [[[*op[:1], *(list(a) if isinstance(a, bytes) else a for a in op[1:])] for op in ops] for ops in sequences]
    result = simfs.Cluster(nodes=1, ranks_per_node=1, torch_distributed="c10d").run(apply_job, plain)
    assert result.ok, result.summary()
    for tcp, file in result.returns[0]:
        assert tcp == file


@given(st.one_of(st.none(), VALUES), VALUES, VALUES)
def test_compare_set_follows_c10d(current: bytes | None, expected: bytes, desired: bytes) -> None:
    """c10d Store::compareSet: a missing key with an empty expected value is set; a missing key
    otherwise returns expected; a present key equal to expected is set; else it is returned."""
    swap, value = compare_and_swap(current, expected, desired)
    if current is None:
        assert (swap, value) == ((True, desired) if expected == b"" else (False, expected))
    elif current == expected:
        assert (swap, value) == (True, desired)
    else:
        assert (swap, value) == (False, current)
