"""CyclingIterator, get_env_variable_or_raise, get_socket_with_port and macros."""

from __future__ import annotations

import socket

import pytest

from tpelastic.data import (
    CyclingIterator,
    MissingEnvironmentVariable,
    get_env_variable_or_raise,
    get_socket_with_port,
    macros,
)


def test_cycling_iterator_runs_from_start_epoch_to_epoch_n_minus_1():
    seen_epochs = []

    def generator(epoch):
        seen_epochs.append(epoch)
        return [f"{epoch}.{i}" for i in range(2)]

    it = CyclingIterator(n=8, generator_fn=generator, start_epoch=5)
    assert seen_epochs == [5]  # the first epoch's iterable is made at construction, as torch's
    assert list(it) == ["5.0", "5.1", "6.0", "6.1", "7.0", "7.1"]
    assert seen_epochs == [5, 6, 7]
    assert it.epoch == 7
    with pytest.raises(StopIteration):
        next(it)


def test_cycling_iterator_skips_empty_epochs_and_always_runs_the_first():
    assert list(CyclingIterator(3, lambda e: [] if e == 1 else [e])) == [0, 2]
    assert list(CyclingIterator(0, lambda e: [e])) == [0]
    assert list(CyclingIterator(2, lambda e: [e], start_epoch=4)) == [4]
    with pytest.raises(ValueError, match="n .* must be >= 0"):
        CyclingIterator(-1, lambda e: [e])


def test_env_variable_present_empty_and_missing(monkeypatch):
    monkeypatch.setenv("TPELASTIC_TEST_VAR", "x")
    assert get_env_variable_or_raise("TPELASTIC_TEST_VAR") == "x"
    monkeypatch.setenv("TPELASTIC_TEST_VAR", "")
    assert get_env_variable_or_raise(env_name="TPELASTIC_TEST_VAR") == ""
    monkeypatch.delenv("TPELASTIC_TEST_VAR")
    with pytest.raises(MissingEnvironmentVariable) as info:
        get_env_variable_or_raise("TPELASTIC_TEST_VAR")
    assert str(info.value).startswith("environment variable TPELASTIC_TEST_VAR is required")
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, KeyError)


def _connects(sock: socket.socket) -> bool:
    host, port = sock.getsockname()[:2]
    with socket.create_connection((host, port), timeout=5):
        return True


def test_socket_with_port_ipv4():
    sock = get_socket_with_port("127.0.0.1")
    try:
        assert sock.family == socket.AF_INET
        assert sock.getsockname()[1] > 0
        assert _connects(sock)
    finally:
        sock.close()


def test_socket_with_port_ipv6():
    if not socket.has_ipv6:
        pytest.skip("no IPv6 in this Python build")
    try:
        sock = get_socket_with_port("::1")
    except OSError as exc:  # a container without IPv6 loopback: nothing to test here
        pytest.skip(f"IPv6 loopback unavailable: {exc}")
    try:
        assert sock.family == socket.AF_INET6
        assert _connects(sock)
    finally:
        sock.close()


def test_socket_with_port_bad_host_is_one_clear_error():
    with pytest.raises(OSError, match="cannot resolve 'no.such.host.invalid'"):
        get_socket_with_port("no.such.host.invalid")


def test_two_sockets_get_two_ports():
    a, b = get_socket_with_port("127.0.0.1"), get_socket_with_port("127.0.0.1")
    try:
        assert a.getsockname()[1] != b.getsockname()[1]
    finally:
        a.close()
        b.close()


def test_macros_fill_local_rank_and_others():
    args = ["--rank", macros.local_rank, "--out=/x/${local_rank}/${world_size}", 7]
    assert macros.substitute(args, 3, {"world_size": 8}) == ["--rank", "3", "--out=/x/3/8", 7]
    assert macros.substitute(["${local_rank}"], 1) == ["1"]


def test_macros_leave_unknown_placeholders_as_torch_does():
    assert macros.local_rank == "${local_rank}"
    assert macros.substitute(["${HOME}", "$local_rank", "$$x", "${rank}"], 0) == [
        "${HOME}",
        "0",
        "$x",
        "${rank}",
    ]
    with pytest.raises(ValueError, match="unknown macro 'bogus'"):
        macros.substitute([], 0, {"bogus": 1})
