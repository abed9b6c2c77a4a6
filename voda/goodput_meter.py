"""Moved to voda.training.goodput_meter; the old name stays for scripts written against it."""

from voda.training.goodput_meter import *  # noqa: F403
