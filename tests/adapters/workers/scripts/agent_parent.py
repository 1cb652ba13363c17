"""A stand-in agent: start 2 workers running tree.py, write their pids, then wait to be killed.

agent_parent.py PID_DIR subprocess|spawn|fork|forkserver
"""

import os
import sys
import time

from tpelastic.multiprocessing import start_processes

HERE = os.path.dirname(os.path.abspath(__file__))


def tree_worker(pid_dir: str) -> None:
    import subprocess

    os.environ["PID_DIR"] = pid_dir
    subprocess.run([sys.executable, os.path.join(HERE, "tree.py")], check=False)


if __name__ == "__main__":
    pid_dir, kind = sys.argv[1], sys.argv[2]
    envs = {r: {"LOCAL_RANK": str(r), "PID_DIR": pid_dir} for r in range(2)}
    if kind == "subprocess":
        ctx = start_processes("agent", sys.executable, (os.path.join(HERE, "tree.py"),), envs)
    else:
        args = {0: (pid_dir,), 1: (pid_dir,)}
        ctx = start_processes("agent", tree_worker, args, envs, start_method=kind)
    with open(os.path.join(pid_dir, "agent.tmp"), "w") as out:
        out.write(" ".join(str(p) for p in ctx.pids().values()))
    os.replace(os.path.join(pid_dir, "agent.tmp"), os.path.join(pid_dir, "agent"))
    time.sleep(120)
