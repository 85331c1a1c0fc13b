"""gloo's collectives as each rank runs them: a program of point-to-point sends, receives and
waits per rank, transcribed from gloo's own loops (github.com/pytorch/gloo, gloo/*.cc), which
torch's ProcessGroupGloo calls for CPU tensors. simfs/runtime/meeting.py times them; nothing here
knows time.

A program is a list of ``(op, peer, nbytes)``: SEND and RECV post an operation to a peer (a group
index), WAIT_SEND and WAIT_RECV block until one more of the rank's posted sends (receives) has
completed, as gloo's ``UnboundBuffer::waitSend``/``waitRecv`` count completions."""

from __future__ import annotations

SEND, RECV, WAIT_SEND, WAIT_RECV = 0, 1, 2, 3
Op = tuple[int, int, int]

# gloo/allreduce.h and gloo/reduce.h: kMaxSegmentSize = 1024 * 1024 (the ring's segment bound)
MAX_SEGMENT = 1 << 20
# the element size the ring rounds its segments to: simfs sees a collective's bytes, not its
# dtype, so a byte count divisible by 4 is taken as float32 (training's gradients and counters)
_FLOAT32 = 4


def _element(nbytes: int) -> int:
    return _FLOAT32 if nbytes % _FLOAT32 == 0 else 1


