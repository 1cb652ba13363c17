"""An e2e worker that only records the world it was started in, then holds for a while."""

import json
import os
import sys
import time

out, hold = sys.argv[1], float(sys.argv[2])
path = os.path.join(out, f"rank{os.environ['RANK']}_pid{os.getpid()}.json")
with open(path + ".tmp", "w") as handle:
    json.dump({"world_size": int(os.environ["WORLD_SIZE"])}, handle)
os.replace(path + ".tmp", path)
time.sleep(hold)
