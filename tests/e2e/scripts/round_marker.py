"""An e2e worker without a process group: records which round and world it started in (and
when, on the system-wide monotonic clock), then waits to be stopped (at most 120 s)."""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    out = sys.argv[sys.argv.index("--out") + 1]
    started = time.monotonic()
    round_no, group = os.environ["TPELASTIC_ROUND"], os.environ["GROUP_RANK"]
    world = os.environ["GROUP_WORLD_SIZE"]
    record = {"round": int(round_no), "group_rank": int(group), "nodes": int(world)}
    record["started"] = started
    path = os.path.join(out, f"r{round_no}_g{group}_pid{os.getpid()}.json")
    with open(path + ".tmp", "w") as tmp:
        json.dump(record, tmp)
    os.replace(path + ".tmp", path)  # whole files only: the test reads while we write
    time.sleep(120.0)


if __name__ == "__main__":
    main()
