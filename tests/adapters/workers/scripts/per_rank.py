"""Behave by LOCAL_RANK as told in the BEHAVIOUR variable, e.g. "0=ok,1=exit3@0.2,2=raise@0.5".

ok: exit 0 at once; exitN@T: exit N after T s; raise@T: raise inside @record after T s;
sleep: sleep until killed. T may be "afterR": once local rank R's error file exists.
Each worker first writes its pid into PID_DIR/<local_rank>.
"""

import os
import sys
import time

from tpelastic.errors import record


@record
def main() -> None:
    rank = os.environ["LOCAL_RANK"]
    if os.environ.get("PID_DIR"):
        path = os.path.join(os.environ["PID_DIR"], rank)
        with open(f"{path}.tmp", "w") as out:
            out.write(str(os.getpid()))
        os.replace(f"{path}.tmp", path)  # readers never see an empty file
    plan = dict(item.split("=") for item in os.environ["BEHAVIOUR"].split(","))
    what, _, delay = plan[rank].partition("@")
    if delay.startswith("after"):
        # Order by events, not by sleeps, so a loaded machine cannot reorder the failures.
        folder = os.path.dirname(os.path.dirname(os.environ["TPELASTIC_ERROR_FILE"]))
        other = os.path.join(folder, delay[5:], "error.json")
        deadline = time.monotonic() + 30
        while not os.path.exists(other) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
    else:
        time.sleep(float(delay or 0))
    if what.startswith("exit"):
        sys.exit(int(what[4:]))
    if what == "raise":
        raise ValueError(f"rank {rank} broke")
    if what == "sleep":
        time.sleep(60)


if __name__ == "__main__":
    main()
