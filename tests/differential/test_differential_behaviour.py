"""Our library against torch 2.13's and tensorplay's on the same calls, input by input.

Each test draws inputs, calls ours and the oracle's, and compares the results (a value, or the
exception type). An input on which they differ passes only when it falls in a class of inputs
docs/differences.md lists for that oracle (a row whose key starts with ``behaviour:``); each such
class named here must be on the page. torch is optional: its half skips when it is absent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from api_surface import documented, import_oracle
from hypothesis import given, settings
from hypothesis import strategies as st

from tpelastic.data import CyclingIterator, ElasticDistributedSampler, macros
from tpelastic.events import Event, EventSource
from tpelastic.rendezvous import RendezvousParameters, parse_rendezvous_endpoint

ORACLES = ["torch", "tensorplay"]


def oracle(root: str, relative: str) -> Any:
    module = import_oracle(root, relative)
    if module is None:
        pytest.skip(f"{root} is not importable here (pip install torch==2.13.0 to compare)")
    return module


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """``("value", result)`` or ``("raises", exception type name)``; never raises itself."""
    try:
        return "value", call()
    except Exception as exc:  # the exception's kind is the outcome being compared
        return "raises", type(exc).__name__


def require_documented(root: str, key: str) -> None:
    assert key in documented(root), f"{root}: {key!r} differs but is not on docs/differences.md"


# --- ElasticDistributedSampler -------------------------------------------------------------


@st.composite
def sampler_calls(draw: st.DrawFn) -> tuple[int, int, int, int, int]:
    length = draw(st.integers(1, 300))
    world = draw(st.integers(1, 9))
    rank = draw(st.integers(0, world - 1))
    start = draw(st.integers(0, length - 1))
    epoch = draw(st.integers(0, 2**31))
    return length, world, rank, start, epoch


SHORT_REMAINDER = "behaviour: ElasticDistributedSampler: remainder shorter than its padding"


@pytest.mark.filterwarnings("ignore::UserWarning")
@given(sampler_calls())
def test_sampler_deals_torchs_lists(call: tuple[int, int, int, int, int]) -> None:
    module = oracle("torch", "distributed.elastic.utils.data")
    length, world, rank, start, epoch = call
    theirs = module.ElasticDistributedSampler(range(length), world, rank, start)
    ours = ElasticDistributedSampler(range(length), world, rank, start)
    theirs.set_epoch(epoch)
    ours.set_epoch(epoch)
    assert len(ours) == len(theirs)
    got, want = outcome(lambda: list(ours)), outcome(lambda: list(theirs))
    if got == want:
        return
    # torch pads by repeating its indices once; when the remainder is shorter than the padding
    # it trips its own assertion. Ours cycles the remainder instead.
    remaining = length - start
    assert want == ("raises", "AssertionError") and 2 * remaining < len(ours) * world
    require_documented("torch", SHORT_REMAINDER)


def test_sampler_tensorplay_difference_is_documented() -> None:
    module = oracle("tensorplay", "distributed.elastic.utils.data")
    # tensorplay's takes (dataset, *, start_rank, start_epoch): no call is valid for both.
    with pytest.raises(TypeError):
        module.ElasticDistributedSampler(range(4), 2, 0, 1)
    require_documented("tensorplay", "behaviour: ElasticDistributedSampler: other semantics")


# --- CyclingIterator -----------------------------------------------------------------------


EMPTY_EPOCH = "behaviour: CyclingIterator: stops at an empty epoch"


@pytest.mark.parametrize("root", ORACLES)
@given(
    n=st.integers(0, 7),
    start=st.integers(0, 8),
    sizes=st.lists(st.integers(0, 3), min_size=9, max_size=9),
)
def test_cycling_iterator(root: str, n: int, start: int, sizes: list[int]) -> None:
    module = oracle(root, "distributed.elastic.utils.data")

    def run(cls: Any) -> tuple[list[str], list[int]]:
        calls: list[int] = []

        def epoch_items(epoch: int) -> Any:
            calls.append(epoch)
            return iter([f"{epoch}.{i}" for i in range(sizes[epoch])])

        return list(cls(n, epoch_items, start)), calls

    ours, theirs = run(CyclingIterator), run(module.CyclingIterator)
    if ours == theirs:
        return
    # tensorplay's moves to the next epoch once and then gives up if that one is empty.
    assert root == "tensorplay" and 0 in sizes[start + 1 : max(n, start + 1)]
    require_documented(root, EMPTY_EPOCH)


# --- macros.substitute ---------------------------------------------------------------------

arg_text = st.lists(
    st.sampled_from(["$", "{", "}", "local_rank", "rank", "x", "$$", "${local_rank}", "-", "/"]),
    max_size=6,
).map("".join)


@pytest.mark.parametrize("root", ORACLES)
@given(
    args=st.lists(st.one_of(arg_text, st.integers(), st.none()), max_size=5),
    local_rank=st.integers(0, 64),
)
def test_macros_substitute(root: str, args: list[Any], local_rank: int) -> None:
    module = oracle(root, "distributed.elastic.utils.api")
    want = outcome(lambda: module.macros.substitute(list(args), str(local_rank)))
    assert outcome(lambda: macros.substitute(list(args), str(local_rank))) == want
    if root == "torch":  # tensorplay's macros has no local_rank attribute; ours, as torch's
        assert module.macros.local_rank == macros.local_rank


# --- parse_rendezvous_endpoint -------------------------------------------------------------

endpoint_text = st.one_of(
    st.lists(st.sampled_from(list("[]:0123456789ab.-_ ")), max_size=12).map("".join),
    st.sampled_from(["", "::::", "[::1", "[::1]:29400", "host:99999", ":29400", "localhost:0"]),
)

BARE_IPV6 = "behaviour: parse_rendezvous_endpoint: bare IPv6 address"
LENIENT = "behaviour: parse_rendezvous_endpoint: tensorplay accepts what torch rejects"


@pytest.mark.parametrize("root", ORACLES)
@given(endpoint=endpoint_text, default_port=st.integers(0, 65535))
def test_parse_rendezvous_endpoint(root: str, endpoint: str, default_port: int) -> None:
    module = oracle(root, "distributed.elastic.rendezvous.utils")
    ours = outcome(lambda: parse_rendezvous_endpoint(endpoint, default_port))
    theirs = outcome(lambda: module.parse_rendezvous_endpoint(endpoint, default_port))
    if ours == theirs:
        return
    text = endpoint.strip()
    if text.count(":") > 1 and not text.startswith("[") and ours[0] == "value":
        # "::1" has no port for us; torch takes its last group as one (host ":", port 1).
        assert ours == ("value", (text, default_port))
        require_documented(root, BARE_IPV6)
        return
    assert root == "tensorplay" and ours[0] == "raises" and theirs[0] == "value"
    require_documented(root, LENIENT)


# --- RendezvousParameters.get / get_as_bool / get_as_int -----------------------------------

config_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["1", "0", "true", "False", "t", "F", "yes", "Y", "n", "no", " 1", "2", ""]),
    st.text(max_size=4),
)
NONE_VALUE = "behaviour: RendezvousParameters: a key set to None gives the default"


@pytest.mark.parametrize("root", ORACLES)
@given(value=config_values, default=st.one_of(st.none(), st.booleans(), st.integers(-2, 2)))
def test_rdzv_conf_getters(root: str, value: Any, default: Any) -> None:
    module = oracle(root, "distributed.elastic.rendezvous.api")
    kwargs = {"backend": "static", "endpoint": "localhost:29400", "run_id": "r"}
    theirs = module.RendezvousParameters(**kwargs, min_nodes=1, max_nodes=2, flag=value)
    ours = RendezvousParameters(**kwargs, min_nodes=1, max_nodes=2, flag=value)
    for getter in ("get", "get_as_bool", "get_as_int"):
        for args in (("flag",), ("flag", default), ("absent",), ("absent", default)):
            got = outcome(lambda g=getter, a=args: getattr(ours, g)(*a))
            want = outcome(lambda g=getter, a=args: getattr(theirs, g)(*a))
            if got == want or _both_nan(got, want):
                continue
            # tensorplay's get_as_* answer the default for a key set to None; torch's None.
            assert root == "tensorplay" and value is None and got == ("value", None)
            require_documented(root, NONE_VALUE)


def _both_nan(a: tuple[str, Any], b: tuple[str, Any]) -> bool:
    return all(kind == "value" and isinstance(v, float) and v != v for kind, v in (a, b))


# --- Event.serialize / deserialize ---------------------------------------------------------

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.text(max_size=5)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


@pytest.mark.parametrize("root", ORACLES)
@settings(max_examples=60)
@given(
    name=st.text(max_size=8),
    source=st.sampled_from(list(EventSource)),
    timestamp=st.integers(0, 2**42),
    metadata=st.dictionaries(st.text(max_size=4), json_values, max_size=4),
)
def test_event_serialize_round_trips_both_ways(
    root: str, name: str, source: EventSource, timestamp: int, metadata: dict[str, Any]
) -> None:
    module = oracle(root, "distributed.elastic.events.api")
    ours = Event(name, source, timestamp, metadata)
    assert Event.deserialize(ours.serialize()) == ours
    assert Event.deserialize(ours) is ours
    theirs = module.Event.deserialize(ours.serialize())
    assert (theirs.name, theirs.source.name, theirs.timestamp) == (name, source.name, timestamp)
    assert json.loads(json.dumps(theirs.metadata)) == json.loads(json.dumps(ours.metadata))
    back = module.Event(name, module.EventSource[source.name], timestamp, metadata)
    assert Event.deserialize(back.serialize()) == ours


# --- the page lists exactly the classes above ----------------------------------------------

KNOWN_CLASSES = {
    "torch": {SHORT_REMAINDER, BARE_IPV6},
    "tensorplay": {
        "behaviour: ElasticDistributedSampler: other semantics",
        EMPTY_EPOCH,
        BARE_IPV6,
        LENIENT,
        NONE_VALUE,
    },
}


@pytest.mark.parametrize("root", ORACLES)
def test_the_page_lists_exactly_the_behaviour_classes_these_tests_know(root: str) -> None:
    listed = {key for key in documented(root) if key.startswith("behaviour:")}
    assert listed == KNOWN_CLASSES[root]
