"""Trace-driven simulation: profiles, workloads, a simulated backend and the runner."""
