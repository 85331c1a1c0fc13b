"""The rope behind every simulated file behaves exactly like a bytearray."""

from hypothesis import given
from hypothesis import strategies as st

from simfs.fs.rope import Rope

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 300), st.binary(max_size=120)),
        st.tuples(st.just("append"), st.binary(min_size=1, max_size=120)),
        st.tuples(st.just("truncate"), st.integers(0, 400)),
        st.tuples(st.just("copy")),
    ),
    max_size=40,
)


@given(_ops, st.integers(0, 400), st.integers(0, 200))
def test_rope_matches_bytearray(ops, offset, size):
    rope, model, snapshots = Rope(), bytearray(), []
    for op in ops:
        if op[0] == "write":
            _, at, data = op
            rope.write(at, data)
            if at > len(model):
                model.extend(bytes(at - len(model)))
            model[at:at + len(data)] = data
        elif op[0] == "append":
            rope.write(len(model), op[1])
            model.extend(op[1])
        elif op[0] == "truncate":
            rope.truncate(op[1])
            del model[op[1]:]
            model.extend(bytes(op[1] - len(model)))
        else:
            snapshots.append((rope.copy(), bytes(model)))
        assert len(rope) == len(model)
    assert rope.tobytes() == bytes(model)
    assert rope.slice(offset, size) == bytes(model[offset:offset + size])
    for copy, expected in snapshots:  # copies never see later writes
        assert copy.tobytes() == expected


def test_sequential_writes_share_the_writers_bytes():
    chunk = b"x" * 1000
    rope = Rope()
    for i in range(5):
        rope.write(i * len(chunk), chunk)
    assert rope.slice(990, 20) == b"x" * 20
    assert len(rope._chunks) == 5 and all(c is chunk for c in rope._chunks)
