"""The thread behind the heartbeat and the watchdog: a step every few seconds until stopped."""

from __future__ import annotations

import threading


class Periodic:
    """Run `_serve` on a daemon thread named `thread_name`; `every` paces its waits.

    A subclass's `_serve` loops on ``while not self._stop.wait(self.every)``, so that `stop()`
    ends it within a step.
    """

    thread_name = "posixcron-periodic"

    def __init__(self, every: float) -> None:
        self.every = every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def threaded(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._serve, name=self.thread_name, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(self.every + 5)

    def _serve(self) -> None:
        raise NotImplementedError
