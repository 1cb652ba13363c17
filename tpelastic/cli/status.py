"""``tpelastic status``: what a running job is doing, read from the agents' status records.

It reads the rendezvous store the way ``run`` reaches it (``--rdzv-backend``,
``--rdzv-endpoint``, ``--rdzv-id``, ``--rdzv-conf``), or asks one agent's endpoint
(``--agent host:port``, its ``/status``). It reads versioned JSON records only and never
writes to the run: it does not host a store, join, or heartbeat.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tpelastic.adapters.clock import SYSTEM_CLOCK
from tpelastic.adapters.ports import Clock
from tpelastic.cli.errors import UsageError


def add_parser(commands: argparse._SubParsersAction, name: str) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        name, help="show a running job: members, round, restarts, per-rank steps, failures"
    )
    parser.add_argument("--rdzv-backend", "--rdzv_backend", default="tcp", help="tcp, file, etcd")
    parser.add_argument("--rdzv-endpoint", "--rdzv_endpoint", default="", help="the job's store")
    parser.add_argument("--rdzv-id", "--rdzv_id", default="", help="the job's run id")
    parser.add_argument("--rdzv-conf", "--rdzv_conf", default="", help="backend options k=v,...")
    parser.add_argument(
        "--agent", default="", help="HOST:PORT of an agent's endpoint (--metrics/--health-port)"
    )
    parser.add_argument("--json", action="store_true", help="print the view as JSON (scripts)")
    parser.add_argument(
        "--watch", nargs="?", type=float, const=2.0, default=None, metavar="SECONDS",
        help="refresh a live table every SECONDS (default 2) until Ctrl-C",
    )  # fmt: skip
    parser.add_argument("--slowest", type=int, default=3, help="how many slowest ranks to list")


def run(args: argparse.Namespace) -> int:
    if args.watch is not None and not args.watch > 0:
        raise UsageError(f"--watch must be a positive number of seconds, got {args.watch}")
    if args.slowest < 0:
        raise UsageError(f"--slowest must be >= 0, got {args.slowest}")
    read = _reader(args)
    if args.watch is None:
        view = read()
        if args.json:
            print(json.dumps(view, sort_keys=True))
        else:
            from rich.console import Console

            Console().print(render(view))
        return 0
    return _watch(read, args.watch, args.json)


def _reader(args: argparse.Namespace) -> Any:
    if args.agent:
        url = args.agent if "://" in args.agent else f"http://{args.agent}"
        return lambda: _from_agent(url.rstrip("/") + "/status")
    if not args.rdzv_endpoint or not args.rdzv_id:
        raise UsageError("give --rdzv-endpoint and --rdzv-id (as for run), or --agent HOST:PORT")
    store = _open_store(args)
    from tpelastic.adapters.status import read_view

    return lambda: read_view(store, args.rdzv_id, slowest=args.slowest)


def _open_store(args: argparse.Namespace) -> Any:
    from tpelastic.adapters.rendezvous.errors import RendezvousError
    from tpelastic.adapters.rendezvous.parameters import RendezvousParameters, parse_rdzv_conf

    try:
        conf: dict[str, Any] = parse_rdzv_conf(args.rdzv_conf)
    except ValueError as error:
        raise UsageError(str(error)) from None
    conf["is_host"] = False  # a reader never hosts the store
    try:
        params = RendezvousParameters(
            args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id, 1, 1, None, **conf
        )
        from tpelastic.rendezvous import create_handler

        # Building a dynamic handler writes nothing: the first write is a join, never made here.
        handler = create_handler(params)
    except (ValueError, RendezvousError) as error:
        raise UsageError(f"cannot read the job's store: {error}") from None
    store = getattr(handler, "store", None)
    if store is None:
        raise UsageError(f"the {args.rdzv_backend} backend keeps no status records")
    return store


def _from_agent(url: str) -> dict[str, Any]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            view = json.loads(response.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise UsageError(f"cannot read {url}: {error}") from None
    if not isinstance(view, dict) or view.get("v") != 1:
        raise UsageError(f"{url} did not answer a status view of version 1")
    return view


def _watch(read: Any, every: float, as_json: bool, clock: Clock = SYSTEM_CLOCK) -> int:
    try:
        if as_json:
            while True:
                print(json.dumps(read(), sort_keys=True), flush=True)
                clock.sleep(every)
        from rich.live import Live

        with Live(render(read()), auto_refresh=False, screen=False) as live:
            while True:
                clock.sleep(every)
                live.update(render(read()), refresh=True)
    except KeyboardInterrupt:
        return 0


def _age(value: object) -> str:
    return "-" if value is None else f"{float(value):.1f} s"  # type: ignore[arg-type]


def render(view: dict[str, Any]) -> Any:
    """The view as rich renderables: a summary line, the members, the ranks, the slowest."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    closed = view.get("closed")
    left = (view.get("max_restarts") or 0) - view.get("restart_count", 0)
    head = Text(
        f"run {view['run_id']}: "
        + ("no round yet" if view.get("round") is None else f"round {view['round']}")
        + f", attempt {view.get('attempt', 0)}, {len(view['members'])} member(s), "
        + f"restarts used {view.get('restart_count', 0)}"
        + (f", left {max(left, 0)}" if view.get("max_restarts") is not None else "")
        + (f"; closed: {closed}" if closed else ""),
        style="bold",
    )
    members = Table(title="members", title_justify="left")
    for column in ("rank", "node", "address", "state", "round", "attempt", "restarts", "seq"):
        members.add_column(column)
    for m in view["members"]:
        s = m.get("status") or {}
        members.add_row(
            str(m["rank"]), m["node"], m.get("addr") or "-", s.get("state", "no record"),
            str(s.get("round", "-")), str(s.get("attempt", "-")),
            str(s.get("restart_count", "-")), str(s.get("seq", "-")),
        )  # fmt: skip
    ranks = Table(title="ranks", title_justify="left")
    for column in ("rank", "node", "step", "age", "step time", "collective"):
        ranks.add_column(column)
    for r in view["ranks"]:
        where = f"in {r['collective']} (#{r['collectives']})" if r.get("waiting") else "-"
        ranks.add_row(
            str(r["rank"]), r["node"], "-" if r["step"] is None else str(r["step"]),
            _age(r.get("age_s")), _age(r.get("step_time_s")), where,
        )  # fmt: skip
    parts: list[Any] = [head, members, ranks]
    if view.get("slowest"):
        slow = ", ".join(
            f"rank {r['rank']} ({r['node']}) {float(r['step_time_s']):.3f} s"
            for r in view["slowest"]
        )
        parts.append(Text(f"slowest: {slow}"))
    stuck = view.get("stuck")
    if stuck:
        waiting = ", ".join(str(r) for r in stuck["waiting_ranks"])
        parts.append(
            Text(
                f"stuck: rank {stuck['rank']} (node {stuck['node_rank']}, {stuck['host']}) "
                f"never reached {stuck['collective'] or 'the collective'} "
                f"#{stuck['collective_number']} that "
                f"rank(s) {waiting} wait in (it entered {stuck['its_collectives']})",
                style="bold red",
            )
        )
    if view.get("stragglers"):
        slow = ", ".join(f"rank {r['rank']} ({r['ratio']:.1f}x)" for r in view["stragglers"])
        parts.append(Text(f"stragglers (vs the median step time): {slow}", style="yellow"))
    failure = view.get("last_failure")
    if failure:
        parts.append(Text(f"last failure ({failure['node']}): {failure['reason']}", style="red"))
    for problem in view.get("problems", []):
        parts.append(Text(f"unreadable: {problem}", style="yellow"))
    return Group(*parts)


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - ``tpelastic status``
    from tpelastic.cli.main import main as cli_main

    return cli_main(["status", *(sys.argv[1:] if argv is None else argv)])
