"""The package's loggers: a handler or filter that raises costs its record, not the caller."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from django_posixcron import log
from django_posixcron.log import BestEffortLogger, get_logger

NAME = "django_posixcron.tests.best_effort"
REPORT = "--- Logging error in django-posixcron ---"


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Raising(logging.Handler):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def emit(self, record: logging.LogRecord) -> None:
        raise self.error


@pytest.fixture
def underlying() -> Iterator[logging.Logger]:
    logger = logging.getLogger(NAME)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger
    logger.handlers.clear()
    logger.filters.clear()
    logger.setLevel(logging.NOTSET)
    logger.propagate = True


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The reports' clock, a value the test sets."""
    now = [1000.0]
    monkeypatch.setattr(log, "_reports", log._Reports(lambda: now[0]))
    return now


def test_records_name_the_line_that_logged_them(underlying: logging.Logger) -> None:
    kept = Kept()
    underlying.addHandler(kept)
    logger = get_logger(NAME)
    logger.info("one %s", "arg", extra={"action": "first"})
    line = test_records_name_the_line_that_logged_them.__code__.co_firstlineno + 4
    logger.exception("two")
    logger.log(logging.WARNING, "three")
    assert [(r.funcName, r.filename, r.getMessage()) for r in kept.records] == [
        ("test_records_name_the_line_that_logged_them", "test_log.py", "one arg"),
        ("test_records_name_the_line_that_logged_them", "test_log.py", "two"),
        ("test_records_name_the_line_that_logged_them", "test_log.py", "three"),
    ]
    assert kept.records[0].lineno == line
    assert kept.records[0].action == "first"  # type: ignore[attr-defined]
    assert kept.records[2].levelno == logging.WARNING


def test_levels_and_the_level_check_are_the_real_loggers(underlying: logging.Logger) -> None:
    kept = Kept()
    underlying.addHandler(kept)
    underlying.setLevel(logging.WARNING)
    logger = get_logger(NAME)
    assert isinstance(logger, BestEffortLogger)
    assert (logger.name, logger.logger) == (NAME, underlying)
    assert not logger.isEnabledFor(logging.INFO)
    logger.debug("no")
    logger.info("no")
    logger.warning("yes")
    logger.error("yes")
    logger.critical("yes")
    assert [r.levelname for r in kept.records] == ["WARNING", "ERROR", "CRITICAL"]


def test_a_handler_that_raises_costs_the_record_and_is_reported(
    underlying: logging.Logger, clock: list[float], capsys: pytest.CaptureFixture[str]
) -> None:
    before, after = Kept(), Kept()
    for handler in (before, Raising(OSError(28, "No space left on device")), after):
        underlying.addHandler(handler)
    get_logger(NAME).warning("disk %s", "full", extra={"action": "run_started"})

    assert [r.getMessage() for r in before.records] == ["disk full"]
    assert after.records == []  # logging stops at the handler that raised
    err = capsys.readouterr().err
    assert err.startswith(REPORT + "\nTraceback (most recent call last):\n")
    assert "OSError: [Errno 28] No space left on device\n" in err
    assert (
        f"Logger '{NAME}', level WARNING, action 'run_started': the record 'disk %s' "
        "(arguments ('full',)) is lost to the handler or filter that raised and to the "
        "handlers after it; the scheduler goes on. A handler that cannot emit a record should "
        "call handleError() rather than raise.\n"
    ) in err


def test_the_same_error_is_reported_once_a_minute_with_what_it_lost(
    underlying: logging.Logger, clock: list[float], capsys: pytest.CaptureFixture[str]
) -> None:
    underlying.addHandler(Raising(ConnectionRefusedError(111, "collector down")))
    logger = get_logger(NAME)
    logger.info("one")
    assert capsys.readouterr().err.count(REPORT) == 1

    for _ in range(3):
        logger.info("again")
    clock[0] += 59.9
    logger.info("again")
    assert capsys.readouterr().err == ""

    clock[0] += 0.1
    logger.info("a minute on")
    err = capsys.readouterr().err
    assert err.count(REPORT) == 1
    assert "'a minute on'" in err
    assert (
        "The same error lost 4 other record(s) since it was last reported; it is reported at "
        "most once every 60 s.\n"
    ) in err

    # The same error with another message (one naming the record it lost) is the same.
    underlying.handlers[0] = Raising(ConnectionRefusedError(111, "record 7 not sent"))
    logger.info("same")
    assert capsys.readouterr().err == ""
    # Another error is news: reported at once.
    underlying.handlers[0] = Raising(TimeoutError("collector too slow"))
    logger.info("other")
    assert "TimeoutError: collector too slow" in capsys.readouterr().err


def test_a_long_lived_process_remembers_a_bounded_number_of_errors(clock: list[float]) -> None:
    kinds = [type(f"Error{n}", (Exception,), {}) for n in range(log.REMEMBERED + 1)]
    assert [log._reports.due(kind()) for kind in kinds] == [0] * len(kinds)
    assert len(log._reports._last) == log.REMEMBERED
    # The oldest is forgotten (news again), the newest still throttled.
    assert log._reports.due(kinds[-1]()) is None
    assert log._reports.due(kinds[0]()) == 0


def test_a_filter_that_raises_is_caught_too(
    underlying: logging.Logger, clock: list[float], capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(record: logging.LogRecord) -> bool:
        raise KeyError("tenant")

    underlying.addFilter(broken)
    get_logger(NAME).error("x")
    assert "KeyError: 'tenant'" in capsys.readouterr().err


def test_nothing_is_printed_when_logging_keeps_its_errors_quiet(
    underlying: logging.Logger,
    clock: list[float],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # logging.raiseExceptions = False is logging's own switch for handleError()'s output.
    monkeypatch.setattr(logging, "raiseExceptions", False)
    underlying.addHandler(Raising(OSError(5, "Input/output error")))
    get_logger(NAME).info("x")
    assert capsys.readouterr().err == ""


def test_what_is_not_an_exception_still_propagates(underlying: logging.Logger) -> None:
    # A KeyboardInterrupt while a record is emitted is the user's, not a logging error.
    class Interrupted(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            raise KeyboardInterrupt

    underlying.addHandler(Interrupted())
    with pytest.raises(KeyboardInterrupt):
        get_logger(NAME).info("x")
