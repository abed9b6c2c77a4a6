"""The local backend: real elastic training processes on this machine.

One slot per GPU (or, without GPUs, `os.cpu_count()` CPU slots) shown as one
node or as several virtual nodes (`nodes="2x2"`). A job placed on W slots runs
as W ranks of its command, with RANK / LOCAL_RANK / WORLD_SIZE / MASTER_ADDR /
MASTER_PORT set as torchrun sets them (a free port per launch), plus
VODA_JOB, VODA_CHECKPOINT_DIR, VODA_REPORT, VODA_EPOCHS,
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 and OMP_NUM_THREADS=1. Launchers:

- "fork" (default): a warm launcher process imports torch once and forks each
  rank of a Python command from itself, so a restart costs no interpreter or
  torch start-up (see docs/design/005-local-backend.md);
- "direct": one fresh `python` process per rank, in one process group;
- "torchrun": `python -m torch.distributed.run --standalone --nnodes=1
  --nproc-per-node=W`.

Actions:
- start: launch at the placement's size (resuming from the job's checkpoint
  when there is one);
- scale (rescale or migration): graceful stop - SIGTERM to the ranks' process
  groups, the job checkpoints and exits, SIGKILL after `stop_timeout` - then a
  launch at the new size, from the checkpoint;
- halt: graceful stop; delete: graceful stop, then the checkpoint is removed.

The calls return at once; a monitor thread carries them out, so a launch
waits until the slots it needs are released by the processes that held them
(frees before takes, as the plan orders them). The monitor also tails each
job's report file (see voda.training.report) into EPOCH_REPORTED events (and goodput
reports, checked and fitted, into GOODPUT_REPORTED events) and turns exits
into JOB_COMPLETED (exit 0) or JOB_FAILED (a non-zero exit the backend did not
ask for, with the exit code and the log's last lines).

Per job, under `<run_dir>/<job>/`: `log.txt` (all ranks, appended across
restarts), `reports.jsonl`, `checkpoint/` and, while processes run,
`state.json` (process ids and placement), from which a new backend adopts
processes left running by a previous one.

Modules (each has one job):

- `backend`: `LocalBackend` - the Backend protocol, desired state, the monitor loop;
- `launch`: the ranks' environment and command lines; starting them (direct, forked);
- `zygote`: the warm fork launcher, both its client (`Zygote`) and its loop;
- `run`: `Run`, what the backend knows of one job, and the job's log, reports, state.json;
- `outcome`: what an exit of all of a job's ranks means (completed, stopped, failed);
- `process`: handles on ranks (ours or adopted), liveness, signals, exit descriptions;
- `nodes`: slots and (virtual) nodes, GPU detection, which slots a placement gets;
- `paths`: the run dir, job directories and their file names, a log's tail;
- `settings`: `from_settings`, the backend of `voda serve --backend local`;
- `__main__`: `python -m voda.backends.local zygote MODULE...`, the fork launcher's entry.
"""

from voda.backends.local.backend import MAX_LAUNCHER_FAILURES, CommandSource, LocalBackend
from voda.backends.local.launch import LAUNCHERS, free_port
from voda.backends.local.nodes import Slot, detect_gpus, parse_nodes
from voda.backends.local.paths import (
    CHECKPOINT_DIR,
    EXAMPLE_TRAIN_SCRIPT,
    LOG_FILE,
    LOG_TAIL_CHARS,
    LOG_TAIL_LINES,
    REPORT_FILE,
    SAFE_NAME,
    STATE_FILE,
    default_run_dir,
    job_dir,
    read_tail,
)
from voda.backends.local.process import UNKNOWN_EXIT, describe_exit
from voda.backends.local.settings import from_settings
from voda.backends.local.zygote import (
    FORK_PRELOAD,
    PYTHON_NAMES,
    ZYGOTE_START_TIMEOUT,
    forkable,
    zygote_main,
)

__all__ = [
    "CHECKPOINT_DIR",
    "EXAMPLE_TRAIN_SCRIPT",
    "FORK_PRELOAD",
    "LAUNCHERS",
    "LOG_FILE",
    "LOG_TAIL_CHARS",
    "LOG_TAIL_LINES",
    "MAX_LAUNCHER_FAILURES",
    "PYTHON_NAMES",
    "REPORT_FILE",
    "SAFE_NAME",
    "STATE_FILE",
    "UNKNOWN_EXIT",
    "ZYGOTE_START_TIMEOUT",
    "CommandSource",
    "LocalBackend",
    "Slot",
    "default_run_dir",
    "describe_exit",
    "detect_gpus",
    "forkable",
    "free_port",
    "from_settings",
    "job_dir",
    "parse_nodes",
    "read_tail",
    "zygote_main",
]
