"""Behave by LOCAL_RANK as told in the BEHAVIOUR variable, e.g. "0=ok,1=exit3@0.2,2=raise@0.5".

ok: exit 0 at once; exitN@T: exit N after T s; raise@T: raise inside @record after T s;
sleep: sleep until killed; print its pid into PID_DIR/<local_rank> first.
"""

import os
import sys
import time

from tpelastic.errors import record


@record
def main() -> None:
    rank = os.environ["LOCAL_RANK"]
    if os.environ.get("PID_DIR"):
        with open(os.path.join(os.environ["PID_DIR"], rank), "w") as out:
            out.write(str(os.getpid()))
    plan = dict(item.split("=") for item in os.environ["BEHAVIOUR"].split(","))
    what, _, delay = plan[rank].partition("@")
    time.sleep(float(delay or 0))
    if what.startswith("exit"):
        sys.exit(int(what[4:]))
    if what == "raise":
        raise ValueError(f"rank {rank} broke")
    if what == "sleep":
        time.sleep(60)


if __name__ == "__main__":
    main()
