"""What a training script calls to tell Voda about its progress.

    import voda.training.report
    voda.training.report.epoch(epoch=3, seconds=41.7, workers=4, samples=50_000)
    voda.training.report.goodput(observations=[...], grad_sqr=..., grad_var=..., limits={...})

Only rank 0 reports (the rank is read from RANK, as set by torchrun and by the
local backend). The channel is named by the environment variable VODA_REPORT:

- a file path: one JSON object per line, {"epoch", "epoch_seconds", "workers",
  "time"} and "samples_per_second" when `samples` is given; the local backend
  tails this file and turns lines into EPOCH_REPORTED events;
- an http(s) URL of the service: the report is POSTed as JSON to
  `<url>/v1/jobs/<VODA_JOB>/metrics` with the bearer token from VODA_TOKEN
  (an URL that already ends in `/metrics` is used as it is).
  On Kubernetes the backend sets all three when it is given a `report_url`, with a
  token that may only report for this job (docs/design/006-kubernetes.md).

`goodput` (what a batch-adaptive job measures: step times per configuration,
gradient statistics, batch limits) goes to `<url>/v1/jobs/<VODA_JOB>/goodput` over
HTTP, or as a line {"goodput": {...}, "time"} to the report file, which the local
backend checks and fits as the service does (voda.core.goodput_report).

Standard library only, and a report failure never stops training: it is
written to stderr once and the call returns False.

A script stopped on purpose (SIGTERM from the backend, after checkpointing)
exits with STOPPED_EXIT_CODE so the backend can tell a graceful stop from a
crash.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

# EX_TEMPFAIL from sysexits.h: "try again later" - the job checkpointed and stopped.
STOPPED_EXIT_CODE = 75

REPORT_ENV = "VODA_REPORT"
JOB_ENV = "VODA_JOB"
TOKEN_ENV = "VODA_TOKEN"
HTTP_TIMEOUT_SECONDS = 5.0

_warned: set[str] = set()


def epoch(epoch: int, seconds: float, workers: int, samples: int | None = None) -> bool:
    """Report that `epoch` (1-based) took `seconds` on `workers` workers.

    `samples`, the samples trained in the epoch, adds the throughput to the
    report, from which the placer learns which layout suits the job's category.
    Returns True when the report was written or accepted; False when this rank
    does not report, no channel is configured, or the report failed.
    """
    if not is_reporting_rank():
        return False
    channel = os.environ.get(REPORT_ENV, "").strip()
    if not channel:
        return False
    payload: dict[str, float | int] = {
        "epoch": int(epoch), "epoch_seconds": float(seconds), "workers": int(workers)}
    if samples is not None and samples > 0 and seconds > 0:
        payload["samples_per_second"] = samples / float(seconds)
    try:
        if channel.startswith(("http://", "https://")):
            _post(channel, payload)
        else:
            _append(channel, {**payload, "time": time.time()})
    except Exception as exc:  # any failure to report must leave training running
        _warn_once(channel, f"voda.training.report: could not report epoch {epoch} to "
                            f"{channel}: {exc}")
        return False
    return True


def goodput(observations: Sequence[Mapping[str, float]], grad_sqr: float, grad_var: float,
            limits: Mapping[str, int], epoch_samples: float | None = None) -> bool:
    """Report a batch-adaptive job's measurements (POST /v1/jobs/<job>/goodput, or a line
    of the local backend's report file): each configuration run ({"nodes", "replicas",
    "atomic_bsz", "compute_seconds", "step_seconds"}), the gradient statistics and the
    batch limits ({"init_batch", "max_batch", "min_local", "max_local"}). Returns True
    when the service accepted it or the line was written; False on another rank, without
    a channel, or when it was refused (the reason is written to stderr once; the local
    backend writes its refusals to the job's log).
    """
    if not is_reporting_rank():
        return False
    channel = os.environ.get(REPORT_ENV, "").strip()
    if not channel:
        return False
    payload: dict[str, Any] = {"observations": [dict(o) for o in observations],
                               "grad_sqr": float(grad_sqr), "grad_var": float(grad_var),
                               "limits": dict(limits)}
    if epoch_samples is not None:
        payload["epoch_samples"] = float(epoch_samples)
    try:
        if channel.startswith(("http://", "https://")):
            _post(channel, payload, "goodput")
        else:
            _append(channel, {"goodput": payload, "time": time.time()})
    except Exception as exc:  # any failure to report must leave training running
        reason = str(exc)
        if isinstance(exc, urllib.error.HTTPError):  # the service says which field and why
            with contextlib.suppress(Exception):
                reason = f"{reason}: {exc.read(2000).decode(errors='replace')}"
        _warn_once(f"goodput {channel}", f"voda.training.report: could not report goodput to "
                   f"{channel}: {reason}")
        return False
    return True


def is_reporting_rank(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get("RANK", "0").strip() in ("", "0")


def metrics_url(base: str, job: str, endpoint: str = "metrics") -> str:
    """The service's `endpoint` (metrics, goodput) for `job` under the base URL `base`
    (a base that already ends in /metrics names the job: its last part is replaced)."""
    base = base.rstrip("/")
    if base.endswith("/metrics"):
        return f"{base.removesuffix('/metrics')}/{endpoint}"
    return f"{base}/v1/jobs/{urllib.parse.quote(job, safe='')}/{endpoint}"


def _post(base: str, payload: Mapping[str, Any], endpoint: str = "metrics") -> None:
    job = os.environ.get(JOB_ENV, "")
    url = metrics_url(base, job, endpoint)
    if not job and not base.rstrip("/").endswith("/metrics"):
        raise ValueError(f"{JOB_ENV} is not set, so the job's {endpoint} URL is unknown")
    headers = {"Content-Type": "application/json"}
    token = os.environ.get(TOKEN_ENV, "")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers=headers, method="POST"
    )
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as response:
        if response.status >= 300:
            raise OSError(f"HTTP {response.status}")


def _append(path: str, record: Mapping[str, Any]) -> None:
    # One write of one whole line to a file opened for appending: readers never see half a line
    # followed by someone else's line.
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _warn_once(channel: str, message: str) -> None:
    if channel in _warned:
        return
    _warned.add(channel)
    with contextlib.suppress(OSError):
        print(message, file=sys.stderr, flush=True)
