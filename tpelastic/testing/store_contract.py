"""Conformance suite for KeyValueStore adapters (see tpelastic.adapters.ports).

Two parts, both taking a *store factory*: a zero-argument callable returning a new, empty,
open store (a fresh namespace of a shared server is fine). Checks close what they open.

* ``check_*`` functions, one contract clause each; ``run_all_checks(factory)`` runs them all.
* ``store_comparison_machine(factory)``: a hypothesis ``RuleBasedStateMachine`` class that
  runs random get/set/add/set_if_absent/compare_and_set/delete/wait_for(0) sequences against
  the store and against ``MemoryStore`` (the model, assumed right) and fails on the first
  differing answer.

Usage in a third party's tests::

    from tpelastic.testing import store_contract as contract

    @pytest.mark.parametrize("check", contract.ALL_CHECKS)
    def test_contract(check):
        check(my_store_factory)

    TestMyStore = contract.store_comparison_machine(my_store_factory).TestCase
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import KeyValueStore
from tpelastic.adapters.stores.errors import StoreUnavailable
from tpelastic.adapters.stores.memory import MemoryStore

StoreFactory = Callable[[], KeyValueStore]

# Values that trip naive adapters: empty, NUL, bytes that are not UTF-8, escape-like prefixes.
TRICKY_VALUES = (b"", b"\x00", b"\xff", b"\xff\xfe", b"\xff\xfe\xff\xfe", b"\xff\xfex", b"0")


class ContractViolation(AssertionError):
    """A store broke a clause of the KeyValueStore contract; the message names the clause."""


def _expect(condition: bool, clause: str, detail: object = "") -> None:
    if not condition:
        raise ContractViolation(f"{clause}: {detail}" if detail != "" else clause)


@contextmanager
def _opened(factory: StoreFactory) -> Iterator[KeyValueStore]:
    store = factory()
    try:
        yield store
    finally:
        store.close()


def check_get_absent_is_none(factory: StoreFactory) -> None:
    """get of a key never written is None, at once."""
    with _opened(factory) as store:
        started = SYSTEM_CLOCK.now()
        got = store.get("absent")
        _expect(got is None, "get(absent) must be None", got)
        _expect(SYSTEM_CLOCK.now() - started < 1.0, "get(absent) must not wait for the key")


def check_set_then_get(factory: StoreFactory) -> None:
    """set then get returns the same bytes, for tricky and binary values; set overwrites."""
    with _opened(factory) as store:
        for index, value in enumerate((*TRICKY_VALUES, bytes(range(256)), b"x" * 100_000)):
            store.set(f"k{index}", value)
            got = store.get(f"k{index}")
            _expect(got == value, "get must return what set wrote", f"{value[:20]!r} -> {got!r}")
        store.set("k0", b"second")
        _expect(store.get("k0") == b"second", "set must overwrite")


def check_keys_are_independent(factory: StoreFactory) -> None:
    """Keys that share a prefix, contain '/' or non-ASCII text are distinct keys."""
    with _opened(factory) as store:
        keys = ("a", "a/b", "a/", "ab", "ключ", "a b")
        for index, key in enumerate(keys):
            store.set(key, str(index).encode())
        for index, key in enumerate(keys):
            _expect(store.get(key) == str(index).encode(), "keys must be independent", key)


def check_empty_value_is_present(factory: StoreFactory) -> None:
    """b"" is a value: the key exists, CAS with expected None fails, with b"" succeeds."""
    with _opened(factory) as store:
        store.set("e", b"")
        _expect(store.get("e") == b"", "get must return b'' for an empty value")
        _expect(store.wait_for(["e"], 0), "a key holding b'' exists for wait_for")
        result = store.compare_and_set("e", None, b"x")
        _expect(result == (False, b""), "CAS(expected=None) on an empty value must fail", result)
        result = store.compare_and_set("e", b"", b"x")
        _expect(result == (True, b"x"), "CAS(expected=b'') on an empty value must swap", result)
        result = store.compare_and_set("absent", b"", b"x")
        _expect(result == (False, None), "CAS(expected=b'') on an absent key must fail", result)
        _expect(store.get("absent") is None, "a failed CAS must not create the key")


def check_add_counts(factory: StoreFactory) -> None:
    """add counts from 0, accepts negative amounts, and stores ASCII decimal."""
    with _opened(factory) as store:
        _expect(store.add("n", 5) == 5, "add on an absent key counts from 0")
        _expect(store.add("n", -7) == -2, "add accepts negative amounts")
        _expect(store.add("n", 0) == -2, "add(0) reads the counter")
        _expect(store.get("n") == b"-2", "a counter holds ASCII decimal", store.get("n"))


def check_set_if_absent(factory: StoreFactory) -> None:
    """set_if_absent creates once and then reports the value already there."""
    with _opened(factory) as store:
        _expect(store.set_if_absent("s", b"first") == (True, b"first"), "first caller creates")
        result = store.set_if_absent("s", b"second")
        _expect(result == (False, b"first"), "later callers see the first value", result)
        _expect(store.set_if_absent("t", b"") == (True, b""), "an empty value can be created")
        _expect(store.set_if_absent("t", b"y") == (False, b""), "and then it is present")


def check_compare_and_set(factory: StoreFactory) -> None:
    """CAS swaps only on a match and returns the value after the call."""
    with _opened(factory) as store:
        _expect(store.compare_and_set("c", None, b"1") == (True, b"1"), "CAS(None) creates")
        _expect(store.compare_and_set("c", None, b"2") == (False, b"1"), "CAS(None) on present")
        _expect(store.compare_and_set("c", b"9", b"2") == (False, b"1"), "CAS on mismatch")
        _expect(store.compare_and_set("c", b"1", b"2") == (True, b"2"), "CAS on match")
        _expect(store.get("c") == b"2", "CAS must write")
        result = store.compare_and_set("gone", b"1", b"2")
        _expect(result == (False, None), "CAS on an absent key with bytes expected", result)


def check_delete(factory: StoreFactory) -> None:
    """delete makes a key absent and is idempotent."""
    with _opened(factory) as store:
        store.set("d", b"1")
        store.delete("d")
        _expect(store.get("d") is None, "a deleted key is absent")
        store.delete("d")
        store.delete("never-there")
        _expect(store.compare_and_set("d", None, b"2") == (True, b"2"), "deleted key re-creates")


def check_wait_for_present_and_timeout(factory: StoreFactory) -> None:
    """wait_for answers True at once when keys exist and False after its timeout otherwise."""
    with _opened(factory) as store:
        store.set("w1", b"1")
        store.set("w2", b"")
        _expect(store.wait_for(["w1", "w2"], 5.0), "wait_for on present keys must be True")
        _expect(store.wait_for([], 0), "wait_for on no keys must be True")
        _expect(store.wait_for(["w1"], float("inf")), "an infinite timeout is allowed")
        _expect(not store.wait_for(["w1", "missing"], 0), "one missing key: False")
        started = SYSTEM_CLOCK.now()
        _expect(not store.wait_for(["missing"], 0.3), "wait_for must time out")
        spent = SYSTEM_CLOCK.now() - started
        _expect(0.25 <= spent < 2.0, "wait_for must honour its timeout", f"{spent:.3f} s")


def check_wait_for_wakes(factory: StoreFactory) -> None:
    """A key set by another thread wakes a waiter promptly, not at the timeout."""
    with _opened(factory) as store:
        outcome: dict[str, Any] = {}

        def waiter() -> None:
            started = SYSTEM_CLOCK.now()
            outcome["found"] = store.wait_for(["late", "early"], 10.0)
            outcome["spent"] = SYSTEM_CLOCK.now() - started

        store.set("early", b"1")
        thread = threading.Thread(target=waiter, daemon=True)
        thread.start()
        SYSTEM_CLOCK.sleep(0.2)  # let the waiter block before the key appears
        store.set("late", b"1")
        thread.join(10.0)
        _expect(outcome.get("found") is True, "wait_for must see a key set meanwhile", outcome)
        _expect(outcome["spent"] < 2.0, "wait_for must wake promptly", f"{outcome['spent']:.3f}")


def check_close(factory: StoreFactory) -> None:
    """close is idempotent and later calls raise StoreUnavailable."""
    store = factory()
    store.close()
    store.close()
    for name, call in (
        ("get", lambda: store.get("k")),
        ("set", lambda: store.set("k", b"1")),
        ("wait_for", lambda: store.wait_for(["k"], 0)),
        ("wait_for([])", lambda: store.wait_for([], 0)),
    ):
        try:
            call()
        except StoreUnavailable:
            continue
        raise ContractViolation(f"{name} after close must raise StoreUnavailable")


ALL_CHECKS: tuple[Callable[[StoreFactory], None], ...] = (
    check_get_absent_is_none,
    check_set_then_get,
    check_keys_are_independent,
    check_empty_value_is_present,
    check_add_counts,
    check_set_if_absent,
    check_compare_and_set,
    check_delete,
    check_wait_for_present_and_timeout,
    check_wait_for_wakes,
    check_close,
)


def run_all_checks(factory: StoreFactory) -> None:
    """Run every ``check_*``; raises ContractViolation at the first broken clause."""
    for check in ALL_CHECKS:
        check(factory)


_KEYS = ("k0", "k1", "k0/x", "ключ")
_COUNTERS = ("c0", "c1")


def store_comparison_machine(factory: StoreFactory) -> type[Any]:
    """A hypothesis state machine comparing ``factory()`` stores with MemoryStore.

    Each example opens one store from ``factory`` and one MemoryStore, applies the same random
    operations to both and fails with ``ContractViolation`` at the first differing answer (and
    at teardown if any key's final value differs). Counter keys get only ``add``, so the
    unspecified "add on a non-counter" never occurs. Run it as
    ``store_comparison_machine(f).TestCase`` (a unittest case) or through
    ``hypothesis.stateful.run_state_machine_as_test``.
    """
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, rule

    keys = st.sampled_from(_KEYS)
    counters = st.sampled_from(_COUNTERS)
    values = st.one_of(st.sampled_from(TRICKY_VALUES), st.binary(max_size=8))

    class StoreComparison(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.real = factory()
            self.model = MemoryStore()

        def _same(self, call: str, real: object, model: object) -> None:
            if real != model:
                raise ContractViolation(f"{call}: store answered {real!r}, model {model!r}")

        @rule(key=keys)
        def get(self, key: str) -> None:
            self._same(f"get({key!r})", self.real.get(key), self.model.get(key))

        @rule(key=keys, value=values)
        def set(self, key: str, value: bytes) -> None:
            self.real.set(key, value)
            self.model.set(key, value)

        @rule(key=counters, amount=st.integers(-3, 3))
        def add(self, key: str, amount: int) -> None:
            self._same(
                f"add({key!r}, {amount})", self.real.add(key, amount), self.model.add(key, amount)
            )

        @rule(key=keys, value=values)
        def set_if_absent(self, key: str, value: bytes) -> None:
            call = f"set_if_absent({key!r}, {value!r})"
            self._same(
                call, self.real.set_if_absent(key, value), self.model.set_if_absent(key, value)
            )

        @rule(key=keys, value=values, data=st.data())
        def compare_and_set(self, key: str, value: bytes, data: Any) -> None:
            # Draw the current value often, so swaps happen as well as refusals.
            current = self.model.get(key)
            expected = data.draw(st.one_of(st.just(current), st.none(), values), label="expected")
            call = f"compare_and_set({key!r}, {expected!r}, {value!r})"
            real = self.real.compare_and_set(key, expected, value)
            self._same(call, real, self.model.compare_and_set(key, expected, value))

        @rule(key=st.one_of(keys, counters))
        def delete(self, key: str) -> None:
            self.real.delete(key)
            self.model.delete(key)

        @rule(wanted=st.lists(st.one_of(keys, counters), max_size=3))
        def wait_for_now(self, wanted: list[str]) -> None:
            call = f"wait_for({wanted!r}, 0)"
            self._same(call, self.real.wait_for(wanted, 0), self.model.wait_for(wanted, 0))

        def teardown(self) -> None:
            try:
                for key in (*_KEYS, *_COUNTERS):
                    self._same(f"final get({key!r})", self.real.get(key), self.model.get(key))
            finally:
                self.real.close()
                self.model.close()

    return StoreComparison


__all__ = [
    "ALL_CHECKS",
    "TRICKY_VALUES",
    "ContractViolation",
    "StoreFactory",
    "check_add_counts",
    "check_close",
    "check_compare_and_set",
    "check_delete",
    "check_empty_value_is_present",
    "check_get_absent_is_none",
    "check_keys_are_independent",
    "check_set_if_absent",
    "check_set_then_get",
    "check_wait_for_present_and_timeout",
    "check_wait_for_wakes",
    "run_all_checks",
    "store_comparison_machine",
]
