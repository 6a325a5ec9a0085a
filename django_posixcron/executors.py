"""Where claimed runs execute: a bounded set of threads in the scheduler process."""

from __future__ import annotations

import contextlib
import inspect
import logging
import multiprocessing
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any, Protocol

from django.db import connections

logger = logging.getLogger(__name__)


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
    except Exception:
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

    def invoke(self, key: int, declaration: Declared) -> None: ...

    def free_slots(self) -> int: ...

    def submit(self, key: int, job: Callable[[], object]) -> None: ...

    def release(self, key: int) -> None: ...

    def busy(self) -> frozenset[int]: ...

    def wait_idle(self, timeout: float | None = None) -> bool: ...

    def set_wakeup(self, callback: Callable[[], object] | None) -> None: ...

    def close(self) -> None: ...

    def kill_all(self) -> None: ...


class ThreadExecutor:
    """Run jobs in a pool of daemon threads, at most `concurrency` at once.

    Threads are reused between runs (starting one costs more than most short tasks). A run
    recorded as timed out keeps its thread (Python cannot kill a thread): `release()` hands
    its slot to the next run, the pool grows by one thread to serve it, and shrinks back when
    the stuck call returns. Threads are daemons so that a task stuck past the shutdown grace
    period cannot keep the process alive.
    """

    stops_on_timeout = False

    def __init__(self, concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency!r}")
        self.concurrency = concurrency
        self._cond = threading.Condition()
        self._busy: set[int] = set()
        self._wakeup: Callable[[], object] | None = None
        self._jobs: queue.SimpleQueue[tuple[int, Callable[[], object]] | None] = queue.SimpleQueue()
        self._threads = 0  # worker threads alive
        self._idle = 0  # of which waiting for a job
        self._queued = 0  # jobs submitted and not yet picked up
        self._closed = False

    def set_wakeup(self, callback: Callable[[], object] | None) -> None:
        """Call `callback` whenever a slot frees up (the loop sleeps until then when full)."""
        self._wakeup = callback

    def invoke(self, key: int, declaration: Declared) -> None:
        """Call the task's callable in this (the run's) thread; exceptions propagate."""
        # What runs is always resolved from settings, never from a path stored in the database.
        refuse_unrun(declaration.resolve()(**dict(declaration.kwargs or {})))

    def free_slots(self) -> int:
        with self._cond:
            return max(0, self.concurrency - len(self._busy))

    def busy(self) -> frozenset[int]:
        with self._cond:
            return frozenset(self._busy)

    def submit(self, key: int, job: Callable[[], object]) -> None:
        """Run `job` in a pool thread; `key` (the run id) identifies its slot."""
        with self._cond:
            if self._closed:
                raise RuntimeError("the executor is closed")
            self._busy.add(key)
            self._queued += 1
            grow = self._queued > self._idle
            if grow:
                self._threads += 1
        if grow:
            thread = threading.Thread(
                target=self._worker, name=f"posixcron-worker-{key}", daemon=True
            )
            try:
                thread.start()
            except BaseException:
                with self._cond:
                    self._threads -= 1
                    self._queued -= 1
                self.release(key)
                raise
        self._jobs.put((key, job))

    def close(self) -> None:
        """Let idle worker threads end; running ones end when their job returns."""
        with self._cond:
            self._closed = True
            idle = self._idle
        for _ in range(idle):
            self._jobs.put(None)

    def kill_all(self) -> None:
        """Stop every running call at once; threads cannot be stopped, so nothing happens."""

    def release(self, key: int) -> None:
        """Free the slot of `key` now, whether or not its thread has returned."""
        with self._cond:
            if key not in self._busy:
                return
            self._busy.discard(key)
            self._cond.notify_all()
        if self._wakeup is not None:
            self._wakeup()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no slot is busy; return False if `timeout` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._busy, timeout)

    def _worker(self) -> None:
        while True:
            with self._cond:
                self._idle += 1
            item = self._jobs.get()
            with self._cond:
                self._idle -= 1
                if item is None:
                    self._threads -= 1
                    return
                self._queued -= 1
            key, job = item
            try:
                job()
            except BaseException:
                # The job records its own outcome; anything reaching here is a bug in it, and
                # a worker thread must never take the process down.
                logger.exception("run job crashed", extra={"action": "executor_error"})
            finally:
                # Each run ends with its thread's connections closed, so a long-lived
                # scheduler never accumulates idle connections (or keeps a broken one).
                connections.close_all()
                self.release(key)
            with self._cond:
                # More threads than slots: one stood in for a stuck (timed-out) call. Shrink.
                if self._threads > self.concurrency or self._closed:
                    self._threads -= 1
                    return


