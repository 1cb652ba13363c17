"""A worker that writes where it runs: its local-rank variables and its CPU affinity."""

import json
import os
import sys

out = sys.argv[1]
record = {
    "rank": int(os.environ["RANK"]),
    "LOCAL_RANK": os.environ["LOCAL_RANK"],
    "TPELASTIC_LOCAL_RANK": os.environ.get("TPELASTIC_LOCAL_RANK"),
    "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "cpus": sorted(os.sched_getaffinity(0)),
}
with open(os.path.join(out, f"rank{record['rank']}.json"), "w") as dst:
    json.dump(record, dst)
print("apple pie", flush=True)
print("banana split", flush=True)
print("orange, juice", flush=True)
print("oops on stderr", file=sys.stderr, flush=True)
