"""The simulated store: a dict where each batch of operations applies atomically, plus the
registry of nodes blocked until keys appear (per key, so a write wakes only its own waiters),
and the *held* waits of training members (one list per key, handed back whole when the key is
written, so waking 10,000 members is one action, not 10,000)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from attrs import define, field

from tpelastic.core.rendezvous.ops import Get, Op, Reply, run_ops


@define
class SimStore:
    """Key/value data, operation counters and waiters. Availability is decided by the caller."""

    data: dict[str, bytes] = field(factory=dict)
    ops: int = 0
    batches: int = 0
    failed_batches: int = 0
    # key -> (waiter, token) pairs blocked on it; a token that no longer matches is stale.
    _waiters: dict[str, list[tuple[str, int]]] = field(factory=dict, alias="_waiters")
    # key -> the held waits on it, in the order they were placed; popped whole by a write.
    _held: dict[str, list[object]] = field(factory=dict, alias="_held")
    # Held waits whose key a batch wrote: (key, waits), for the driver to wake in one action.
    fired: list[tuple[str, list[object]]] = field(factory=list)

    def apply(self, ops: tuple[Op, ...]) -> tuple[tuple[Reply, ...], list[tuple[str, int]]]:
        """Run one batch; return the replies and the waiters whose keys may now all exist.

        Held waits on a written key move to :attr:`fired` (the caller takes them)."""
        self.ops += len(ops)
        self.batches += 1
        replies = run_ops(ops, self.data)
        woken: list[tuple[str, int]] = []
        waiters, held_waits = self._waiters, self._held
        for op in ops:
            if not isinstance(op, Get):
                woken += waiters.pop(op.key, ())
                if held_waits:
                    held = held_waits.pop(op.key, None)
                    if held is not None:
                        self.fired.append((op.key, held))
        return replies, woken

    def hold(self, key: str, waiters: Sequence[object], requests: int | None = None) -> bool:
        """Place held waits on ``key`` (kept until the key is written, or :meth:`release`).

        ``requests``: how many store requests this counts as (default one per waiter). A real
        member places one wait on several keys at once, so only one of its keys counts.

        Returns:
            False (nothing placed) when the key exists already: the caller wakes them itself.
        """
        # A held wait is one request to a real store (a wait on the key): count each as one.
        count = len(waiters) if requests is None else requests
        self.ops += count
        self.batches += count
        if key in self.data:
            return False
        held = self._held.get(key)
        if held is None:
            self._held[key] = list(waiters)
        else:
            held += waiters
        return True

    def release(self, keys: list[str]) -> None:
        """Forget the held waits on ``keys`` (their round is over: nobody waits any more)."""
        for key in keys:
            self._held.pop(key, None)

    def prune(self, key: str, keep: Callable[[object], bool]) -> None:
        """Drop the held waits on ``key`` that ``keep`` rejects (keeping their order)."""
        held = self._held.get(key)
        if held is not None:
            kept = [waiter for waiter in held if keep(waiter)]
            if kept:
                self._held[key] = kept
            else:
                del self._held[key]

    def present(self, keys: tuple[str, ...]) -> bool:
        return all(key in self.data for key in keys)

    def wait_on(self, keys: tuple[str, ...], waiter: str, token: int) -> None:
        """Register ``waiter`` on every missing key of ``keys``; the last write wakes it."""
        for key in keys:
            if key not in self.data:
                self._waiters.setdefault(key, []).append((waiter, token))
