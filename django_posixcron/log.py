"""The package's loggers: a handler that raises loses its record, never the scheduler.

Logging's own handlers catch what goes wrong as they emit and call `handleError()`, which
prints the error to stderr and lets the program go on. A project's handler or filter may
raise instead (a log collector's handler with its collector down, a disk full, a filter with
a bug), and the exception then comes out of the `logger.info()` call: through the scheduler's
own code, `runscheduler` exited with the handler's traceback at start-up, or in the middle of
a tick, and a run-started line that raised failed a run whose callable never ran.

Every logger of this package is a `BestEffortLogger`: what a handler or filter raises is
written to stderr as `handleError()` would (not at all when `logging.raiseExceptions` is
False), the record is lost to that handler and to any after it, and the caller goes on. The
same error (its type, raised by the same line) is printed once a minute at most, with the
number of records it lost since.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["BestEffortLogger", "get_logger"]

#: The least time between two reports of the same logging error.
REPORT_EVERY = 60.0
#: The most errors remembered: a long-lived process forgets the oldest past this.
REMEMBERED = 256


class _Reports:
    """Which logging errors were reported, when, and how many records each lost since."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._last: dict[tuple[object, ...], tuple[float, int]] = {}

    def due(self, error: BaseException) -> int | None:
        """The records lost to `error`'s kind since its last report if it is reported now,
        else None.

        An error's kind is its type and the line that raised it, not its message: a handler
        whose message names each record it could not send is one error, not one per record.
        """
        tb = error.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        key = (type(error),) if tb is None else (type(error), tb.tb_frame.f_code, tb.tb_lineno)
        now = self.clock()
        with self._lock:
            last = self._last.pop(key, None)
            if last is not None and now - last[0] < REPORT_EVERY:
                self._last[key] = (last[0], last[1] + 1)
                return None
            self._last[key] = (now, 0)
            if len(self._last) > REMEMBERED:
                del self._last[next(iter(self._last))]
            return 0 if last is None else last[1]

    def clear(self) -> None:
        """Forget what was reported: the next error of each kind is reported at once."""
        with self._lock:
            self._last.clear()


_reports = _Reports()


def _report(
    logger: logging.Logger, level: int, msg: object, args: tuple[object, ...], extra: object
) -> None:
    """Write the error being handled, and what it cost, to stderr; never raise."""
    if not logging.raiseExceptions or not sys.stderr:
        return
    error = sys.exc_info()[1]
    if error is None:  # pragma: no cover - only called from an except block
        return
    try:
        lost = _reports.due(error)
        if lost is None:
            return
        action = extra.get("action", "") if isinstance(extra, Mapping) else ""
        lines = [
            "--- Logging error in django-posixcron ---\n",
            *traceback.format_exception(error),
            f"Logger {logger.name!r}, level {logging.getLevelName(level)}"
            + (f", action {action!r}" if action else "")
            + f": the record {msg!r} (arguments {args!r}) is lost to the handler or filter"
            " that raised and to the handlers after it; the scheduler goes on. A handler"
            " that cannot emit a record should call handleError() rather than raise.\n",
        ]
        if lost:
            lines.append(
                f"The same error lost {lost} other record(s) since it was last reported;"
                f" it is reported at most once every {REPORT_EVERY:.0f} s.\n"
            )
        sys.stderr.write("".join(lines))
        sys.stderr.flush()
    except Exception:
        pass


class BestEffortLogger:
    """A `logging.Logger`'s calls, with what the project's handlers raise kept from the caller.

    `logger` is the real `logging.Logger` of the same name: configure it, add handlers to it
    and read `caplog` as for any other logger.
    """

    def __init__(self, name: str) -> None:
        self.logger = logging.getLogger(name)

    @property
    def name(self) -> str:
        return self.logger.name

    def __repr__(self) -> str:
        return f"<BestEffortLogger {self.name}>"

    def isEnabledFor(self, level: int) -> bool:
        return self.logger.isEnabledFor(level)

    def debug(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._log(logging.DEBUG, msg, args, kwargs)

    def info(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._log(logging.INFO, msg, args, kwargs)

    def warning(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._log(logging.WARNING, msg, args, kwargs)

    def error(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._log(logging.ERROR, msg, args, kwargs)

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        self._log(logging.ERROR, msg, args, {**kwargs, "exc_info": exc_info})

    def critical(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._log(logging.CRITICAL, msg, args, kwargs)

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        self._log(level, msg, args, kwargs)

    def _log(
        self, level: int, msg: object, args: tuple[object, ...], kwargs: dict[str, Any]
    ) -> None:
        if not self.logger.isEnabledFor(level):
            return
        # The record names the line that called debug(), info()...: two frames up from here.
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 2
        try:
            self.logger.log(level, msg, *args, **kwargs)
        except Exception:
            _report(self.logger, level, msg, args, kwargs.get("extra"))


def get_logger(name: str) -> BestEffortLogger:
    """The package's logger called `name` (see the module's docstring)."""
    return BestEffortLogger(name)
