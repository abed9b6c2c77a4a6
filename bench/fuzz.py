"""Schemathesis at volume against `voda serve` (SQLite): thousands of valid and invalid
cases of every operation, as an administrator, a user and a caller with no token.

Prints the number of cases, the 5xx answers, the schema violations and the slowest answer.
The suite's tests/test_api_fuzz.py runs a few hundred cases per store on every run;
this is the long run (5,000 cases and more take about three minutes).

    python bench/fuzz.py [--examples 70]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from voda_testing.fuzz import SLOW_SECONDS, fuzz  # noqa: E402
from voda_testing.serve import ServeProcess, free_port  # noqa: E402

TOKENS = {"alice": "bench-alice-0123456789abcdef0123456789",
          "root": "bench-root-0123456789abcdef0123456789ab"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=70,
                        help="cases per operation, generation mode and caller")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("VODA_")}
        env["VODA_TOKENS"] = f"alice:{TOKENS['alice']},root:{TOKENS['root']}:admin"
        env["VODA_TOKEN_FILE"] = str(work / "token")
        server = ServeProcess(url=f"http://127.0.0.1:{port}", port=port,
                              args=["--db", f"sqlite:///{work / 'fuzz.db'}", "--cluster",
                                    "4x4,2x8:a100", "--time-scale", "60", "--rate-limit", "0.5"],
                              env=env, log_path=work / "serve.log").start()
        try:
            callers = {"an administrator": {"Authorization": f"Bearer {TOKENS['root']}"},
                       "a user": {"Authorization": f"Bearer {TOKENS['alice']}"},
                       "no token": {}}
            report = fuzz(server.url, callers, args.examples)
            alive = server.proc is not None and server.proc.poll() is None
        finally:
            server.kill()
    print(f"schemathesis: {report}")
    for caller, statuses in report.by_caller.items():
        print(f"  {caller}: {dict(sorted(statuses.items()))}")
    print(f"server still up: {alive}; slowest answer {report.slowest:.3f} s "
          f"(limit {SLOW_SECONDS} s)")
    for violation in report.violations[:10]:
        print(f"  violation: {violation}")
    return 0 if alive and report.server_errors == 0 and not report.violations else 1


if __name__ == "__main__":
    raise SystemExit(main())
