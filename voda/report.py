"""Moved to voda.training.report; the old name stays for scripts written against it."""

from voda.training.report import *  # noqa: F403
