"""``tpelastic store``: run a standalone rendezvous store (a TCPStore server) until stopped."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from tpelastic.adapters.stores.errors import StoreUnavailable
from tpelastic.cli.errors import UsageError


def add_parser(commands: argparse._SubParsersAction, name: str) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        name, help="run a standalone rendezvous store (TCPStore server) until SIGINT/SIGTERM"
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1, this host only; 0.0.0.0 for every "
        "interface: see docs/security.md first)",
    )
    parser.add_argument(
        "--port", type=int, default=29400, help="port to listen on; 0 picks a free one"
    )
    parser.add_argument(
        "--secret-file",
        default=None,
        help="serve only clients that prove this run secret (else $TPELASTIC_RDZV_SECRET, "
        "else anyone; docs/security.md)",
    )


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be within 0..65535, got {args.port}")
    from tpelastic.adapters.stores.signed import load_secret

    try:
        secret = load_secret(args.secret_file)
    except ValueError as error:
        raise UsageError(str(error)) from None
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    from tpelastic.adapters.stores.server import serve  # loaded only when serving

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        serve(args.host, args.port, _announce, stop, secret=secret)
    except StoreUnavailable as error:
        raise UsageError(str(error)) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _announce(host: str, port: int) -> None:
    print(f"tpelastic store listening on {host}:{port}", flush=True)
    sys.stdout.flush()
