"""How a job's ranks are started: their environment, their command line, their processes.

Three launchers: "fork" (ranks forked by the warm `Zygote`), "direct" (one fresh
interpreter per rank, all in the first rank's process group) and "torchrun" (one
`torch.distributed.run` process that starts the ranks itself).
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from voda.backends.local.paths import CHECKPOINT_DIR, PROJECT_ROOT, REPORT_FILE
from voda.backends.local.process import Process, kill_all
from voda.backends.local.run import Run
from voda.backends.local.zygote import PYTHON_NAMES, Zygote

LAUNCHERS = ("fork", "direct", "torchrun")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def environment(extra_env: Mapping[str, str], report_token: str | None,
                run: Run | None = None, world: int = 0,
                report_url: str | None = None) -> dict[str, str]:
    """The environment of a job's ranks (of `run` at `world` ranks), or of the fork launcher."""
    env = {**os.environ, **extra_env}
    voda_root = str(PROJECT_ROOT)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update(
        TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join([voda_root, *[p for p in paths if p != voda_root]]),
    )
    if run is not None:
        env.update(
            VODA_JOB=run.name,
            VODA_CHECKPOINT_DIR=str((run.dir / CHECKPOINT_DIR).resolve()),
            VODA_REPORT=report_url or str((run.dir / REPORT_FILE).resolve()),
            VODA_EPOCHS=str(run.job.epochs),
            VODA_WORKERS=str(world),
            VODA_PLACEMENT=",".join(f"{n}:{c}" for n, c in run.desired),
        )
    if report_token:
        env["VODA_TOKEN"] = report_token
    return env


def rank_environments(env: dict[str, str], world: int, gpus: list[str]) -> list[dict[str, str]]:
    """What torchrun would set for each rank, on a free port."""
    base = {**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
            "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world), "GROUP_RANK": "0",
            "ROLE_WORLD_SIZE": str(world), "TORCHELASTIC_RUN_ID": "voda"}
    envs = []
    for rank in range(world):
        rank_env = {**base, "RANK": str(rank), "LOCAL_RANK": str(rank),
                    "ROLE_RANK": str(rank)}
        if gpus:  # one GPU per rank, seen as device 0
            rank_env["CUDA_VISIBLE_DEVICES"] = gpus[rank]
            rank_env["LOCAL_RANK"] = "0"
        envs.append(rank_env)
    return envs


def python_argv(python: str, argv: list[str]) -> list[str]:
    """`argv` with a leading `python` replaced by the backend's interpreter."""
    if PYTHON_NAMES.match(Path(argv[0]).name):
        return [python, *argv[1:]]
    return argv


def torchrun_argv(python: str, argv: list[str], world: int) -> list[str]:
    launch = [python, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
              f"--nproc-per-node={world}"]
    if PYTHON_NAMES.match(Path(argv[0]).name):
        return [*launch, *argv[1:]]
    return [*launch, "--no-python", *argv]


def popen(argv: list[str], env: dict[str, str], cwd: Path, log: IO[bytes],
          group: int | None) -> subprocess.Popen[bytes]:
    """Start `argv` with its output in `log`, in process group `group` (None: a new one)."""
    return subprocess.Popen(
        argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
        stderr=subprocess.STDOUT, close_fds=True,
        # A new process group (in our session, so the other ranks may join it).
        process_group=0 if group is None else group,
    )


def start_direct(program: list[str], envs: Sequence[dict[str, str]], cwd: Path,
                 log: IO[bytes]) -> list[Process]:
    """One process per rank environment, all in the first one's process group."""
    procs: list[Process] = []
    for rank_env in envs:
        try:
            procs.append(popen(program, rank_env, cwd, log, procs[0].pid if procs else None))
        except OSError:
            kill_all(procs)
            raise
    return procs


def start_forked(zygote: Zygote | None, argv: list[str], envs: Sequence[dict[str, str]],
                 cwd: Path, log: Path) -> list[Process]:
    """One rank per rank environment, forked by the fork launcher (each in its own group)."""
    if zygote is None:
        raise OSError("the fork launcher is not running")
    procs: list[Process] = []
    for rank_env in envs:
        try:
            procs.append(zygote.spawn(argv, rank_env, cwd, log))
        except OSError:
            kill_all(procs)
            raise
    return procs