def _round_up(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


def _log2ceil(value: int) -> int:
    """gloo/math.h log2ceil."""
    return 0 if value <= 1 else (value - 1).bit_length()


def barrier(n: int, me: int) -> list[Op]:
    """gloo/barrier.cc: a dissemination barrier (Hensgen, Finkel and Manber, 1988): in round
    ``d = 1, 2, 4 ...`` each rank receives from ``me - d`` and sends to ``me + d``."""
    ops: list[Op] = []
    d = 1
    while d < n:
        ops += [(RECV, (me - d) % n, 0), (SEND, (me + d) % n, 0), (WAIT_RECV, 0, 0), (WAIT_SEND, 0, 0)]
        d <<= 1
    return ops


def broadcast(n: int, me: int, root: int, nbytes: int) -> list[Op]:
    """gloo/broadcast.cc: a binomial tree from the root; a rank waits for its parent's data,
    then sends to its children, and waits for those sends last."""
    vrank = (me - root) % n
    dim = _log2ceil(n)
    mask = (1 << dim) - 1
    ops: list[Op] = []
    sends = 0
    for i in range(dim):
        mask ^= 1 << i
        if vrank & mask:
            continue
        vpeer = vrank ^ (1 << i)
        if vpeer >= n:
            continue
        peer = (vpeer + root) % n
        if not vrank & (1 << i):
            ops.append((SEND, peer, nbytes))
            sends += 1
        else:
            ops += [(RECV, peer, nbytes), (WAIT_RECV, 0, 0)]
    return ops + [(WAIT_SEND, 0, 0)] * sends


def _ring_phase(ops: list[Op], iterations: int, posting: int, offsets: list[tuple[int, int]],
                send_to: int, recv_from: int) -> None:
    """One of the ring's pipelined loops (gloo/allreduce.cc ``ring``, gloo/reduce.cc): iteration
    ``i`` waits for the operations of ``i - 2`` and posts its own while ``i < posting``;
    ``offsets[i]`` are its send and receive lengths (nothing is sent or waited where <= 0)."""
    for i in range(iterations):
        if i >= 2:
            send_len, recv_len = offsets[i - 2]
            if recv_len > 0:
                ops.append((WAIT_RECV, 0, 0))
            if send_len > 0:
                ops.append((WAIT_SEND, 0, 0))
        if i < posting:
            send_len, recv_len = offsets[i]
            if recv_len > 0:
                ops.append((RECV, recv_from, recv_len))
            if send_len > 0:
                ops.append((SEND, send_to, send_len))


def _lengths(total: int, segment: int, segments: int, send_start: int, recv_start: int,
             count: int) -> list[tuple[int, int]]:
    """The send and receive lengths of ``count`` iterations whose segments start at segment
    indices ``send_start + i`` and ``recv_start + i`` (modulo the buffer), as gloo computes them."""
    span = segments * segment
    out = []
    for i in range(count):
        send_off = ((send_start + i) * segment) % span
        recv_off = ((recv_start + i) * segment) % span
        out.append((min(segment, total - send_off), min(segment, total - recv_off)))
    return out


def allreduce(n: int, me: int, nbytes: int) -> list[Op]:
    """gloo/allreduce.cc ``ring`` (the algorithm ProcessGroupGloo's allreduce leaves unspecified):
    a reduce-scatter and then an all-gather around the ring, receiving from ``me + 1`` and
    sending to ``me - 1``, two segments in flight; an empty tensor returns at once."""
    if nbytes == 0 or n == 1:
        return []
    element = _element(nbytes)
    max_segment = element * max(1, MAX_SEGMENT // element)
    segments = _round_up(max(-(-nbytes // max_segment), 2 * n), n)
    per_rank = segments // n
    segment = _round_up(-(-nbytes // segments), element)
    iterations = segments - per_rank + 2
    ops: list[Op] = []
    send_to, recv_from = (me - 1) % n, (me + 1) % n
    scatter = _lengths(nbytes, segment, segments, (me + 1) * per_rank, (me + 2) * per_rank, iterations)
    _ring_phase(ops, iterations, segments - per_rank, scatter, send_to, recv_from)
    gather = _lengths(nbytes, segment, segments, me * per_rank, (me + 1) * per_rank, iterations)
    _ring_phase(ops, iterations, segments - per_rank, gather, send_to, recv_from)
    return ops


def reduce(n: int, me: int, root: int, nbytes: int) -> list[Op]:
    """gloo/reduce.cc: the ring's reduce-scatter, then every rank sends its reduced chunk to the root."""
    if nbytes == 0 or n == 1:
        return []
    element = _element(nbytes)
    max_segment = element * (MAX_SEGMENT // element)
    segment = _round_up(min(-(-nbytes // (2 * n)), max_segment), element)
    segments = _round_up(max(-(-nbytes // segment), 2 * n), n)
    per_rank = segments // n
    chunk = per_rank * segment
    ops: list[Op] = []
    scatter = _lengths(nbytes, segment, segments, (me + 1) * per_rank, (me + 2) * per_rank, segments)
    _ring_phase(ops, segments, segments - 2, scatter, (me - 1) % n, (me + 1) % n)
    if me == root:
        received = 0
        for peer in range(n):
            length = min(chunk, nbytes - peer * chunk)
            if peer != me and length > 0:
                ops.append((RECV, peer, length))
                received += 1
        ops += [(WAIT_RECV, 0, 0)] * received
    else:
        length = min(chunk, nbytes - me * chunk)
        if length > 0:
            ops += [(SEND, root, length), (WAIT_SEND, 0, 0)]
    return ops


def allgather(n: int, me: int, nbytes: int) -> list[Op]:
    """gloo/allgather.cc: a ring sending to ``me + 1`` and receiving from ``me - 1``, each rank's
    contribution in two halves, two operations in flight."""
    if n == 1 or nbytes == 0:
        return []
    halves = (nbytes // 2, nbytes - nbytes // 2)
    ops: list[Op] = []
    send_to, recv_from = (me + 1) % n, (me - 1) % n
    for i in range(2 * (n - 1)):
        if i >= 2:
            ops += [(WAIT_SEND, 0, 0), (WAIT_RECV, 0, 0)]
        ops += [(SEND, send_to, halves[i & 1]), (RECV, recv_from, halves[i & 1])]
    return ops + [(WAIT_SEND, 0, 0), (WAIT_RECV, 0, 0)] * 2


def gather(n: int, me: int, root: int, nbytes: int) -> list[Op]:
    """gloo/gather.cc: the root receives from every rank; every other rank sends to it."""
    if me != root:
        return [(SEND, root, nbytes), (WAIT_SEND, 0, 0)]
    peers = [peer for peer in range(n) if peer != me]
    return [(RECV, peer, nbytes) for peer in peers] + [(WAIT_RECV, 0, 0)] * len(peers)


def scatter(n: int, me: int, root: int, nbytes: int) -> list[Op]:
    """gloo/scatter.cc: the root sends every rank its part; every other rank receives it."""
    if me != root:
        return [(RECV, root, nbytes), (WAIT_RECV, 0, 0)]
    peers = [peer for peer in range(n) if peer != me]
    return [(SEND, peer, nbytes) for peer in peers] + [(WAIT_SEND, 0, 0)] * len(peers)


def alltoall(n: int, me: int, nbytes: int) -> list[Op]:
    """gloo/alltoall.cc: every rank sends a chunk to every other and receives one from each.
    Also how gloo's context connects a new group (gloo/rendezvous/context.cc connectFullMesh:
    every pair exchanges its address through the store), with empty messages."""
    ops: list[Op] = []
    chunk = nbytes // n if n else 0
    for i in range(1, n):
        ops += [(SEND, (me + i) % n, chunk), (RECV, (me - i) % n, chunk)]
    return ops + [(WAIT_SEND, 0, 0), (WAIT_RECV, 0, 0)] * (n - 1)


def monitored_barrier(n: int, me: int) -> list[Op]:
    """ProcessGroupGloo::monitoredBarrier: every rank sends to rank 0 and waits for its answer;
    rank 0 receives from all, then answers all."""
    if me != 0:
        return [(SEND, 0, 0), (WAIT_SEND, 0, 0), (RECV, 0, 0), (WAIT_RECV, 0, 0)]
    peers = range(1, n)
    return ([(RECV, p, 0) for p in peers] + [(WAIT_RECV, 0, 0)] * (n - 1)
            + [(SEND, p, 0) for p in peers] + [(WAIT_SEND, 0, 0)] * (n - 1))


_SIZE = 8  # torch's object collectives first exchange each object's size as one int64


def program(kind: str, n: int, me: int, root: int, nbytes: int) -> list[Op]:
    """Rank ``me``'s program for collective ``kind`` of ``nbytes`` (each rank's contribution) in a
    group of ``n`` with root index ``root`` (-1: none, read as 0 where the collective has one).
    torch's object collectives are two or three of these in a row (torch/distributed/
    distributed_c10d.py: sizes first, then the pickled bytes)."""
    r = max(root, 0)
    if kind == "barrier":
        return barrier(n, me)
    if kind == "monitored_barrier":
        return monitored_barrier(n, me)
    if kind == "broadcast":
        return broadcast(n, me, r, nbytes)
    if kind in ("all_reduce", "reduce_scatter", "reduce_scatter_tensor"):  # ProcessGroupGloo's
        return allreduce(n, me, nbytes)  # reduce_scatter_tensor_coalesced all-reduces a copy
    if kind == "reduce":
        return reduce(n, me, r, nbytes)
    if kind in ("all_gather", "all_gather_into_tensor"):
        return allgather(n, me, nbytes)
    if kind == "gather":
        return gather(n, me, r, nbytes)
    if kind == "scatter":
        return scatter(n, me, r, nbytes)
    if kind in ("all_to_all", "all_to_all_single"):
        return alltoall(n, me, nbytes)
    if kind == "broadcast_object_list":
        return broadcast(n, me, r, _SIZE) + broadcast(n, me, r, nbytes)
    if kind == "all_gather_object":
        return allgather(n, me, _SIZE) + allgather(n, me, nbytes)
    if kind == "gather_object":
        return allgather(n, me, _SIZE) + gather(n, me, r, nbytes)
    if kind == "scatter_object_list":
        return broadcast(n, me, r, _SIZE) + scatter(n, me, r, nbytes) + scatter(n, me, r, _SIZE)
    return alltoall(n, me, 0)  # init_process_group, new_group: the context's full-mesh connection
