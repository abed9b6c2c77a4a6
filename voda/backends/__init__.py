"""Backends carry out the scheduler's actions and report what happens."""
