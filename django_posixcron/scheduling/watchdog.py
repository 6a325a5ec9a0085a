"""Saying so when the loop or the heartbeat waits on a database that does not answer.

"A dropped or restarted database is logged and retried with capped back-off, never a crash
or a silent stall." A database that stops answering without closing the connection (a frozen
server, a network that drops packets instead of refusing them, a lock held elsewhere) raises
nothing: the query waits, as long as the kernel's TCP timeouts allow (about 15 minutes on
Linux by default). The watchdog is a thread that touches no database: it logs once when the
loop's tick or a heartbeat has waited longer than its limit, and once when the wait ends.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator

from django_posixcron.scheduling.periodic import Periodic

# Under the documented "django_posixcron.scheduler" logger, one child per part.
logger = logging.getLogger("django_posixcron.scheduler.watchdog")

# What each watched part is called in the log lines.
PARTS = {"loop": "the scheduler loop", "heartbeat": "the heartbeat"}


class Watchdog(Periodic):
    """Watch the loop's ticks and the heartbeats; log a wait on the database past `limit`.

    `limit` is the stale limit: by then the other schedulers presume this process gone (a
    heartbeat waiting that long has not been written), so its runs may be marked lost and
    retried elsewhere.
    """

    thread_name = "posixcron-watchdog"

    def __init__(self, limit: float, every: float = 1.0) -> None:
        super().__init__(every)
        self.limit = limit
        self._lock = threading.Lock()
        # part -> [when its wait began (monotonic), whether it was reported]
        self._waiting: dict[str, list[float | bool]] = {}

    @contextlib.contextmanager
    def watching(self, part: str) -> Iterator[None]:
        """Watch `part` ("loop" or "heartbeat") for the length of the block."""
        with self._lock:
            self._waiting[part] = [time.monotonic(), False]
        try:
            yield
        finally:
            with self._lock:
                since, reported = self._waiting.pop(part)
            if reported:
                logger.warning(
                    "%s's wait on the database ended after %.1f s",
                    PARTS[part],
                    time.monotonic() - float(since),
                    extra={"action": "db_stall_ended", "part": part},
                )

    def check(self) -> list[str]:
        """Log each part waiting past the limit, once per wait; return the parts logged."""
        now = time.monotonic()
        late = []
        with self._lock:
            for part, entry in self._waiting.items():
                since, reported = entry
                if not reported and now - float(since) >= self.limit:
                    entry[1] = True
                    late.append((part, now - float(since)))
        for part, waited in late:
            logger.warning(
                "%s has waited %.0f s on the database and is still waiting: a frozen database "
                "server, a network that drops packets, or a lock held elsewhere; after %.0f s "
                "without a heartbeat the other schedulers presume this process gone",
                PARTS[part],
                waited,
                self.limit,
                extra={"action": "db_stalled", "part": part},
            )
        return [part for part, _ in late]

    def _serve(self) -> None:
        while not self._stop.wait(self.every):
            self.check()