# How often a process run's thread looks for a stop request while its child runs; the child's
# result itself is noticed at once.
STOP_CHECK_INTERVAL = 0.1


class ProcessExecutor(ThreadExecutor):
    """Run each task's callable in a fresh child process, which a timeout can really stop.

    Each run costs a process start and a Django set-up (the "spawn" start method, so the
    child shares no sockets or locks with the scheduler), a fraction of a second: meant for
    long tasks that may hang, not for thousands of short ones. A run past its timeout, or
    still running when the shutdown grace period ends, has its process terminated (SIGTERM,
    then SIGKILL after `kill_after` seconds).
    """

    stops_on_timeout = True

    def __init__(self, concurrency: int, *, kill_after: float = 5.0) -> None:
        super().__init__(concurrency)
        self.kill_after = kill_after
        self._context = multiprocessing.get_context("spawn")
        self._processes: dict[int, Any] = {}
        self._stopping: set[int] = set()

    def invoke(self, key: int, declaration: Declared) -> None:
        """Call the callable in a child process; raise TaskCodeError if it failed there."""
        receiver, sender = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=_child_main,
            args=(
                os.environ.get("DJANGO_SETTINGS_MODULE", ""),
                declaration.callable_path,
                dict(declaration.kwargs or {}),
                sender,
            ),
            name=f"posixcron-run-{key}",
            daemon=True,
        )
        with self._cond:
            self._processes[key] = process
        result = None
        try:
            process.start()
            sender.close()
            kill_at = None
            # Only this thread waits for (and reaps) the child: waiting on it from two threads
            # races in waitpid. release() asks for the stop; this loop carries it out.
            while True:
                if receiver.poll(STOP_CHECK_INTERVAL):
                    # EOF: the child died without a word (killed, or crashed hard).
                    with contextlib.suppress(EOFError):
                        result = receiver.recv()
                    break
                with self._cond:
                    stopping = key in self._stopping
                if stopping and kill_at is None:
                    process.terminate()
                    kill_at = time.monotonic() + self.kill_after
                elif kill_at is not None and time.monotonic() >= kill_at:
                    process.kill()
            process.join()
        finally:
            receiver.close()
            with self._cond:
                self._processes.pop(key, None)
                self._stopping.discard(key)
        if result is None:
            raise TaskCodeError(
                f"The task's process ended without reporting (exit code {process.exitcode}).",
                "",
            )
        if result[0] != "ok":
            raise TaskCodeError(result[1], result[2])

    def kill_all(self) -> None:
        """Kill every run's process now (the forced exit) and reap it."""
        with self._cond:
            processes = list(self._processes.values())
        for process in processes:
            with contextlib.suppress(Exception):
                process.kill()
        for process in processes:
            with contextlib.suppress(Exception):
                process.join(1.0)

    def release(self, key: int) -> None:
        """Free the slot and have the run's process stopped if it is still running."""
        with self._cond:
            if key in self._processes:
                self._stopping.add(key)
        super().release(key)


def _child_main(
    settings_module: str, callable_path: str, kwargs: dict[str, Any], sender: Connection
) -> None:
    """Set Django up in the child process, call the task, report how it went."""
    try:
        if settings_module:
            os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
        import django
        from django.utils.module_loading import import_string

        django.setup()
        refuse_unrun(import_string(callable_path)(**kwargs))
        message: tuple[str, ...] = ("ok",)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt too
        message = ("error", describe_exception(exc), traceback.format_exc())
    finally:
        connections.close_all()
    sender.send(message)
    sender.close()
