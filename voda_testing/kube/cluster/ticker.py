"""A simulated controller's loop: `step()` every tick in a thread until `stop()`; an
error in a step is kept in `errors` (tests assert it is empty), never ends the loop."""

from __future__ import annotations

import threading


class Ticker:
    thread_name = "ticker"

    def __init__(self, tick_seconds: float) -> None:
        self.tick_seconds = tick_seconds
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def step(self) -> None:
        raise NotImplementedError

    def closed(self) -> None:
        """What to let go of once the loop has ended."""

    def start(self) -> Ticker:
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.closed()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as exc:  # the simulator must not die silently
                self.errors.append(repr(exc))
            self._stop.wait(self.tick_seconds)
