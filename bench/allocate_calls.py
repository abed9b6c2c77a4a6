"""Call one algorithm on the allocation bench's 1,000 jobs and 4,096 GPUs, for valgrind.

    PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1 valgrind --tool=callgrind \\
        .venv/bin/python bench/allocate_calls.py AFS-L 4

One warm-up call, then CALLS more. The difference between the instruction counts
of two runs (4 calls and 1 call, say) over the difference in calls is the cost of
one call, the same whatever else loads the machine (wall-clock medians are not).
"""

from __future__ import annotations

import sys

from allocate import make_jobs

from voda.core.allocation import registry


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: allocate_calls.py ALGORITHM CALLS", file=sys.stderr)
        return 2
    try:
        algorithm = registry.create(argv[0])
    except registry.UnknownAlgorithm as exc:
        print(exc, file=sys.stderr)
        return 2
    jobs = make_jobs(1_000, 1)
    for _ in range(1 + int(argv[1])):
        algorithm(jobs, 4_096)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
