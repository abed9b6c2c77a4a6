"""Schemathesis against a served OpenAPI document, counting what the service answers.

Every operation of the document is fuzzed with valid (positive) and invalid (negative)
cases, as each caller given; each answer is checked against the document (status code,
content type, headers, body schema) and timed.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import checks
from schemathesis.generation import GenerationMode

SLOW_SECONDS = 1.0
CHECKS = [checks.not_a_server_error, checks.status_code_conformance,
          checks.content_type_conformance, checks.response_headers_conformance,
          checks.response_schema_conformance]


@dataclass
class FuzzReport:
    cases: int = 0
    server_errors: int = 0
    violations: list[str] = field(default_factory=list)
    slowest: float = 0.0  # of each case, the faster of two tries when the first was slow
    first_try_slowest: float = 0.0
    slowest_case: str = ""
    statuses: Counter = field(default_factory=Counter)
    by_caller: defaultdict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))

    def __str__(self) -> str:
        codes = ", ".join(f"{code}: {n}" for code, n in sorted(self.statuses.items()))
        return (f"{self.cases} cases, {self.server_errors} answered 5xx, "
                f"{len(self.violations)} schema violations, slowest {self.slowest:.3f} s "
                f"({self.slowest_case}; first tries: {self.first_try_slowest:.3f} s); "
                f"statuses {codes}")


def fuzz(url: str, callers: dict[str, dict[str, str]], examples: int,
         seed: int | None = None) -> FuzzReport:
    """`examples` cases per operation, per generation mode, per caller (headers)."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    report = FuzzReport()
    operations = [result.ok() for result in schema.get_all_operations()]
    for caller, headers in callers.items():
        for operation in operations:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                _run(operation, mode, url, caller, headers, examples, seed, report)
    return report


def _run(operation: object, mode: GenerationMode, url: str, caller: str,
         headers: dict[str, str], examples: int, seed: int | None, report: FuzzReport) -> None:
    strategy = operation.as_strategy(generation_mode=mode)  # type: ignore[attr-defined]

    @settings(max_examples=examples, deadline=None, database=None, derandomize=seed is None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def one(case: schemathesis.Case) -> None:
        started = time.perf_counter()
        try:
            response = case.call(base_url=url, headers=headers, timeout=10)
        except Exception:
            return
        elapsed = time.perf_counter() - started
        report.first_try_slowest = max(report.first_try_slowest, elapsed)
        if elapsed > SLOW_SECONDS:  # the input, or a busy machine? The same request again:
            again = time.perf_counter()
            with contextlib.suppress(Exception):
                case.call(base_url=url, headers=headers, timeout=10)
                elapsed = min(elapsed, time.perf_counter() - again)
        report.cases += 1
        report.statuses[response.status_code] += 1
        report.by_caller[caller][response.status_code] += 1
        label = f"{caller} {mode.value} {case.method} {case.formatted_path}"
        if elapsed > report.slowest:
            report.slowest, report.slowest_case = elapsed, label
        if response.status_code >= 500:
            report.server_errors += 1
        try:
            case.validate_response(response, checks=CHECKS, headers=headers)
        except (Exception, BaseExceptionGroup) as exc:  # each failed check is counted
            report.violations.append(f"{label}: {' '.join(str(exc).split())[:300]}")

    if seed is not None:
        one = settings(derandomize=False)(one)  # type: ignore[assignment]
    with contextlib.suppress(Unsatisfiable):  # nothing to make invalid (no input at all)
        one()
