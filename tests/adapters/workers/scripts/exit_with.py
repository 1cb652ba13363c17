"""Print a line on each stream, sleep, then exit with the given code: exit_with.py CODE [SLEEP]."""

import os
import sys
import time

code = int(sys.argv[1])
print(f"out of {os.environ.get('LOCAL_RANK')}", flush=True)
print(f"err of {os.environ.get('LOCAL_RANK')}", file=sys.stderr, flush=True)
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0.0)
sys.exit(code)
