"""The `voda` command: a thin client of the HTTP API, plus local `simulate`, `plan`, `demo`."""
