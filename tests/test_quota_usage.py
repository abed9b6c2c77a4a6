"""What each queue holds now against its guarantee (voda.core.quotas.usage): borrowed GPUs
come first from those no queue is guaranteed, the rest is lent out of idle guarantees in
proportion to what each queue may lend."""

from __future__ import annotations

import pytest

from voda.core.quotas import Queue, QueueSet
from voda.core.quotas.usage import queue_usage

QUEUES = QueueSet((Queue("a", {"gpu": 4}), Queue("b", {"gpu": 2}, lending_limit={"gpu": 1}),
                   Queue("c")))


@pytest.mark.parametrize("held, lent", [
    ({"c": 2}, {}),  # within the 2 GPUs nobody is guaranteed
    ({"c": 4}, {"a": 2}),  # 2 beyond them: a may lend 4 and b 1, so a lends both
    ({"c": 7}, {"a": 4, "b": 1}),  # all that may be lent
    ({"a": 1, "c": 5}, {"a": 2, "b": 1}),  # 3 owed, a may lend 3 and b 1: 2.25/0.75
], ids=["borrowing only unguaranteed GPUs lends nothing",
        "the lender with idle guarantee lends",
        "lending stops at the lending limit",
        "what is lent is shared in proportion, largest remainders first"])
def test_lent_gpus_are_told_against_the_idle_guarantees(held: dict[str, int],
                                                        lent: dict[str, int]) -> None:
    usage = queue_usage(QUEUES, {(q, "gpu"): n for q, n in held.items()}, {}, {"gpu": 8})
    assert {q: u["gpu"].lent for q, u in usage.items() if u["gpu"].lent} == lent
    c = usage["c"]["gpu"]
    assert c.borrowed == c.used == held["c"] and c.guarantee == 0


def test_every_queue_and_default_is_shown_for_every_gpu_type() -> None:
    usage = queue_usage(QUEUES, {("a", "gpu"): 3}, {("default", "v100"): 2},
                        {"gpu": 8, "v100": 4})
    assert list(usage) == ["a", "b", "c", "default"]
    assert usage["a"]["gpu"].used == 3 and usage["a"]["v100"].guarantee == 0
    assert usage["default"]["v100"].waiting == 2
    assert usage["b"]["gpu"].lending_limit == 1 and usage["b"]["gpu"].borrowing_limit is None
