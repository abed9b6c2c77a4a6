"""What the report channel costs.

Figures:
- checking a bearer token: a report token (HMAC-SHA256 verify, constant-time compare)
  against a user's token (SHA-256 and a constant-time compare with each configured
  digest); medians over rounds of many checks, and their ratio;
- API requests per job: the requests the Kubernetes backend sends for a job's whole
  life (start on 2 workers, run, halt) on the fake cluster, without and with
  `report_url`, and the difference by verb on `secrets`.

    python bench/report_tokens.py [--rounds 15] [--checks 20000] [--jobs 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from voda.api.auth import Authenticator  # noqa: E402
from voda.api.report_tokens import ReportKeys, new_secret  # noqa: E402
from voda.backends.kubernetes.settings import KubernetesSettings  # noqa: E402
from voda.config import User, hash_token  # noqa: E402
from voda.core.model import Job  # noqa: E402
from voda_testing.kube.cluster import WORK_ANNOTATION  # noqa: E402
from voda_testing.kube.harness import FakeCluster, eventually  # noqa: E402
from voda_testing.kube.rbac import made_by  # noqa: E402


def per_check_us(check: object, token: str, checks: int, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        for _ in range(checks):
            check(token)  # type: ignore[operator]
        times.append((time.perf_counter() - began) / checks * 1e6)
    return statistics.median(times)


def token_checks(rounds: int, checks: int) -> None:
    keys = ReportKeys(new_secret())
    report = keys.mint("alice", "resnet50-20261124093000-a1b2c3", repr(time.time()))
    users = {hash_token(f"tok-user-{i:04d}-0123456789"): User(f"u{i}") for i in range(3)}
    authenticator = Authenticator(users)
    report_us = per_check_us(keys.verify, report, checks, rounds)
    user_us = per_check_us(authenticator.user_for, "tok-user-0002-0123456789", checks, rounds)
    print(f"token check, median of {rounds} rounds of {checks}: report token "
          f"{report_us:.2f} us, user token (3 configured) {user_us:.2f} us, "
          f"ratio {report_us / user_us:.2f}")


def document(name: str) -> dict:
    doc = yaml.safe_load((ROOT / "examples" / "pytorchjob.yaml").read_text())
    doc["metadata"]["name"] = name
    doc["metadata"]["annotations"][WORK_ANNOTATION] = "600"
    return doc


def job_requests(jobs: int, report_url: str) -> Counter[tuple[str, str]]:
    """(resource, verb) -> requests the backend sent for `jobs` jobs' whole lives."""
    with tempfile.TemporaryDirectory() as folder:
        cluster = FakeCluster.start(Path(folder))
        try:
            for i in range(jobs):
                cluster.sim.add_node(f"n{i}", 2)
            backend = cluster.backend(KubernetesSettings(unschedulable_seconds=2.0,
                                                         report_url=report_url))
            backend.running()
            names = [f"job-{i}" for i in range(jobs)]
            for i, name in enumerate(names):
                backend.specs[name] = document(name)
                if backend.report_tokens is not None:
                    backend.report_tokens[name] = f"vr1.token-{name}"
                backend.start(Job(name, 1, 2), ((f"n{i}", 2),))
            store = cluster.server.store
            eventually(lambda: sum(1 for p in store.list("pods", "default", "voda.io/job")[0]
                                   if p["spec"].get("nodeName")) == 2 * jobs, timeout=120)
            for name in names:
                backend.halt(Job(name, 1, 2))
            eventually(lambda: not store.list("pods", "default", "voda.io/job")[0]
                       and not store.list("secrets", "default")[0], timeout=120)
            backend.close()
            return Counter((resource, verb) for _, resource, verb, _, _ in
                           made_by(cluster.server.requests, "voda/")
                           if verb not in ("list", "watch"))
        finally:
            cluster.stop()


def api_requests(jobs: int) -> None:
    without = job_requests(jobs, "")
    with_channel = job_requests(jobs, "http://voda.voda.svc:8470")
    secrets = {verb: n for (resource, verb), n in sorted(with_channel.items())
               if resource == "secrets"}
    total_without, total_with = sum(without.values()), sum(with_channel.values())
    print(f"API writes and reads per job's life ({jobs} jobs, start, run, halt): "
          f"{total_without / jobs:.1f} without report_url, {total_with / jobs:.1f} with; "
          f"on secrets per job: " + ", ".join(f"{v} {n / jobs:.1f}"
                                               for v, n in secrets.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--checks", type=int, default=20_000)
    parser.add_argument("--jobs", type=int, default=10)
    args = parser.parse_args()
    token_checks(args.rounds, args.checks)
    api_requests(args.jobs)


if __name__ == "__main__":
    main()
