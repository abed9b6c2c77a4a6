"""Per-job results of every recorded simulation case against the digests of commit 9ddda88.

A case is a workload (Pollux workloads 1-4 at every load under the artifact's settings,
workloads 1-4 event-driven under the defaults, the first 2,000 and 10,000 jobs of the
Philly trace) with one built-in algorithm; tests/results_digest.py defines them and the
digest (SHA-256 of each job's JCT, start, GPU-seconds and counts). `--write` records the
digests of this checkout in tests/results_digests.json (run it on the reference commit);
the default checks every case and prints the ones that differ.

Run: .venv/bin/python bench/results_digest.py [--write] [--only SUBSTRING] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.results_digest import DIGESTS, Case, all_cases, digest, recorded, run_case  # noqa: E402


def one(case: Case) -> tuple[str, str, float]:
    started = time.process_time()
    return case.key, digest(run_case(case)), time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="record this checkout's digests")
    parser.add_argument("--only", default="", help="only the cases whose key has this text")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    if not 1 <= args.workers <= 64:
        raise SystemExit("--workers: between 1 and 64")
    expected = {} if args.write else recorded()
    cases = [c for c in all_cases() if args.only in c.key and (args.write or c.key in expected)]
    if not args.write:
        print(f"{len(cases)} recorded cases to check")
    found: dict[str, str] = {}
    differ = 0
    with ProcessPoolExecutor(args.workers) as pool:
        for key, value, seconds in pool.map(one, cases):
            found[key] = value
            same = "recorded" if args.write else (
                "same" if expected.get(key) == value else "DIFFERS")
            differ += same == "DIFFERS"
            print(f"{key:60s} {seconds:7.2f} CPU-s  {same}", flush=True)
    if args.write:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout.strip()
        DIGESTS.write_text(json.dumps({"commit": commit, "digests": found}, indent=1,
                                      sort_keys=True) + "\n")
        print(f"{len(found)} digests written to {DIGESTS}")
    else:
        print(f"{len(found) - differ} of {len(found)} cases unchanged (target: all)")
        if differ:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
