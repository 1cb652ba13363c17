"""RendezvousParameters, --rdzv-conf parsing and every bad-input message."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tpelastic.rendezvous import RendezvousParameters, RendezvousTimeout, parse_rdzv_conf


def params(endpoint: str = "localhost:29400", **config: object) -> RendezvousParameters:
    return RendezvousParameters("tcp", endpoint, "run1", 1, 4, **config)


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("node1:1234", ("node1", 1234)),
        ("node1", ("node1", 29400)),
        ("10.0.0.1:0", ("10.0.0.1", 0)),
        ("[::1]:29500", ("::1", 29500)),
        ("[fe80::1]", ("fe80::1", 29400)),
        ("::1", ("::1", 29400)),
        ("", ("", 29400)),
        ("  node1:5  ", ("node1", 5)),
    ],
)
def test_endpoint_parsing(endpoint: str, expected: tuple[str, int]) -> None:
    assert params(endpoint).host_port() == expected


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [
        ("node1:abc", "port 'abc' is not a number"),
        ("node1:", "port '' is not a number"),
        ("node1:-5", "port '-5' is not a number"),
        ("node1:70000", "port 70000 is not in 0..65535"),
        (":29400", "has no host before the port"),
        ("[::1", r"needs '\[addr\]' brackets"),
        ("[::1]29400", r"expected ':port' after '\]'"),
        ("[::1]:x", "port 'x' is not a number"),
    ],
)
def test_bad_endpoints_name_the_problem(endpoint: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        params(endpoint)
    assert repr(endpoint) in str(caught.value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", "h:1", "r", 1, 1), "rendezvous backend must be a non-empty string"),
        (("tcp", "h:1", "", 1, 1), "run_id must be a non-empty string"),
        (("tcp", "h:1", "r", 0, 1), r"min_nodes must be >= 1, got 0"),
        (("tcp", "h:1", "r", 3, 2), r"max_nodes \(2\) must be >= min_nodes \(3\)"),
        (("tcp", "h:1", "r", "1", 2), "min_nodes must be an integer, got '1'"),
        (("tcp", "h:1", "r", 1, True), "max_nodes must be an integer, got True"),
        (("tcp", 29400, "r", 1, 1), "endpoint must be a string"),
    ],
)
def test_bad_arguments_name_the_problem(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RendezvousParameters(*args)


def test_fields_and_get() -> None:
    p = RendezvousParameters("c10d", "h:1", "job", 2, 3, local_addr="10.1.1.1", extra="x")
    assert (p.backend, p.endpoint, p.run_id, p.min_nodes, p.max_nodes) == (
        "c10d",
        "h:1",
        "job",
        2,
        3,
    )
    assert p.local_addr == "10.1.1.1"
    assert p.get("extra") == "x"
    assert p.get("missing") is None
    assert p.get("missing", 7) == 7
    assert "extra" in repr(p)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", True), ("0", False), ("true", True), ("FALSE", False), ("Yes", True),
        ("no", False), ("t", True), ("F", False), ("y", True), ("N", False), (True, True),
        (False, False), (1, True), (0, False),
    ],
)  # fmt: skip
def test_get_as_bool(value: object, expected: bool) -> None:
    assert params(flag=value).get_as_bool("flag") is expected


def test_get_as_bool_default_and_bad_value() -> None:
    assert params().get_as_bool("flag") is None
    assert params().get_as_bool("flag", True) is True
    with pytest.raises(ValueError, match=r"rendezvous config flag='maybe' is not a boolean"):
        params(flag="maybe").get_as_bool("flag")
    with pytest.raises(ValueError, match=r"flag=' yes ' is not a boolean"):
        params(flag=" yes ").get_as_bool("flag")  # torch does not strip either
    with pytest.raises(ValueError, match="flag=2 is not a boolean"):
        params(flag=2).get_as_bool("flag")
    with pytest.raises(ValueError, match="is_host='2' is not a boolean"):
        params(is_host="2")  # known keys are checked at construction


def test_get_as_int_and_float() -> None:
    p = params(n="12", m=5, f="0.25", bad="1.5", word="ten")
    assert p.get_as_int("n") == 12
    assert p.get_as_int("m") == 5
    assert p.get_as_int("missing", 3) == 3
    assert p.get_as_float("f") == 0.25
    with pytest.raises(ValueError, match=r"rendezvous config bad='1\.5' is not an integer"):
        p.get_as_int("bad")
    with pytest.raises(ValueError, match="rendezvous config word='ten' is not a number"):
        p.get_as_float("word")
    with pytest.raises(ValueError, match="is not a number"):
        params(x="nan").get_as_float("x")


def test_timeout_defaults() -> None:
    timeout = params().timeout
    assert timeout == RendezvousTimeout()
    assert timeout == RendezvousTimeout(join=600, last_call=30, close=30, heartbeat=5)
    assert (timeout.join, timeout.last_call, timeout.close, timeout.heartbeat) == tuple(
        timedelta(seconds=s) for s in (600, 30, 30, 5)
    )
    assert timeout.keep_alive_max_attempt == 3
    assert timeout.keep_alive_expiry == timedelta(seconds=15)
    assert params().read_timeout == 60
    assert params().is_host is None
    assert params().store_type == "tcp"


def test_timeout_from_config_keys() -> None:
    p = params(
        join_timeout="120",
        last_call_timeout=5,
        close_timeout="0.5",
        keep_alive_interval="2",
        keep_alive_max_attempt="4",
        read_timeout="9",
        is_host="yes",
        store_type=" FILE ",
    )
    timeout = p.timeout
    assert (timeout.join, timeout.last_call, timeout.close, timeout.heartbeat) == tuple(
        timedelta(seconds=s) for s in (120, 5, 0.5, 2)
    )
    assert timeout.keep_alive_expiry == timedelta(seconds=8)
    assert (p.read_timeout, p.is_host, p.store_type) == (9, True, "file")


def test_heartbeat_alias() -> None:
    assert params(heartbeat="3").timeout.heartbeat == timedelta(seconds=3)
    assert params(heartbeat="3", keep_alive_interval="3").timeout.heartbeat == timedelta(seconds=3)
    with pytest.raises(ValueError, match="heartbeat and keep_alive_interval are one setting"):
        params(heartbeat="3", keep_alive_interval="4")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"join_timeout": "0"}, r"join_timeout='0' must be > 0 and <= 604800 seconds"),
        ({"last_call_timeout": "-1"}, "last_call_timeout='-1' must be > 0 and <="),
        ({"read_timeout": "1e12"}, "read_timeout='1e12' must be > 0 and <= 604800 seconds"),
        ({"keep_alive_interval": "1e300"}, "keep_alive_interval='1e300' must be > 0 and <="),
        ({"close_timeout": "soon"}, "close_timeout='soon' is not a number"),
        ({"keep_alive_interval": "inf"}, "keep_alive_interval='inf' is not a number"),
        ({"keep_alive_max_attempt": "0"}, "keep_alive_max_attempt=0 must be >= 1"),
        ({"keep_alive_max_attempt": "2.5"}, "keep_alive_max_attempt='2.5' is not an integer"),
        ({"read_timeout": ""}, "read_timeout='' is not a number"),
        ({"store_type": "etcd"}, "store_type='etcd' is not one of tcp, file"),
    ],
)
def test_bad_config_values_fail_at_construction(config: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        params(**config)


def test_file_store_endpoint_is_a_path_not_host_port() -> None:
    p = RendezvousParameters("tcp", "/tmp/x:y/store", "r", 1, 1, store_type="file")
    assert p.endpoint == "/tmp/x:y/store"


def test_parse_rdzv_conf() -> None:
    assert parse_rdzv_conf("") == {}
    assert parse_rdzv_conf("join_timeout=5, is_host=true,,") == {
        "join_timeout": "5",
        "is_host": "true",
    }
    assert parse_rdzv_conf("path=a=b") == {"path": "a=b"}
    conf = parse_rdzv_conf("join_timeout=5,keep_alive_interval=1")
    assert params(**conf).timeout.join == timedelta(seconds=5)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("join_timeout", "item 'join_timeout' is not key=value"),
        ("=5", "item '=5' is not key=value"),
        ("a=1,a=2", "key 'a' is given twice"),
    ],
)
def test_parse_rdzv_conf_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_rdzv_conf(text)


def test_rendezvous_timeout_takes_timedeltas_positionally_as_torch() -> None:
    timeout = RendezvousTimeout(timedelta(seconds=7), None, timedelta(minutes=1))
    assert (timeout.join, timeout.last_call, timeout.close) == (
        timedelta(seconds=7),
        timedelta(seconds=30),
        timedelta(seconds=60),
    )
    with pytest.raises(ValueError, match="The join timeout"):
        RendezvousTimeout(timedelta(0))
    with pytest.raises(TypeError, match="heartbeat timeout must be a timedelta"):
        RendezvousTimeout(heartbeat="5")  # type: ignore[arg-type]
