"""The eight algorithms on the Pollux workloads: JCT, preemptions and rescales.

    .venv/bin/python bench/algorithms.py [--workloads 1 2 3 4] [--cluster 16x4]
        [--algorithm NAME ...] [--param ALGO:NAME=VALUE ...] [--rigid] [--preset pollux]

For each algorithm, each workload (load 1.0) is simulated on the cluster (16 nodes of
4 GPUs by default), and the script prints the average JCT per workload, then the mean
over the workloads of the average JCT, of the preemptions and of the rescales.
Unfinished jobs are counted (a row with any is marked). `--param` sets a knob of one
algorithm (repeatable), as `voda simulate --param` does, so a sweep is a loop in the
shell. Results are deterministic: there is nothing to take a median of.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from typing import Any

from sweep import summary_line

from voda.core.allocation.registry import BUILTIN_NAMES
from voda.sim.compare import RunRequest, run_many


def parse_params(items: list[str]) -> dict[str, dict[str, Any]]:
    """ALGO:NAME=VALUE items -> {algorithm: {knob: value}}, values read as `voda simulate` does."""
    from voda.cli.params import parse_param_items

    by_algorithm: dict[str, list[str]] = defaultdict(list)
    for item in items:
        algorithm, sep, rest = item.partition(":")
        if not sep:
            raise SystemExit(f"--param {item!r}: expected ALGO:NAME=VALUE")
        by_algorithm[algorithm].append(rest)
    return {a: parse_param_items(v) for a, v in by_algorithm.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", nargs="+", default=["1", "2", "3", "4"])
    parser.add_argument("--cluster", default="16x4")
    parser.add_argument("--algorithm", nargs="+", default=list(BUILTIN_NAMES))
    parser.add_argument("--param", action="append", default=[],
                        help="ALGO:NAME=VALUE, a knob of one algorithm")
    parser.add_argument("--rigid", action="store_true")
    parser.add_argument("--preset", default=None)
    args = parser.parse_args()
    params = parse_params(args.param)
    requests = [
        RunRequest(f"workload-{w}", args.cluster, algorithm, rigid=args.rigid,
                   preset=args.preset, params=tuple(sorted(params.get(algorithm, {}).items())))
        for algorithm in args.algorithm for w in args.workloads
    ]
    results = run_many(requests)
    by_algorithm: dict[str, list] = defaultdict(list)
    for request, result in zip(requests, results, strict=True):
        by_algorithm[request.algorithm].append(result)
    print(f"average JCT (s) on workloads {', '.join(args.workloads)} ({args.cluster}), their "
          "mean, and the mean preemptions and rescales")
    for algorithm, runs in by_algorithm.items():
        print(summary_line(algorithm, runs))


if __name__ == "__main__":
    main()
