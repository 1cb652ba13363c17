"""The chaos job's worker: a small real training loop under any of the three launchers.

Rank 0 resumes from the checkpoint file and hands the state to every rank (an all_reduce in
which only rank 0 contributes), so the world trains from one state. Every step all_reduces the
gradients of a least-squares fit; rank 0 checkpoints every few steps (write, then rename). Each
worker appends its own lines to a file of its own, with monotonic timestamps (one clock for every
process on the machine), so the harness can tell which world trained when:

    START t=... node=n1 pid=... restart=0
    IMPORTED t=... node=n1 pid=...
    RESUME t=... world=<id> size=6 rank=0 step=40
    STEP t=... world=<id> size=6 rank=0 node=n1 restart=0 step=41
    CKPT t=... step=45
    DONE t=... step=120

The world id is drawn by rank 0 of each process group and shared with the rest, so two groups
formed by one launcher from the same membership still count as two worlds. The job ends when the
stop file exists and the world has done more steps than a checkpoint interval: whoever sees it
first sets a flag in the step's all_reduce, so every rank stops at the same step.

    python worker.py --framework tensorplay --out DIR --checkpoint FILE --stop FILE
    CHAOS_FRAMEWORK=torch CHAOS_OUT=DIR CHAOS_CHECKPOINT=FILE CHAOS_STOP=FILE python worker.py
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import time

DIM = 4
TARGET = [0.5, -1.0, 2.0, 0.25]


def restart_count() -> int:
    for key in ("TPELASTIC_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"):
        if key in os.environ:
            return int(os.environ[key])
    return -1


def gradient(w: list[float], rank: int, step: int) -> list[float]:
    # One sample per rank and step: x drawn from (rank, step), y = TARGET . x (noise-free).
    rng = random.Random(rank * 1_000_003 + step)
    x = [rng.uniform(-1, 1) for _ in range(DIM)]
    err = sum((wi - ti) * xi for wi, ti, xi in zip(w, TARGET, x, strict=True))
    return [err * xi for xi in x]


def main() -> None:
    # Options come as CHAOS_* variables too: a launcher's parser may take a script's --flags
    # for its own (tensorplay's run does).
    env = os.environ.get
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--framework", choices=("tensorplay", "torch"), default=env("CHAOS_FRAMEWORK")
    )
    parser.add_argument("--out", default=env("CHAOS_OUT"), help="folder for the line files")
    parser.add_argument("--checkpoint", default=env("CHAOS_CHECKPOINT"))
    parser.add_argument("--stop", default=env("CHAOS_STOP"), help="the job ends once it exists")
    parser.add_argument("--step-time", type=float, default=float(env("CHAOS_STEP_TIME", "0.1")))
    parser.add_argument("--ckpt-every", type=int, default=int(env("CHAOS_CKPT_EVERY", "5")))
    args = parser.parse_args()
    missing = [k for k in ("framework", "out", "checkpoint", "stop") if not getattr(args, k)]
    if missing:
        parser.error(f"needs --{', --'.join(missing)} (or CHAOS_{missing[0].upper()}, ...)")

    node = os.environ.get("CHAOS_NODE", "?")
    restart = restart_count()
    path = os.path.join(args.out, f"{node}_pid{os.getpid()}.log")
    out = open(path, "a", buffering=1)  # kept open: one file for the process' life

    def line(text: str) -> None:
        out.write(f"{text.split(' ', 1)[0]} t={time.monotonic():.4f} {text.split(' ', 1)[1]}\n")

    line(f"START node={node} pid={os.getpid()} restart={restart}")
    if args.framework == "torch":
        import torch as tp
        import torch.distributed as dist
    else:
        import tensorplay as tp  # type: ignore[no-redef]
        import tensorplay.distributed as dist  # type: ignore[no-redef]
    line(f"IMPORTED node={node} pid={os.getpid()}")

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank, size = dist.get_rank(), dist.get_world_size()

    # [world id high, world id low, step, w...]: only rank 0's values survive the sum.
    state = [0.0] * (3 + DIM)
    if rank == 0:
        step0, w0 = 0, [0.0] * DIM
        if os.path.exists(args.checkpoint):
            with open(args.checkpoint) as f:
                saved = json.load(f)
            step0, w0 = int(saved["step"]), [float(v) for v in saved["w"]]
        draw = random.SystemRandom()
        state = [float(draw.randrange(1 << 24)), float(draw.randrange(1 << 24)), float(step0), *w0]
    shared = tp.tensor(state)
    dist.all_reduce(shared)
    values = shared.tolist()
    world = f"{int(values[0]):06x}{int(values[1]):06x}"
    step, w = int(values[2]), values[3:]
    resumed = step
    line(f"RESUME world={world} size={size} rank={rank} step={step}")

    while True:
        # A world stops only once it is past any step lost since the checkpoint it resumed
        # from, so the end of the job never hides whether training advanced after a fault.
        past_lost = step - resumed > args.ckpt_every
        stop = 1.0 if past_lost and os.path.exists(args.stop) else 0.0
        buf = tp.tensor([*gradient(w, rank, step), stop])
        dist.all_reduce(buf)
        summed = buf.tolist()
        step += 1
        line(
            f"STEP world={world} size={size} rank={rank} node={node} restart={restart} step={step}"
        )
        if summed[-1] > 0:
            break
        w = [wi - 0.5 * gi / size for wi, gi in zip(w, summed[:DIM], strict=True)]
        if rank == 0 and step % args.ckpt_every == 0:
            tmp = f"{args.checkpoint}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump({"step": step, "w": w}, f)
            os.replace(tmp, args.checkpoint)
            line(f"CKPT step={step}")
        time.sleep(args.step_time)
    if rank == 0:
        loss = sum((a - b) ** 2 for a, b in zip(w, TARGET, strict=True))
        line(f"DONE step={step} loss={loss:.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
