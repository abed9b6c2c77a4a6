"""Team quotas: queues with guaranteed GPUs, borrowing and lending limits and weights,
wrapped around any allocation algorithm (docs/design/013-queues.md)."""

from voda.core.quotas.algorithm import QueuedAlgorithm, with_queues
from voda.core.quotas.model import DEFAULT_QUEUE, Queue, QueueSet
from voda.core.quotas.share import QuotaDecision, share

__all__ = ["DEFAULT_QUEUE", "Queue", "QueueSet", "QueuedAlgorithm", "QuotaDecision", "share",
           "with_queues"]
