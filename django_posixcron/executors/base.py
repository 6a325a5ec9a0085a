"""What every executor shares: the protocol the scheduler uses, and task-code helpers."""

from __future__ import annotations

import atexit
import contextlib
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, Protocol

from django.db import DatabaseError, connections

from django_posixcron.log import get_logger

logger = get_logger("django_posixcron.executors")


class Declared(Protocol):
    """What an executor needs of a task declaration: what to call, with what."""

    @property
    def callable_path(self) -> str: ...

    @property
    def kwargs(self) -> Mapping[str, Any]: ...

    def resolve(self) -> Callable[..., Any]: ...


def describe_exception(exc: BaseException) -> str:
    """Return "Type: message" for an exception, even one whose str() itself raises."""
    name = type(exc).__name__
    try:
        message = str(exc)
    except BaseException:  # a KeyboardInterrupt or SystemExit raised by __str__ too
        message = "<str() of the exception raised an error>"
    return f"{name}: {message}" if message else name


def refuse_unrun(result: object) -> None:
    """Raise TypeError when the callable handed back work instead of doing it.

    The checks (posixcron.E026) refuse async and generator functions they can see; this catches
    what they cannot (a decorator that hides one, a callable chosen at run time), so that such a
    run is recorded failed rather than succeeded without running.
    """
    if inspect.iscoroutine(result) or inspect.isgenerator(result):
        # Closed so that Python does not also warn "coroutine ... was never awaited".
        result.close()
    if inspect.isawaitable(result) or inspect.isasyncgen(result):
        if inspect.iscoroutine(result):
            what = "a coroutine"
        elif inspect.isasyncgen(result):
            what = "an async generator"
        else:
            what = f"an awaitable {type(result).__name__}"
        raise TypeError(
            f"the callable returned {what}: async callables are not supported; wrap it with "
            "asgiref.sync.async_to_sync"
        )
    if inspect.isgenerator(result):
        raise TypeError(
            "the callable returned a generator, which nothing iterates: its code never ran; "
            "declare a plain function that consumes it"
        )


class TaskCodeError(Exception):
    """Task code failed in another process; carries its error line and traceback."""

    def __init__(self, error: str, remote_traceback: str) -> None:
        super().__init__(error)
        self.error = error
        self.remote_traceback = remote_traceback


class Executor(Protocol):
    """What the scheduler needs from an executor."""

    #: True when a run past its timeout is really stopped, not only recorded as timed out.
    stops_on_timeout: bool

    def invoke(self, key: int, declaration: Declared, context: object | None = None) -> None: ...

    def free_slots(self) -> int: ...

    def submit(self, key: int, job: Callable[[], object]) -> None: ...

    def release(self, key: int) -> None: ...

    def stop(self, key: int) -> None:
        """Have the run's call stopped; its slot frees when the call has returned. Only an
        executor that `stops_on_timeout` really stops it."""

    def wait_idle(self, timeout: float | None = None) -> bool: ...

    def set_wakeup(self, callback: Callable[[], object] | None) -> None: ...

    def close(self) -> None:
        """Take no more runs; the graceful exit calls it once the grace period is over."""

    def kill_all(self) -> None:
        """Stop every run at once, within a second or so: the forced exit (a second signal)."""


def close_connections(key: int) -> None:
    """Close this thread's connections, those a run left inside a transaction too.

    Django closes a connection inside an atomic block only halfway (the block is still open,
    the closed connection kept for it): a run that entered atomic() and never left it broke
    every later run of the thread with "the connection is closed". Such a connection is
    rolled back with its close and forgotten, so that the next run opens a new one. A run
    that turned autocommit off and did not commit loses its writes the same way, and is
    told so too.

    A connection whose close fails (its driver's connection already closed by the run, on
    MySQL) is forgotten all the same, with a warning: the error never reaches the worker, whose
    slot would otherwise stay taken for good.
    """
    for conn in connections.all(initialized_only=True):
        left_open = conn.in_atomic_block
        autocommit_off = close_failed = False
        try:
            autocommit_off = not left_open and _uncommitted(conn)
            conn.close()
        except Exception as exc:
            close_failed = True
            logger.warning(
                "closing the connection to database %r after run %s failed (%s: %s); "
                "it is dropped, and the thread's next run opens a new one",
                conn.alias,
                key,
                type(exc).__name__,
                exc,
                extra={"action": "connection_close_failed", "run_id": key},
            )
        if left_open or autocommit_off:
            how = (
                "an atomic block it never exited"
                if left_open
                else "autocommit turned off and no commit"
            )
            logger.warning(
                "run %s left a transaction open on database %r (%s): what it wrote there "
                "since its last commit was rolled back",
                key,
                conn.alias,
                how,
                extra={"action": "transaction_left_open", "run_id": key},
            )
        if left_open or close_failed:
            # Out of the block it never left, whatever state a failed close left; connect()
            # resets the rest of the transaction state when the next run asks for one.
            conn.in_atomic_block = False
            conn.closed_in_transaction = False
            conn.connection = None


def _uncommitted(conn: Any) -> bool:
    """Whether the run turned autocommit off (the project's setting is on) and left a
    transaction that a close rolls back."""
    if conn.connection is None or conn.autocommit or not conn.settings_dict["AUTOCOMMIT"]:
        return False
    if conn.vendor == "postgresql":
        return bool(conn.connection.info.transaction_status != 0)  # a statement since commit
    if conn.vendor == "sqlite":
        return bool(conn.connection.in_transaction)
    try:  # MariaDB says; MySQL does not, and autocommit left off is the run's mistake anyway
        with conn.cursor() as cursor:
            cursor.execute("SELECT @@in_transaction")
            (open_,) = cursor.fetchone()
        return bool(open_)
    except DatabaseError:
        return True


def exit_without_waiting(code: int) -> NoReturn:
    """End the process with `code` as the interpreter would, but without waiting for the
    threads task code left running: its ``atexit`` handlers run (logging's flush, an error
    tracker sending what it holds) and the standard streams are flushed, but the join of every
    non-daemon thread that the interpreter's own exit makes never comes."""
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
