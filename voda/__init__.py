"""Voda: a GPU scheduler for elastic deep-learning training."""

__version__ = "0.1.0"
