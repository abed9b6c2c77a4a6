"""Moved to voda.training.adaptive_batch; the old name stays for scripts written against it."""

from voda.training.adaptive_batch import *  # noqa: F403
