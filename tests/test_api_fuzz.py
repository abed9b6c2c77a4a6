"""Schemathesis against the served OpenAPI document of `voda serve` (SQLite and PostgreSQL):
valid and invalid cases of every operation, as an administrator, as a user and without a
token. No answer is 5xx, every answer matches the document, none takes a second.

The test makes a few hundred cases per store (`-s` prints the counts); `bench/fuzz.py`
is the long run, 5,000 cases and more. A request slower than
a second is sent once more and counts with the faster time: on a busy machine the
first try can wait for the CPU; a case that is slow by itself is slow twice."""

from __future__ import annotations

from tests.conftest import TOKENS, ServeFactory
from voda_testing.fuzz import SLOW_SECONDS, fuzz

# Without a token last: its invalid tokens make the service hold this client back (429).
CALLERS = {"an administrator": {"Authorization": f"Bearer {TOKENS['root']}"},
           "a user": {"Authorization": f"Bearer {TOKENS['alice']}"},
           "no token": {}}
ARGS = ("--cluster", "4x4,2x8:a100", "--time-scale", "60", "--rate-limit", "0.5")


def _fuzz(serve: ServeFactory, store_url: str, examples: int, minimum: int) -> None:
    server = serve(store_url, *ARGS, tokens=True)
    report = fuzz(server.url, CALLERS, examples)
    print(f"\nschemathesis: {report}")
    for caller, statuses in report.by_caller.items():
        print(f"  {caller}: {dict(sorted(statuses.items()))}")
    assert report.cases >= minimum
    assert report.server_errors == 0
    assert report.violations == []
    assert report.slowest < SLOW_SECONDS, report.slowest_case
    assert server.proc is not None and server.proc.poll() is None


def test_fuzzing_finds_no_server_error_and_no_schema_violation(serve: ServeFactory,
                                                              store_url: str) -> None:
    _fuzz(serve, store_url, examples=5, minimum=300)
