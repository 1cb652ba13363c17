"""An e2e worker: joins a real gloo process group, all_reduces, records what it saw, then
crashes, fails, holds or exits as its flags say."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sys
import time

ENV_KEYS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_NAME",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "TPELASTIC_RESTART_COUNT",
    "TPELASTIC_MAX_RESTARTS",
    "TPELASTIC_RUN_ID",
    "TPELASTIC_ROUND",
    "TPELASTIC_ATTEMPT",
    "TPELASTIC_ERROR_FILE",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_ERROR_FILE",
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--crash-until", type=int, default=0)
    parser.add_argument("--fail-always", action="store_true")
    parser.add_argument("--hold-unless-world", type=int, default=0)
    parser.add_argument("--hold", type=float, default=0.0)
    # Keep all_reducing for this long: a peer lost meanwhile fails the worker, as in training.
    parser.add_argument("--train-for", type=float, default=0.0)
    args, unknown = parser.parse_known_args()
    restart = int(os.environ["TPELASTIC_RESTART_COUNT"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.fail_always and rank == 1:
        from tpelastic.errors import record

        @record
        def broken() -> None:
            raise ValueError(f"rank 1 broke on purpose (restart {restart})")

        broken()
    import tensorplay as tp
    import tensorplay.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    total = tp.tensor([float(rank + 1)])
    dist.all_reduce(total)
    seen = {key: os.environ.get(key) for key in ENV_KEYS}
    record_ = {"rank": rank, "world": world, "sum": total.item(), "env": seen, "extra": unknown}
    name = f"r{os.environ['TPELASTIC_ROUND']}_rank{rank}_pid{os.getpid()}.json"
    path = os.path.join(args.out, name)
    with open(path + ".tmp", "w") as out:
        json.dump(record_, out)
    os.replace(path + ".tmp", path)  # whole files only: the test polls the folder as we write
    print(f"worker rank {rank}/{world} restart {restart} sum {total.item()}", flush=True)
    dist.all_reduce(tp.tensor([0.0]))  # a barrier: every rank recorded before anyone crashes
    if restart < args.crash_until and rank == restart % world:
        os.kill(os.getpid(), signal.SIGKILL)
    until = time.monotonic() + args.train_for
    while time.monotonic() < until:
        try:
            dist.all_reduce(tp.tensor([1.0]))
        except RuntimeError as error:
            # A lost peer: exit at once, as training code that fails there does, without the
            # interpreter's teardown (seconds on a loaded machine) in the agent's way.
            print(f"worker rank {rank}: {error}", file=sys.stderr, flush=True)
            os._exit(1)
        time.sleep(0.05)
    deadline = time.monotonic() + (60.0 if args.hold_unless_world else args.hold)
    while time.monotonic() < deadline and world != args.hold_unless_world:
        time.sleep(0.05)
    dist.destroy_process_group()
    sys.exit(0)


if __name__ == "__main__":
    main()
