"""A small elastic training job: linear regression on CPU with gloo, resumable from checkpoints.

Run it with ``tpelastic run`` (see the README). Every worker joins a gloo process group, reads
its share of each epoch through ``ElasticDistributedSampler``, starts from rank 0's weights
(broadcast: otherwise each rank's random initial weights would train a different model),
averages gradients with
``all_reduce`` and, on rank 0, checkpoints the model with the epoch and the position in it.
After a restart (a worker failed, a node joined or left) every worker loads the checkpoint and
the sampler continues the same epoch order from the saved position, whatever the new world
size: no sample is repeated or skipped.

``--crash-once-at STEP`` makes rank 1 fail at that step in the first attempt only, so the demo
shows a restart that resumes from the last checkpoint.
"""

from __future__ import annotations

import argparse
import datetime
import os
import time

import tensorplay as tp
import tensorplay.distributed as dist
from tensorplay.utils.data import DataLoader, TensorDataset

from tpelastic.data import ElasticDistributedSampler
from tpelastic.errors import record
from tpelastic.timer import progress

FEATURES = 8


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    run_id = os.environ.get("TPELASTIC_RUN_ID", "local")
    parser.add_argument("--ckpt-dir", default=f"/tmp/tpelastic-demo-{run_id}")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--ckpt-every", type=int, default=10, help="steps between checkpoints")
    parser.add_argument("--step-delay", type=float, default=0.03, help="seconds per step")
    parser.add_argument("--crash-once-at", type=int, default=0, help="rank 1 fails at this step")
    return parser.parse_args()


def make_dataset(samples: int) -> TensorDataset:
    # The same data on every rank and every attempt: a fixed seed, a known true weight.
    tp.manual_seed(0)
    inputs = tp.randn(samples, FEATURES)
    true_w = tp.arange(1, FEATURES + 1, dtype=tp.float32).reshape(FEATURES, 1) / FEATURES
    targets = inputs @ true_w + 0.01 * tp.randn(samples, 1)
    return TensorDataset(inputs, targets)


def load_checkpoint(path: str, model: tp.nn.Module) -> dict:
    if not os.path.exists(path):
        return {"epoch": 0, "position": 0, "step": 0, "world": None}
    state = tp.load(path)
    model.load_state_dict(state["model"])
    return state


def save_checkpoint(path: str, model: tp.nn.Module, **progress: object) -> None:
    tmp = f"{path}.{os.getpid()}.tmp.pt"
    tp.save({"model": model.state_dict(), **progress}, tmp)
    os.replace(tmp, path)  # atomic: a crash mid-save never leaves a torn checkpoint


def broadcast_weights(model: tp.nn.Module) -> None:
    # Every rank must start from the same weights: gradients are averaged, so ranks that
    # start apart stay apart, each training a different model. A fresh Linear draws random
    # weights per process, and a rank may also have missed a checkpoint written while it was
    # away, so rank 0's weights (from its checkpoint or its own draw) go to everyone.
    with tp.no_grad():
        for param in model.parameters():
            dist.broadcast(param, src=0)


def average_gradients(model: tp.nn.Module, world: int) -> None:
    for param in model.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad)
            param.grad /= world


@record  # an uncaught error lands in the error file: the launcher's summary shows it
def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("TPELASTIC_RESTART_COUNT", "0"))
    os.makedirs(args.ckpt_dir, exist_ok=True)
    path = os.path.join(args.ckpt_dir, "checkpoint.pt")
    model = tp.nn.Linear(FEATURES, 1)
    state = load_checkpoint(path, model)
    broadcast_weights(model)
    optimizer = tp.optim.SGD(model.parameters(), lr=args.lr)
    dataset = make_dataset(args.samples)
    if rank == 0:
        where = (
            "from scratch"
            if state["world"] is None
            else (
                f"from checkpoint: epoch {state['epoch']}, sample {state['position']}, "
                f"step {state['step']} (saved by a world of {state['world']})"
            )
        )
        print(f"[train] world {world}, restart {restart}: starting {where}", flush=True)
    train(args, model, optimizer, dataset, state, path, rank, world, restart)
    dist.destroy_process_group()


def train(args, model, optimizer, dataset, state, path, rank, world, restart) -> None:
    step, start = int(state["step"]), int(state["position"])
    loss_fn = tp.nn.MSELoss()
    last = float("nan")  # the last batch's loss (nan when resumed after the last step)
    for epoch in range(int(state["epoch"]), args.epochs):
        sampler = ElasticDistributedSampler(dataset, seed=1234, position=start)
        sampler.set_epoch(epoch)
        loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
        for batch_no, (inputs, targets) in enumerate(loader, start=1):
            if args.crash_once_at and restart == 0 and rank == 1 and step == args.crash_once_at:
                raise RuntimeError(f"simulated failure of rank 1 at step {step}")
            optimizer.zero_grad()
            loss = loss_fn(model(inputs), targets)
            loss.backward()
            average_gradients(model, world)
            optimizer.step()
            last = loss.item()
            step += 1
            progress.step()  # a no-op unless the launcher watches for hangs (--stall-timeout)
            time.sleep(args.step_delay)
            position = sampler.position_after(batch_no * args.batch_size)
            if step % args.ckpt_every == 0 and rank == 0:
                save_checkpoint(path, model, epoch=epoch, position=position, step=step, world=world)
                print(
                    f"[train] epoch {epoch} step {step} loss {last:.5f} "
                    f"(checkpoint at sample {position})",
                    flush=True,
                )
        start = 0
    if rank == 0:
        save_checkpoint(path, model, epoch=args.epochs, position=0, step=step, world=world)
        print(f"[train] done: {step} steps, final loss {last:.5f}", flush=True)


if __name__ == "__main__":
    main()
