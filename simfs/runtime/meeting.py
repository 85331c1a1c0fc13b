"""When each rank of a collective leaves it: gloo's programs (algorithms.py) run from each rank's
arrival, every message moved as gloo's TCP transport moves it (gloo/transport/tcp/pair.cc).

A send waits for the receiver's notice that its receive is posted ("sends cannot execute until
the remote side is ready to receive": ``Pair::send`` queues it until ``handleRemotePendingRecv``);
the data then goes out behind the pair's earlier messages and the send is complete once written
(bytes over the bandwidth), the receive once it arrived, one latency later. A wait returns at its
rank's next completion (gloo's waits count completions). A rank's exit is known as soon as its
program's waits are: a broadcast's root leaves once its children's receives are posted, before
ranks further down the tree arrived; a barrier's ranks each when the last arrival reached them."""

from __future__ import annotations

from .algorithms import RECV, SEND, WAIT_RECV, Op

Pair = tuple[int, int]  # (sender, receiver), group indices


class Meeting:
    """One collective's programs in progress: ``arrive`` a rank at its time, learn whose exit
    times are then known (``exits``)."""

    def __init__(self, programs: list[list[Op]], latency: float, bandwidth: float) -> None:
        n = len(programs)
        self._programs = programs
        self._latency = latency
        self._bandwidth = bandwidth
        self._pc = [0] * n
        self._time: list[float | None] = [None] * n  # None: not arrived yet
        self._now = 0.0  # no rank that has not arrived arrives before this
        self._sends: dict[Pair, list[tuple[float, int]]] = {}  # posted sends: (time, bytes), in order
        self._recvs: dict[Pair, list[float]] = {}  # posted receives' times, in order
        self._starts: dict[Pair, list[float]] = {}  # when each message of a pair began to move
        self._waiting: list[tuple[list[tuple[Pair, int]], list[tuple[Pair, int]]]] = [([], []) for _ in range(n)]
        self.exits: dict[int, float] = {}

    def arrive(self, me: int, at: float) -> list[int]:
        """Rank ``me`` arrives at virtual time ``at`` (no later arrival is earlier); the ranks
        whose exit became known, in index order."""
        self._time[me] = at
        self._now = max(self._now, at)
        known = set(self.exits)
        progressed = True
        while progressed:
            progressed = False
            for rank, time in enumerate(self._time):
                if time is not None and rank not in self.exits and self._run(rank):
                    progressed = True
        return sorted(set(self.exits) - known)

    # -- one rank's program ------------------------------------------------------------------------
    def _run(self, rank: int) -> bool:
        """Run the rank's program as far as what is known allows; True if it moved."""
        program = self._programs[rank]
        sends, recvs = self._waiting[rank]
        moved = False
        while self._pc[rank] < len(program):
            op, peer, nbytes = program[self._pc[rank]]
            time = self._time[rank]
            assert time is not None  # only arrived ranks run
            if op == SEND:
                pair = (rank, peer)
                posted = self._sends.setdefault(pair, [])
                sends.append((pair, len(posted)))
                posted.append((time, nbytes))
            elif op == RECV:
                pair = (peer, rank)
                posted_recvs = self._recvs.setdefault(pair, [])
                recvs.append((pair, len(posted_recvs)))
                posted_recvs.append(time)
            else:
                done = self._next_completion(sends if op != WAIT_RECV else recvs, op == WAIT_RECV)
                if done is None:
                    return moved
                self._time[rank] = max(time, done)
            self._pc[rank] += 1
            moved = True
        self.exits[rank] = self._time[rank] or 0.0
        return True

    def _next_completion(self, outstanding: list[tuple[Pair, int]], receiving: bool) -> float | None:
        """The earliest completion among the outstanding operations, taken off the list, once no
        operation still unknown could complete before it (None: not known yet)."""
        best: tuple[float, int] | None = None
        bound = float("inf")
        for i, (pair, index) in enumerate(outstanding):
            done = self._completion(pair, index, receiving)
            if done is None:
                bound = min(bound, self._bound(pair, index, receiving))
            elif best is None or done < best[0]:
                best = (done, i)
        if best is None or best[0] > bound:
            return None
        del outstanding[best[1]]
        return best[0]

    # -- messages ----------------------------------------------------------------------------------
    def _start(self, pair: Pair, index: int) -> float | None:
        """When message ``index`` of ``pair`` begins to move: its send posted, the receiver's
        notice back at the sender, the pair's earlier message written."""
        starts = self._starts.setdefault(pair, [])
        if index < len(starts):
            return starts[index]
        sends, recvs = self._sends.get(pair, []), self._recvs.get(pair, [])
        while len(starts) <= index:
            k = len(starts)
            if k >= len(sends) or k >= len(recvs):
                return None
            begin = max(sends[k][0], recvs[k] + self._latency)
            if k:
                begin = max(begin, starts[k - 1] + sends[k - 1][1] / self._bandwidth)
            starts.append(begin)
        return starts[index]

    def _completion(self, pair: Pair, index: int, receiving: bool) -> float | None:
        begin = self._start(pair, index)
        if begin is None:
            return None
        written = begin + self._sends[pair][index][1] / self._bandwidth
        return written + self._latency if receiving else written

    def _bound(self, pair: Pair, index: int, receiving: bool) -> float:
        """The earliest an operation whose partner has not posted yet can complete: that partner
        posts no earlier than it is now (or than now, if it has not arrived)."""
        sender, receiver = pair
        sends, recvs = self._sends.get(pair, []), self._recvs.get(pair, [])
        if receiving:
            send_at = sends[index][0] if index < len(sends) else self._earliest(sender)
            return max(send_at, recvs[index] + self._latency) + self._latency
        recv_at = recvs[index] if index < len(recvs) else self._earliest(receiver)
        return max(sends[index][0], recv_at + self._latency) + sends[index][1] / self._bandwidth

    def _earliest(self, rank: int) -> float:
        time = self._time[rank]
        return self._now if time is None else time
