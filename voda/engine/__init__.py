"""The scheduler loop: owns time and events, calls the pure core, drives a backend."""
