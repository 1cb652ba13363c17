"""An e2e worker that trains through ``tpelastic.worker.run``: all_reduces its step each step,
commits, and raises, dies or ignores the agent's stop once, as its flags say. Every entry into
the training function and the end are recorded in ``--out``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import time

import tpelastic.worker as elastic


def record(out: str, name: str, data: dict) -> None:
    path = os.path.join(out, name)
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)


def once(out: str, what: str) -> bool:
    """True the first time ``what`` is asked for in this job (a marker file)."""
    try:
        os.close(os.open(os.path.join(out, f"once_{what}"), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--raise-at", type=int, default=-1)
    parser.add_argument("--kill-at", type=int, default=-1)
    parser.add_argument("--ignore-at", type=int, default=-1)
    parser.add_argument("--step-time", type=float, default=0.0)
    args = parser.parse_args()

    def train(state: elastic.State) -> None:
        import tensorplay as tp
        import tensorplay.distributed as dist

        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        restart = int(os.environ["TPELASTIC_RESTART_COUNT"])
        name = f"enter_rank{rank}_r{restart}_pid{os.getpid()}.json"
        record(args.out, name, {"step": state.step, "restarts": state.restarts})
        while state.step < args.steps:
            total = tp.tensor([float(state.step)])
            dist.all_reduce(total)
            state.sums.append(total.item())
            if total.item() != world * state.step:
                raise AssertionError(f"ranks disagree at step {state.step}: {total.item()}")
            state.step += 1
            state.commit()
            if rank == 1 and state.step == args.raise_at and once(args.out, "raise"):
                raise RuntimeError("rank 1 raised on purpose")
            if rank == 1 and state.step == args.kill_at and once(args.out, "kill"):
                os.kill(os.getpid(), signal.SIGKILL)
            if rank == 0 and state.step == args.ignore_at and once(args.out, "ignore"):
                time.sleep(30)  # a C call: the agent's stop is not taken in time
            time.sleep(args.step_time)
        rank_file = f"done_rank{rank}.json"
        data = {"pid": os.getpid(), "step": state.step, "sums": state.sums, "restart": restart}
        record(args.out, rank_file, {**data, "restarts": state.restarts})

    elastic.run(train, elastic.State(step=0, sums=[]))


if __name__ == "__main__":
    main()
