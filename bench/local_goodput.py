"""What measuring and reporting the goodput model costs the example training job.

    .venv/bin/python bench/local_goodput.py [--repeats 3] [--epochs 6] [--steps 16]
                                            [--sample-seconds 0 --sample-seconds 0.0005]

1. Training: examples/local/train.py at --fixed-batch on 1 and 2 ranks
   (torch.distributed.run, gloo on CPU), with --report-goodput and with
   --no-report-goodput, each --repeats times; the
   median epoch time (the first epoch of each run left out: start-up) and the ratio on /
   off. With goodput on, one rank computes its batch's gradient in two halves (the
   gradient statistics need two parts of a batch) and every step computes two squared
   norms; the tiny example network makes this the worst case.
2. Per epoch, on rank 0: the meter's bookkeeping (medians of the epoch's step times,
   the file kept in the checkpoint directory, the report line written): median ms, and
   as a share of the median epoch time of (1).
3. In the local backend: reading and fitting one report line of the runs of (1)
   (voda.core.goodput_report: checks, SciPy fit, the fit's check): median ms.
4. The adaptive batch: per epoch, rank 0's decision (voda.training.adaptive_batch.decide: the
   same fit, then the batch search) on the report lines of (1), median ms and as a share
   of the adaptive job's median epoch in (5); once per start, importing it (NumPy,
   SciPy) on rank 0.
5. Adaptive against fixed batch on 2 ranks, with 20 ms of emulated fixed compute a
   micro-batch and noisy labels (a job whose larger batches pay): the median epoch time
   (epochs 3 on: the adaptive job has measured) and the batches the adaptive job chose.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from voda.blas import serial_blas  # noqa: E402
from voda.core.goodput import fit_perf_params  # noqa: E402
from voda.core.goodput_report import (  # noqa: E402
    BatchLimits,
    model_of,
    report_from_values,
)
from voda.training.adaptive_batch import decide  # noqa: E402
from voda.training.goodput_meter import GOODPUT_FILE, Configuration, GoodputMeter  # noqa: E402

TRAIN = ROOT / "examples" / "local" / "train.py"


def run_training(folder: Path, world: int, goodput: bool, epochs: int, steps: int,
                 sample_seconds: float, extra: tuple[str, ...] = ("--fixed-batch",)
                 ) -> list[float]:
    """Epoch seconds of one run (its first epoch left out)."""
    env = {**os.environ, "VODA_REPORT": str(folder / "reports.jsonl"), "OMP_NUM_THREADS": "1",
           "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "PYTHONPATH": str(ROOT),
           "VODA_PLACEMENT": f"local:{world}"}
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
            f"--nproc-per-node={world}", str(TRAIN), "--epochs", str(epochs),
            "--steps-per-epoch", str(steps), "--sample-seconds", str(sample_seconds),
            "--checkpoint-dir", str(folder / "checkpoint"),
            "--report-goodput" if goodput else "--no-report-goodput", *extra]
    subprocess.run(argv, env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.STDOUT, timeout=600)
    lines = (folder / "checkpoint" / "epochs.jsonl").read_text().splitlines()
    return [float(json.loads(line)["seconds"]) for line in lines[1:]]


def report_lines(folder: Path) -> list[dict]:
    path = folder / "reports.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r["goodput"] for r in records if "goodput" in r]


def bookkeeping_ms(folder: Path, steps: int, repeats: int) -> float:
    """Median ms of one epoch's end on rank 0: medians, the kept file, the report line."""
    os.environ["VODA_REPORT"] = str(folder / "bookkeeping.jsonl")
    os.environ["RANK"] = "0"
    meter = GoodputMeter(96)
    limits = {"init_batch": 96, "max_batch": 96, "min_local": 1, "max_local": 96,
              "fixed_batch": 96}
    times = []
    for i in range(repeats):
        config = Configuration(1, 1 + i % 4, 96 // (1 + i % 4))
        for _ in range(steps):
            meter.step(config, 0.01, 0.012)
            meter.gradients(2.0, 1.0, 2, 96)
        started = time.perf_counter()
        meter.end_epoch()
        meter.save(folder / GOODPUT_FILE)
        meter.report(limits, epoch_samples=1536)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def import_seconds(module: str) -> float:
    """Seconds a fresh interpreter takes to import `module`, less its bare start-up."""
    def run(code: str) -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
        return time.perf_counter() - started
    return statistics.median(run(f"import {module}") - run("pass") for _ in range(5))


def adaptive_against_fixed(base: Path, repeats: int, epochs: int, steps: int) -> float:
    """Prints the comparison; returns the adaptive job's median epoch seconds."""
    emulated = ("--micro-batch-seconds", "0.02", "--label-noise", "1", "--batch-size", "32",
                "--max-batch", "256")
    times: dict[str, list[float]] = {"fixed": [], "adaptive": []}
    batches: list[int] = []
    for r in range(repeats):
        for mode in ("fixed", "adaptive"):
            folder = base / f"mode-{mode}-{r}"
            extra = (*emulated, "--fixed-batch") if mode == "fixed" else emulated
            times[mode] += run_training(folder, 2, True, epochs, steps, 0.0002, extra)[1:]
            if mode == "adaptive":
                lines = (folder / "checkpoint" / "epochs.jsonl").read_text().splitlines()
                batches += [int(json.loads(line)["batch_size"]) for line in lines[2:]]
    fixed, adaptive = (statistics.median(times[m]) for m in ("fixed", "adaptive"))
    print(f"\n2 ranks, 20 ms fixed compute a micro-batch, batch 32 fixed: median epoch "
          f"{fixed:.3f} s; adaptive (32..256): {adaptive:.3f} s = {adaptive / fixed:.2f}x, "
          f"at batches {min(batches)}..{max(batches)} (median {statistics.median(batches):g})")
    return adaptive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--steps", type=int, default=16, help="steps per epoch")
    parser.add_argument("--sample-seconds", type=float, action="append", default=None,
                        help="emulated compute per sample (repeatable; default 0 and 0.0005)")
    args = parser.parse_args()
    sample_seconds = args.sample_seconds or [0.0, 0.0005]
    fit_ms: list[float] = []
    decide_ms: list[float] = []
    medians: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        print("| ranks | emulated s/sample | epoch s, goodput off | epoch s, on | on / off |")
        print("|---|---|---|---|---|")
        for seconds in sample_seconds:
            for world in (1, 2):
                times: dict[bool, list[float]] = {False: [], True: []}
                for r in range(args.repeats):  # off and on in turn: drift hits both
                    for goodput in (False, True):
                        folder = base / f"w{world}-s{seconds}-g{int(goodput)}-{r}"
                        times[goodput] += run_training(folder, world, goodput, args.epochs,
                                                       args.steps, seconds)
                        if goodput:
                            for values in report_lines(folder):
                                started = time.perf_counter()
                                with serial_blas():
                                    model_of(report_from_values(values, 4), 4)
                                fit_ms.append((time.perf_counter() - started) * 1000)
                                fit_perf_params.cache_clear()  # as on rank 0: unfitted
                                started = time.perf_counter()
                                decide(BatchLimits(96, 384, 1, 384), values, 1, world,
                                       values.get("epoch_samples"))
                                decide_ms.append((time.perf_counter() - started) * 1000)
                epoch = {on: statistics.median(t) for on, t in times.items()}
                medians.append(epoch[True])
                print(f"| {world} | {seconds:g} | {epoch[False]:.4f} | {epoch[True]:.4f} | "
                      f"{epoch[True] / epoch[False]:.3f} |")
        book = bookkeeping_ms(base, args.steps, 200)
        adaptive_epoch = adaptive_against_fixed(base, args.repeats, args.epochs, args.steps)
    shortest = min(medians)
    print(f"\nper epoch on rank 0 (medians, the kept file, the report line): median "
          f"{book:.3f} ms = {book / 1000 / shortest:.2%} of the shortest median epoch "
          f"({shortest:.3f} s)")
    print(f"local backend, one report line read and fitted: median "
          f"{statistics.median(fit_ms):.1f} ms, max {max(fit_ms):.1f} ms "
          f"({len(fit_ms)} lines of 1-2 configurations)")
    decision = statistics.median(decide_ms)
    print(f"adaptive batch, rank 0's decision per epoch (fit and search): median "
          f"{decision:.1f} ms = {decision / 1000 / adaptive_epoch:.2%} of the adaptive job's "
          f"median epoch; "
          f"importing voda.training.adaptive_batch once per start: "
          f"{import_seconds('voda.training.adaptive_batch'):.2f} s")


if __name__ == "__main__":
    main()
