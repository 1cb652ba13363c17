"""The simulated store: a dict where each batch of operations applies atomically, plus the
registry of nodes blocked until keys appear (per key, so a write wakes only its own waiters)."""

from __future__ import annotations

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

    def apply(self, ops: tuple[Op, ...]) -> tuple[tuple[Reply, ...], list[tuple[str, int]]]:
        """Run one batch; return the replies and the waiters whose keys may now all exist."""
        self.ops += len(ops)
        self.batches += 1
        replies = run_ops(ops, self.data)
        woken: list[tuple[str, int]] = []
        for op in ops:
            if not isinstance(op, Get):
                woken += self._waiters.pop(op.key, ())
        return replies, woken

    def present(self, keys: tuple[str, ...]) -> bool:
        return all(key in self.data for key in keys)

    def wait_on(self, keys: tuple[str, ...], waiter: str, token: int) -> None:
        """Register ``waiter`` on every missing key of ``keys``; the last write wakes it."""
        for key in keys:
            if key not in self.data:
                self._waiters.setdefault(key, []).append((waiter, token))
