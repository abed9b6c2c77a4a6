"""A small elastic training job: a two-layer network on synthetic regression data.

Runs under torchrun or the Voda local backend (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT in the environment), or alone as one process. It uses
torch.distributed with gloo (nccl when CUDA is available) and DDP.

Elasticity:
- every epoch ends with an atomic checkpoint (model, optimizer, epoch, step,
  RNG) in VODA_CHECKPOINT_DIR, written by rank 0;
- the run resumes from that checkpoint at ANY world size: each step takes the
  same global batch (a seeded permutation per epoch) and splits it among the
  ranks, with the loss scaled so DDP's gradient average equals the full-batch
  gradient; so the weights do not depend on how many workers ran which step;
- on SIGTERM all ranks agree (an all-reduce of a stop flag at every step) to
  stop before the next step, rank 0 checkpoints the position inside the epoch
  and every rank exits with voda.report.STOPPED_EXIT_CODE (75);
- rank 0 appends each completed epoch to `<checkpoint dir>/epochs.jsonl`
  after the checkpoint is safe, so a lost or repeated epoch is visible, and
  reports it with voda.report.epoch.

`--sample-seconds` adds an emulated compute time per sample (a sleep on each
rank for its share of the batch) so epochs speed up with more workers, as on
GPUs, even on a machine with few cores.
"""

from __future__ import annotations

import signal

# Installed before the slow imports so an early SIGTERM is not fatal.
_stop_requested = False


def _on_sigterm(signum: int, frame: object) -> None:
    global _stop_requested
    _stop_requested = True


signal.signal(signal.SIGTERM, _on_sigterm)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from datetime import timedelta  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import voda.report  # noqa: E402

CHECKPOINT = "checkpoint.pt"
EPOCH_RECORD = "epochs.jsonl"
FINAL = "final.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=int(env.get("VODA_EPOCHS", "6")))
    parser.add_argument("--samples", type=int, default=1536, help="samples per epoch")
    parser.add_argument("--batch-size", type=int, default=96, help="global batch size")
    parser.add_argument("--steps-per-epoch", type=int, default=None,
                        help="sets --samples to this many global batches")
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample-seconds", type=float,
                        default=float(env.get("VODA_SAMPLE_SECONDS", "0")),
                        help="emulated compute time per sample (sleep)")
    parser.add_argument("--checkpoint-dir",
                        default=env.get("VODA_CHECKPOINT_DIR") or
                        os.path.join("checkpoints", env.get("VODA_JOB", "train")))
    args = parser.parse_args(argv)
    if args.steps_per_epoch is not None:
        if args.steps_per_epoch < 1:
            parser.error("--steps-per-epoch: must be at least 1")
        args.samples = args.steps_per_epoch * args.batch_size
    for name in ("epochs", "samples", "batch_size", "features", "hidden"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be at least 1")
    if args.sample_seconds < 0:
        parser.error("--sample-seconds: must not be negative")
    return args


def log(message: str) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"voda-train: {message}", flush=True)


def make_data(args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.samples, args.features, generator=g)
    w1 = torch.randn(args.features, 8, generator=g) / math.sqrt(args.features)
    w2 = torch.randn(8, 1, generator=g)
    y = torch.tanh(x @ w1) @ w2 + 0.05 * torch.randn(args.samples, 1, generator=g)
    return x, y


def make_model(args: argparse.Namespace) -> nn.Module:
    torch.manual_seed(args.seed)
    return nn.Sequential(
        nn.Linear(args.features, args.hidden), nn.Tanh(), nn.Linear(args.hidden, 1)
    )


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write then rename: a reader sees the old checkpoint or the new one, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(state, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def append_line(path: Path, record: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def init_distributed() -> tuple[int, int, torch.device, str]:
    if "WORLD_SIZE" not in os.environ:  # run by hand: a group of one
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    if use_cuda:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, timeout=timedelta(seconds=60))
    return dist.get_rank(), dist.get_world_size(), device, backend


def exit_now(code: int) -> None:
    """Exit at once, skipping interpreter teardown.

    Everything that must last (checkpoint, records) is on disk by now. Tearing down DDP and
    the gloo process group while the peers are exiting too can block a rank for seconds.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def agree_to_stop(device: torch.device) -> bool:
    """True on every rank as soon as any rank was asked to stop."""
    flag = torch.tensor([1.0 if _stop_requested else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item() > 0)


def train(args: argparse.Namespace) -> int:
    ckpt_dir = Path(args.checkpoint_dir)
    ckpt_path = ckpt_dir / CHECKPOINT
    state: dict[str, Any] | None = None
    if ckpt_path.exists():
        state = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        if state["epoch"] >= args.epochs:
            log(f"all {args.epochs} epochs already done")
            return 0
    rank, world, device, backend = init_distributed()
    if rank == 0:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
    x_all, y_all = make_data(args)
    model = make_model(args).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    epoch, step = 0, 0
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        epoch, step = int(state["epoch"]), int(state["step"])
    ddp = DistributedDataParallel(model)
    steps_per_epoch = math.ceil(args.samples / args.batch_size)
    log(f"world size {world} ({backend}), resuming at epoch {epoch + 1} step {step + 1}"
        if state is not None else f"world size {world} ({backend}), starting")

    def checkpoint(at_epoch: int, at_step: int) -> None:
        if rank == 0:
            save_checkpoint(ckpt_path, {
                "epoch": at_epoch, "step": at_step, "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "rng": torch.get_rng_state(),
            })

    first_step = True
    while epoch < args.epochs:
        perm = torch.randperm(args.samples, generator=torch.Generator().manual_seed(
            args.seed * 100_003 + epoch))
        started, steps_here = time.perf_counter(), 0
        while step < steps_per_epoch:
            if agree_to_stop(device):
                checkpoint(epoch, step)
                log(f"stopped before epoch {epoch + 1} step {step + 1}, checkpoint saved")
                exit_now(voda.report.STOPPED_EXIT_CODE)
            batch = perm[step * args.batch_size:(step + 1) * args.batch_size]
            shard = batch.tensor_split(world)[rank]
            x, y = x_all[shard].to(device), y_all[shard].to(device)
            loss = ((ddp(x) - y) ** 2).sum() * world / len(batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if args.sample_seconds:
                time.sleep(len(shard) * args.sample_seconds)
            step += 1
            steps_here += 1
            if first_step:
                first_step = False
                log(f"training at world size {world} (epoch {epoch + 1} step {step}) "
                    f"t={time.time():.3f}")
        seconds = (time.perf_counter() - started) * steps_per_epoch / max(1, steps_here)
        epoch, step = epoch + 1, 0
        checkpoint(epoch, 0)
        if rank == 0:
            append_line(ckpt_dir / EPOCH_RECORD, {
                "epoch": epoch, "workers": world, "seconds": seconds, "time": time.time()})
            voda.report.epoch(epoch, seconds, world, samples=args.samples)
            log(f"epoch {epoch}/{args.epochs} done in {seconds:.2f} s on {world} workers")
    if rank == 0:
        with torch.no_grad():
            final_loss = float(((model(x_all.to(device)) - y_all.to(device)) ** 2).mean())
        params = torch.cat([p.detach().flatten().cpu() for p in model.parameters()])
        (ckpt_dir / FINAL).write_text(json.dumps({
            "loss": final_loss, "params": params.tolist(), "epochs": args.epochs}))
        log(f"finished {args.epochs} epochs, loss {final_loss:.5f}")
    dist.barrier()  # rank 0's files are written before any rank is seen to finish
    exit_now(0)
    return 0


def main(argv: list[str] | None = None) -> int:
    return train(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
