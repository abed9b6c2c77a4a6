"""A small elastic training job: a two-layer network on synthetic regression data.

Runs under torchrun or the Voda local backend (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT in the environment), or alone as one process. It uses
torch.distributed with gloo (nccl when CUDA is available) and DDP.

Elasticity:
- every epoch ends with an atomic checkpoint (model, optimizer, epoch, the
  samples done in it, RNG) in VODA_CHECKPOINT_DIR, written by rank 0;
- the run resumes from that checkpoint at ANY world size: each step takes the
  next global batch of a seeded permutation per epoch and splits it among the
  ranks (and their micro-batches), with the loss scaled so the ranks' gradient
  average equals the full-batch gradient; with --fixed-batch the weights do not
  depend on how many workers ran which step;
- on SIGTERM all ranks agree (an all-reduce of a stop flag at every step) to
  stop before the next step, rank 0 checkpoints the position inside the epoch
  and every rank exits with voda.training.report.STOPPED_EXIT_CODE (75);
- rank 0 appends each completed epoch to `<checkpoint dir>/epochs.jsonl`
  after the checkpoint is safe, so a lost or repeated epoch is visible, and
  reports it with voda.training.report.epoch.

Goodput (on unless --no-report-goodput): as an AdaptDL job does, rank 0 measures
per configuration (nodes, world size, per-rank micro-batch) the compute time
(forward and backward) and the whole step (with the gradient all-reduce and the
update), and the gradient statistics from the ranks' local gradients before they
are averaged (on one rank, from the two halves of its batch); it keeps them in
`<checkpoint dir>/goodput.json` across restarts (voda.training.goodput_meter) and reports
them after every epoch with voda.training.report.goodput. The gradients are averaged with
one all-reduce after the backward pass (no DDP), so the step is compute then sync.
Adaptive batch (the default; voda.training.adaptive_batch): as AdaptDL's data loader does, at
each (re)start and each epoch boundary rank 0 fits its measurements into the goodput
model the service fits and picks the global batch and its split (per-rank micro-batch,
accumulation steps) that maximise predicted goodput on the ranks it has, within
--init-batch (default --batch-size) .. --max-batch and --min-local .. --max-local; until
it has measured enough to fit, it trains at its initial batch. The learning rate is
scaled by AdaScale's gain. An epoch is --samples samples: a bigger batch takes fewer
steps. It reports an adaptive model (no fixed batch) with those limits and the epoch's
samples. --fixed-batch trains at --batch-size whatever the ranks, unscaled, and reports
it as its fixed batch.

`--sample-seconds` adds an emulated compute time per sample (a sleep on each
rank for its share of the batch) so epochs speed up with more workers, as on
GPUs, even on a machine with few cores; `--micro-batch-seconds` adds a fixed
emulated time per micro-batch (what makes a larger batch pay on a GPU: kernel
launches and per-step work that do not grow with the batch).
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

import voda.training.report  # noqa: E402
from voda.training.goodput_meter import GOODPUT_FILE, Configuration, GoodputMeter  # noqa: E402

CHECKPOINT = "checkpoint.pt"
EPOCH_RECORD = "epochs.jsonl"
FINAL = "final.json"
MAX_BATCH = 10_000_000  # the service's bound on a reported batch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=int(env.get("VODA_EPOCHS", "6")))
    parser.add_argument("--samples", type=int, default=1536, help="samples per epoch")
    parser.add_argument("--batch-size", type=int, default=96,
                        help="the global batch with --fixed-batch; else the default of "
                             "--init-batch, the adaptive batch's start")
    parser.add_argument("--fixed-batch", action="store_true",
                        help="train at --batch-size whatever the ranks (no adaptive batch)")
    parser.add_argument("--steps-per-epoch", type=int, default=None,
                        help="sets --samples to this many batches of --batch-size")
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--label-noise", type=float, default=0.05,
                        help="std of the noise on the targets (more: noisier gradients, so "
                             "larger batches lose less statistical efficiency)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample-seconds", type=float,
                        default=float(env.get("VODA_SAMPLE_SECONDS", "0")),
                        help="emulated compute time per sample (sleep)")
    parser.add_argument("--micro-batch-seconds", type=float, default=0.0,
                        help="emulated fixed compute time per micro-batch (sleep)")
    parser.add_argument("--report-goodput", action=argparse.BooleanOptionalAction,
                        default=True, help="measure and report the goodput model")
    parser.add_argument("--init-batch", type=int, default=None,
                        help="the batch the learning rate is set for (default: --batch-size)")
    parser.add_argument("--max-batch", type=int, default=None,
                        help="the largest global batch (default: --batch-size with "
                             "--fixed-batch, else 4 x --init-batch)")
    parser.add_argument("--min-local", type=int, default=1, help="the smallest per-rank batch")
    parser.add_argument("--max-local", type=int, default=None,
                        help="the largest per-rank batch (default: --batch-size with "
                             "--fixed-batch, else --max-batch)")
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
    for name in ("sample_seconds", "micro_batch_seconds", "label_noise"):
        if not 0 <= getattr(args, name) <= 10:
            parser.error(f"--{name.replace('_', '-')}: must be in [0, 10]")
    args.init_batch = args.batch_size if args.init_batch is None else args.init_batch
    if args.max_batch is None:
        args.max_batch = args.batch_size if args.fixed_batch else 4 * args.init_batch
    if args.max_local is None:
        args.max_local = args.batch_size if args.fixed_batch else args.max_batch
    if args.fixed_batch and not 1 <= args.init_batch <= args.batch_size <= args.max_batch:
        parser.error("--init-batch, --batch-size, --max-batch: need 1 <= init <= batch <= max")
    if not 1 <= args.init_batch <= args.max_batch <= MAX_BATCH:
        parser.error(f"--init-batch, --max-batch: need 1 <= init <= max <= {MAX_BATCH}")
    if not 1 <= args.min_local <= args.max_local <= args.max_batch:
        parser.error("--min-local, --max-local: need 1 <= min <= max <= --max-batch")
    return args


def batch_limits(args: argparse.Namespace) -> dict[str, int]:
    """What the goodput report says of the batch: no fixed batch unless --fixed-batch."""
    limits = {"init_batch": args.init_batch, "max_batch": args.max_batch,
              "min_local": args.min_local, "max_local": args.max_local}
    return {**limits, "fixed_batch": args.batch_size} if args.fixed_batch else limits


def nodes_in_placement(world: int) -> int:
    """How many (virtual) nodes the ranks run on, from VODA_PLACEMENT ('node:count,...')."""
    nodes = 0
    for part in os.environ.get("VODA_PLACEMENT", "").split(","):
        _, _, count = part.rpartition(":")
        if count.strip().isdigit() and int(count) > 0:
            nodes += 1
    return min(max(nodes, 1), world)


def log(message: str) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"voda-train: {message}", flush=True)


def make_data(args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.samples, args.features, generator=g)
    w1 = torch.randn(args.features, 8, generator=g) / math.sqrt(args.features)
    w2 = torch.randn(8, 1, generator=g)
    y = torch.tanh(x @ w1) @ w2 + args.label_noise * torch.randn(args.samples, 1, generator=g)
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


def local_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                   scale: float) -> torch.Tensor:
    """The flat gradient of `scale` x the squared error summed over (x, y)."""
    params = list(model.parameters())
    loss = ((model(x) - y) ** 2).sum() * scale
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)])


def set_gradient(model: nn.Module, flat: torch.Tensor) -> None:
    offset = 0
    for p in model.parameters():
        p.grad = flat[offset:offset + p.numel()].view_as(p).clone()
        offset += p.numel()


def plan_batch(args: argparse.Namespace, meter: GoodputMeter | None, rank: int, world: int,
               device: torch.device) -> tuple[int, int, int, float]:
    """(global batch, per-rank micro-batch, accumulation steps, learning-rate factor) to
    train at until the next epoch: decided on rank 0 (the one that measures), broadcast
    so every rank trains at the same. Called by every rank together."""
    if args.fixed_batch:
        return args.batch_size, math.ceil(args.batch_size / world), 0, 1.0
    decision = torch.zeros(4, dtype=torch.float64)
    if rank == 0:
        from voda.core.goodput_report import BatchLimits
        from voda.training.adaptive_batch import decide  # NumPy and SciPy: on rank 0 only

        limits = BatchLimits(args.init_batch, args.max_batch, args.min_local, args.max_local)
        values = None if meter is None else meter.report_values(batch_limits(args),
                                                                args.samples)
        plan = decide(limits, values, nodes_in_placement(world), world, args.samples)
        decision = torch.tensor([plan.batch, plan.atomic_bsz, plan.accum_steps,
                                 plan.lr_factor], dtype=torch.float64)
        log(f"batch {plan.batch} on {world} ranks ({plan.atomic_bsz} a rank x "
            f"{plan.accum_steps + 1} micro-batches), learning rate x {plan.lr_factor:.3g}, "
            + (f"predicted goodput {plan.goodput:.4g}" if plan.fitted else "initial batch"))
    if world > 1:
        decision = decision.to(device)
        dist.broadcast(decision, src=0)
    batch, atomic, accum, factor = decision.cpu().tolist()
    return int(batch), int(atomic), int(accum), float(factor)


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
    epoch, sample = 0, 0
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        epoch = int(state["epoch"])
        # (A checkpoint of before the adaptive batch counts steps of --batch-size.)
        sample = int(state.get("sample", int(state.get("step", 0)) * args.batch_size))
    for p in model.parameters():  # every rank starts from rank 0's weights
        dist.broadcast(p.data, src=0)
    measuring = args.report_goodput  # on every rank: the all-reduce carries the statistics
    meter = GoodputMeter.load(ckpt_dir / GOODPUT_FILE, args.init_batch) if (
        measuring and rank == 0) else None
    nodes = nodes_in_placement(world)
    log(f"world size {world} ({backend}), resuming at epoch {epoch + 1} sample {sample + 1}"
        if state is not None else f"world size {world} ({backend}), starting")
    batch_size, atomic, accum, lr_factor = plan_batch(args, meter, rank, world, device)

    def within_limits() -> bool:
        """Whether the split is one the limits allow (with more ranks than max_batch /
        min_local none is: its times would make every later report refused)."""
        return (args.min_local <= atomic <= args.max_local
                and world * atomic * (accum + 1) <= args.max_batch)

    legal = within_limits()

    def checkpoint(at_epoch: int, at_sample: int) -> None:
        if rank == 0:
            save_checkpoint(ckpt_path, {
                "epoch": at_epoch, "sample": at_sample, "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "rng": torch.get_rng_state(),
            })
        if meter is not None:
            meter.end_epoch()
            meter.save(ckpt_dir / GOODPUT_FILE)

    def train_step(batch: torch.Tensor) -> None:
        """One optimiser step on the global `batch`: each rank's gradient of its shard, in
        accum + 1 micro-batches (on one rank without accumulation, in two halves), each
        with its emulated compute; one all-reduce of the summed gradient with the
        replicas' gradient statistics; the update at the scaled learning rate."""
        started = time.perf_counter()
        shard = batch.tensor_split(world)[rank]
        micro = shard.tensor_split(accum + 1)
        halves = measuring and world == 1 and accum == 0 and len(shard) >= 2
        scale = world / len(batch)  # the ranks' average is the full batch's mean gradient
        grads: list[torch.Tensor] = []
        pieces: list[torch.Tensor] = []
        for part in micro:
            for piece in (part.tensor_split(2) if halves else (part,)):
                pieces.append(piece)
                grads.append(local_gradient(model, x_all[piece].to(device),
                                            y_all[piece].to(device), scale))
            if args.sample_seconds or args.micro_batch_seconds:
                time.sleep(args.micro_batch_seconds + len(part) * args.sample_seconds)
        computed = time.perf_counter()
        local_sqr = 0.0
        if measuring:
            # sum_i (b_i / B) |mean gradient of piece i|^2, this rank's pieces (the mean
            # gradient of piece i is its gradient x B / (world b_i)).
            local_sqr = sum(float(g.double().pow(2).sum()) * len(batch) / (world ** 2 * len(p))
                            for g, p in zip(grads, pieces, strict=True) if len(p))
        buffer = torch.cat([sum(grads[1:], grads[0]).double(), torch.tensor(
            [local_sqr, sum(1 for p in pieces if len(p))], dtype=torch.float64,
            device=device)])
        if world > 1:
            dist.all_reduce(buffer)
        mean = (buffer[:-2] / world).float()
        set_gradient(model, mean)
        for group in optimizer.param_groups:
            group["lr"] = args.lr * lr_factor
        optimizer.step()
        if meter is not None:
            if len(batch) == batch_size and legal:  # a configuration's times: full steps
                # The model's step: accum micro-batches of compute, then one with the sync.
                compute = (computed - started) / (accum + 1)
                meter.step(Configuration(nodes, world, atomic), compute,
                           time.perf_counter() - started - accum * compute)
            count = int(buffer[-1])
            if count > 1:
                meter.gradients(float(buffer[-2]), float(mean.double().pow(2).sum()),
                                count, len(batch))

    first_step = first_epoch = True  # (first_epoch: the first completed in this process)
    while epoch < args.epochs:
        perm = torch.randperm(args.samples, generator=torch.Generator().manual_seed(
            args.seed * 100_003 + epoch))
        started, samples_here = time.perf_counter(), 0
        while sample < args.samples:
            if agree_to_stop(device):
                checkpoint(epoch, sample)
                log(f"stopped before epoch {epoch + 1} sample {sample + 1}, checkpoint saved")
                exit_now(voda.training.report.STOPPED_EXIT_CODE)
            step_batch = perm[sample:sample + batch_size]
            train_step(step_batch)
            sample += len(step_batch)
            samples_here += len(step_batch)
            if first_step:
                first_step = False
                log(f"training at world size {world} (epoch {epoch + 1} sample {sample}) "
                    f"t={time.time():.3f}")
        seconds = (time.perf_counter() - started) * args.samples / max(1, samples_here)
        epoch, sample = epoch + 1, 0
        checkpoint(epoch, 0)
        if rank == 0:
            append_line(ckpt_dir / EPOCH_RECORD, {
                "epoch": epoch, "workers": world, "seconds": seconds, "time": time.time(),
                "batch_size": batch_size, "atomic_bsz": atomic, "accum_steps": accum,
                "lr_factor": lr_factor, "restarted": first_epoch})
            first_epoch = False
            voda.training.report.epoch(epoch, seconds, world, samples=args.samples)
            if meter is not None:
                meter.report(batch_limits(args), epoch_samples=args.samples)
            log(f"epoch {epoch}/{args.epochs} done in {seconds:.2f} s on {world} workers")
        if epoch < args.epochs:
            batch_size, atomic, accum, lr_factor = plan_batch(args, meter, rank, world, device)
            legal = within_limits()
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
