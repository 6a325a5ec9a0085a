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
import threading
import time
from collections.abc import Iterator
from typing import Any

from django_posixcron.log import get_logger
from django_posixcron.scheduling.periodic import Periodic

# Under the documented "django_posixcron.scheduler" logger, one child per part.
logger = get_logger("django_posixcron.scheduler.watchdog")

# What each watched part is called in the log lines.
PARTS = {
    "loop": "the scheduler loop",
    "heartbeat": "the heartbeat",
    "start-up": "the start-up (registering, reconciling settings)",
}

DATABASE = "the database"
# Why a wait may last, by what is waited on.
CAUSES = {
    DATABASE: "a frozen database server, a network that drops packets, or a lock held elsewhere",
}
OTHER_CAUSE = "a server that accepts connections but does not answer (set its client's timeouts)"

# The watchdog's own step this much later than its interval: the process itself did not run.
STARVED = 5.0


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
        # part -> [when its wait began (monotonic), what it waits on, whether it was reported]
        self._waiting: dict[str, list[Any]] = {}
        # When this thread last woke, and when it last found that the process had not run
        # (monotonic); None before.
        self.woke_at: float | None = None
        self.starved_at: float | None = None

    @contextlib.contextmanager
    def watching(self, part: str) -> Iterator[None]:
        """Watch `part` ("loop" or "heartbeat") for the length of the block."""
        with self._lock:
            self._waiting[part] = [time.monotonic(), DATABASE, False]
        try:
            yield
        finally:
            with self._lock:
                since, _on, reported = self._waiting.pop(part)
            if reported:
                logger.warning(
                    "%s's wait on %s ended after %.1f s",
                    PARTS[part],
                    reported,
                    time.monotonic() - since,
                    extra={"action": "db_stall_ended", "part": part},
                )

    def waited(self, part: str) -> float:
        """Return how long `part` has been waiting in its current block (0 when it is not)."""
        with self._lock:
            entry = self._waiting.get(part)
            return 0.0 if entry is None else time.monotonic() - entry[0]

    @contextlib.contextmanager
    def waiting_on(self, part: str, what: str) -> Iterator[None]:
        """Within `part`'s watch, say that the block waits on `what` (a Tasks backend), not
        on the database: a stall there is logged under its real name."""
        with self._lock:
            entry = self._waiting.get(part)
            if entry is not None:
                entry[1] = what
        try:
            yield
        finally:
            with self._lock:
                if entry is not None:
                    entry[1] = DATABASE

    def check(self) -> list[str]:
        """Log each part waiting past the limit, once per wait; return the parts logged."""
        now = time.monotonic()
        late = []
        with self._lock:
            for part, entry in self._waiting.items():
                since, on, reported = entry
                if not reported and now - since >= self.limit:
                    entry[2] = on
                    late.append((part, on, now - since))
        for part, on, waited in late:
            logger.warning(
                "%s has waited %.0f s on %s and is still waiting: %s; %s",
                PARTS[part],
                waited,
                on,
                CAUSES.get(on, OTHER_CAUSE),
                # The heartbeat has its own thread: only its own stall makes the process look
                # gone; a loop stuck on a backend keeps beating, and claims nothing.
                f"after {self.limit:.0f} s without a heartbeat the other schedulers presume "
                "this process gone"
                if on == DATABASE
                else "this process claims nothing meanwhile",
                extra={"action": "db_stalled", "part": part, "waiting_on": on},
            )
        return [part for part, _on, _waited in late]

    def overslept(self, late: float) -> bool:
        """Say so when this thread woke `late` seconds past its step: the whole process did
        not run meanwhile, its heartbeat included, and the waits the watchdog was timing
        were the process's, not the database's. Return whether it said so.

        Without this, task code holding the interpreter lock in a C extension woke every
        thread at once, and the heartbeat caught inside its statement was reported as a
        database that stopped answering.
        """
        if late < STARVED:
            return False
        now = time.monotonic()
        with self._lock:
            for entry in self._waiting.values():
                entry[0] = max(entry[0], now)  # timed again from now on
        logger.warning(
            "this process did not run for %.0f s: task code holding the interpreter lock (in "
            "a C extension that does not release it, such as a regular expression that "
            "backtracks or arithmetic on huge integers: run such code with --executor "
            "process), or the process was stopped (SIGSTOP, a suspended or frozen VM); its "
            "heartbeat was not written meanwhile, and after %.0f s the other schedulers "
            "presume this process gone",
            late,
            self.limit,
            extra={"action": "process_starved"},
        )
        return True

    def starved_within(self, seconds: float) -> bool:
        """Whether this process did not run for STARVED s or more within the last `seconds`
        (frozen, or starved of the interpreter lock), as far as this thread can tell: it has
        not woken for that long, or found so when it last woke."""
        now = time.monotonic()
        if self.woke_at is not None and now - self.woke_at >= self.every + STARVED:
            return True
        return self.starved_at is not None and now - self.starved_at <= seconds + self.every

    def _serve(self) -> None:
        last = self.woke_at = time.monotonic()
        while not self._stop.wait(self.every):
            now = time.monotonic()
            if self.overslept(now - last - self.every):
                self.starved_at = now
            last = self.woke_at = now
            self.check()
        self.woke_at = None  # stopped: its silence from now on says nothing
