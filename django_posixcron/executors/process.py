"""The process executor: each run's callable in a child process, in a process group of its own.

DESIGN 6: "child processes in their own process group, so a terminal's Ctrl-C reaches only the
scheduler; the only local executor that can kill a run past its `timeout`", and "no run keeps
executing after the run is recorded as ended". So every signal that stops a run goes to its
whole process group (the task's own subprocesses too), and each child watches a pipe from the
scheduler: if the scheduler dies, however it dies, the child kills its group rather than run on
unnoticed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any, NoReturn

from django_posixcron.executors.base import (
    Declared,
    TaskCodeError,
    close_connections,
    describe_exception,
    exit_without_waiting,
    refuse_unrun,
)
from django_posixcron.executors.thread import ThreadExecutor

# How often a run's thread looks for a stop request while its child runs; the child's result
# itself is noticed at once.
STOP_CHECK_INTERVAL = 0.1

# How long kill_all() waits to reap the children it killed: the forced exit has 2 s in all.
KILL_ALL_WAIT = 1.0

# The child starts with the scheduler's import path (as multiprocessing's "spawn" does), so a
# callable the scheduler can import, the child can too.
BOOTSTRAP = (
    "import sys; sys.path[:] = {path!r}; "
    "from django_posixcron.executors.process import child_main; child_main({lifeline}, {result})"
)


class _Child:
    """One run's child process: its Popen, the pipe it reports on, the lifeline it watches."""

    def __init__(self) -> None:
        lifeline_read, lifeline_write = os.pipe()
        result_read, result_write = os.pipe()
        try:
            self.popen = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    BOOTSTRAP.format(path=sys.path, lifeline=lifeline_read, result=result_write),
                ],
                stdin=subprocess.DEVNULL,
                pass_fds=(lifeline_read, result_write),
                # Set between fork and exec: there is no instant at which the child is still in
                # the scheduler's group, where a terminal's Ctrl-C would reach it.
                process_group=0,
            )
        except BaseException:
            os.close(lifeline_write)
            os.close(result_read)
            raise
        finally:
            os.close(lifeline_read)
            os.close(result_write)
        self.pid = self.popen.pid
        self.results = Connection(result_read, writable=False)
        # Held open until the child is reaped: its end of file tells the child the scheduler
        # is gone (a write end closes with its process, whatever kills it).
        self.lifeline = Connection(lifeline_write, readable=False)
        self.kill_at: float | None = None

    def send(self, key: int, declaration: Declared, args: tuple[Any, ...] = ()) -> None:
        """Tell the child what to run (`args`: the run context, pickled across)."""
        payload = (
            os.environ.get("DJANGO_SETTINGS_MODULE", ""),
            declaration.callable_path,
            dict(declaration.kwargs or {}),
            key,
            args,
            database_names(),
        )
        # A child that died at start-up reports nothing; the wait loop says so.
        with contextlib.suppress(BrokenPipeError):
            self.lifeline.send(payload)

    def signal_group(self, signum: int) -> None:
        """Send `signum` to the child's whole process group (its group id is its pid)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def close(self) -> None:
        self.results.close()
        self.lifeline.close()


class ProcessExecutor(ThreadExecutor):
    """Run each task's callable in a fresh child process, which a timeout can really stop.

    Each run costs a Python start and a Django set-up (a fresh interpreter, so the child shares
    no sockets or locks with the scheduler), a fraction of a second: meant for long tasks that
    may hang, not for thousands of short ones. The child is not a daemon, so the task may start
    processes of its own (multiprocessing included). A run past its timeout, or still running
    when the shutdown grace period ends, has its process group terminated (SIGTERM, then
    SIGKILL after `kill_after` seconds); the forced exit kills every group at once.
    """

    stops_on_timeout = True

    def __init__(self, concurrency: int, *, kill_after: float = 5.0) -> None:
        super().__init__(concurrency)
        self.kill_after = kill_after
        self._children: dict[int, _Child] = {}
        self._stopping: set[int] = set()
        self._killed = False

    def invoke(self, key: int, declaration: Declared, context: object | None = None) -> None:
        """Call the callable in a child process; raise TaskCodeError if it failed there."""
        with self._cond:
            # Started under the lock, so that kill_all() cannot miss a child.
            if self._closed:
                raise RuntimeError("the executor is closed: no new process is started")
            if key in self._stopping:
                # Stopped (timed out, interrupted) before its process started: none starts.
                self._stopping.discard(key)
                raise TaskCodeError("Stopped before its process started.", "")
            child = _Child()
            self._children[key] = child
        try:
            child.send(key, declaration, () if context is None else (context,))
            result = self._wait(key, child)
        finally:
            child.close()
            with self._cond:
                self._children.pop(key, None)
                self._stopping.discard(key)
                self._cond.notify_all()
        if self._killed:
            raise TaskCodeError(
                "Killed: the scheduler was told to exit at once (a second signal).", ""
            )
        if result is None:
            raise TaskCodeError(
                f"The task's process ended without reporting (exit code {child.popen.returncode}).",
                "",
            )
        if result[0] != "ok":
            raise TaskCodeError(result[1], result[2])

    def _wait(self, key: int, child: _Child) -> Any:
        """Wait for the child to report and exit, carrying out stop requests meanwhile.

        Only this thread reaps the child (kill_all() may wait on it too: Popen locks that).
        """
        result = None
        reported = False
        while True:
            if not reported and child.results.poll(STOP_CHECK_INTERVAL):
                reported = True
                # EOF: the child died without a word (killed, or crashed hard).
                with contextlib.suppress(EOFError, OSError):
                    result = child.results.recv()
            elif reported:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.popen.wait(STOP_CHECK_INTERVAL)
            if child.popen.poll() is not None:
                if not reported and child.results.poll(0):
                    with contextlib.suppress(EOFError, OSError):
                        result = child.results.recv()
                break
            with self._cond:
                stopping = key in self._stopping
            if stopping and child.kill_at is None:
                child.signal_group(signal.SIGTERM)
                child.kill_at = time.monotonic() + self.kill_after
            elif child.kill_at is not None and time.monotonic() >= child.kill_at:
                child.signal_group(signal.SIGKILL)
        if child.kill_at is not None:
            # A stopped run leaves nothing behind: what its SIGTERM spared in the group goes.
            child.signal_group(signal.SIGKILL)
        return result

    def stop(self, key: int) -> None:
        """Have the run's process group stopped (SIGTERM, then SIGKILL after `kill_after`);
        the slot frees when its child is gone, and only then is the run's outcome queued."""
        with self._cond:
            # A run whose process has not started yet (its thread just took it) is stopped
            # too: invoke() then starts none.
            if key in self._children or key in self._calls:
                self._stopping.add(key)

    def release(self, key: int) -> None:
        """Free the slot and have the run's process group stopped if it is still running."""
        self.stop(key)
        super().release(key)

    def close(self) -> None:
        """Take no more runs; stop the children still running and reap them.

        They get SIGTERM, then SIGKILL `kill_after` seconds later, so the process never exits
        leaving a run executing behind it.
        """
        super().close()
        with self._cond:
            self._stopping.update(self._children)
            running = bool(self._children)
        if not running:
            return
        with self._cond:
            gone = self._cond.wait_for(
                lambda: not self._children, self.kill_after + 2 * STOP_CHECK_INTERVAL + 1.0
            )
        if not gone:
            self.kill_all()

    def kill_all(self) -> None:
        """Kill every run's process group now (the forced exit) and reap the children."""
        with self._cond:
            self._closed = True
            self._killed = True
            children = list(self._children.values())
        for child in children:
            child.signal_group(signal.SIGKILL)
        deadline = time.monotonic() + KILL_ALL_WAIT
        for child in children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(max(0.0, deadline - time.monotonic()))


def child_main(lifeline_fd: int, result_fd: int) -> None:
    """In the child: fork the run's process, and watch it and the scheduler until it exits.

    The watching is a process of its own, not a thread of the run's: it runs no task code, so
    nothing the task does (holding the GIL in C code, a fork that warns in a threaded process)
    can keep it from ending the group when the scheduler dies.
    """
    scheduler_pid = os.getppid()
    lifeline = Connection(lifeline_fd, writable=False)
    try:
        payload = lifeline.recv()
    except (EOFError, OSError):
        _end_group(scheduler_pid, "before the run started")
    pid = os.fork()
    if pid == 0:
        lifeline.close()
        _run(result_fd, *payload)
        _exit_after_run()
    os.close(result_fd)
    # Stopping is by signals to the group: the run gets them; its watcher outlives it so that
    # the scheduler, which waits on the watcher, sees the run's own end.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    status = _watch(pid, lifeline.fileno(), scheduler_pid, payload[3])
    _exit_like(status)


def database_names() -> dict[str, Any]:
    """Return each database's NAME as this process has it: a test run renames them."""
    from django.conf import settings

    return {alias: entry.get("NAME") for alias, entry in settings.DATABASES.items()}


def _use_database_names(names: dict[str, Any]) -> None:
    """Point each database at the NAME the scheduler's process uses.

    The run's process reads the settings module afresh, where a test run's scheduler (a
    pytest-django or `manage.py test` suite driving runs through this executor) uses the test
    databases: its task code must read and write those, never the databases the settings
    name. As Django's test runner renames them: in the settings and on the connection.
    """
    from django.conf import settings
    from django.db import connections

    for alias, name in names.items():
        entry = settings.DATABASES.get(alias)
        if entry is None or entry.get("NAME") == name:
            continue
        connections[alias].close()
        entry["NAME"] = name
        connections[alias].settings_dict["NAME"] = name


def _run(
    result_fd: int,
    settings_module: str,
    callable_path: str,
    kwargs: dict[str, Any],
    key: int,
    args: tuple[Any, ...] = (),
    names: dict[str, Any] | None = None,
) -> None:
    """In the run's process: set Django up, call the task, report how it went."""
    results = Connection(result_fd, readable=False)
    try:
        if settings_module:
            os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
        from django.utils.module_loading import import_string

        _set_up_django()
        if names:
            _use_database_names(names)
        refuse_unrun(import_string(callable_path)(*args, **kwargs))
        message: tuple[str, ...] = ("ok",)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt too
        message = ("error", describe_exception(exc), traceback.format_exc())
    finally:
        close_connections(key)
    results.send(message)
    results.close()


def _set_up_django() -> None:
    """Set Django up with this package's loggers enabled, as in the scheduler's process.

    This process imported the executors, and so made their loggers, before settings configured
    logging; the scheduler's process makes them after. A LOGGING with disable_existing_loggers
    True (dictConfig's own default) disabled them here only: what close_connections() logs of
    a run (transaction_left_open, connection_close_failed) was lost without a word.
    """
    import django

    early = [
        logger
        for name, logger in logging.root.manager.loggerDict.items()
        if isinstance(logger, logging.Logger) and name.partition(".")[0] == "django_posixcron"
    ]
    django.setup()
    for logger in early:
        logger.disabled = False


def _exit_after_run() -> NoReturn:
    """End the run's process once its callable has returned and the result is sent.

    The atexit handlers run (logging's flush, an error tracker sending what the run
    reported) and the standard streams are flushed, but threads the task left running are
    not waited for, as the interpreter's own exit would: a non-daemon thread kept the process,
    and with it the run, going after the callable had returned (recorded `timed_out` past the
    timeout, its duration stretched, the next occurrence skipped meanwhile).
    """
    exit_without_waiting(0)


def _watch(pid: int, lifeline_fd: int, scheduler_pid: int, key: int) -> int:
    """Wait for the run's process to exit and return its wait status; end the group if the
    scheduler goes first."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        # The scheduler never writes after the payload: readable means end of file.
        ready, _, _ = select.select([lifeline_fd, wake_read], [], [], 1.0)
        if lifeline_fd in ready and not os.read(lifeline_fd, 4096):
            _end_group(scheduler_pid, f"while run {key} was executing")
        if wake_read in ready:
            os.read(wake_read, 4096)


def _exit_like(status: int) -> NoReturn:
    """End this process as the run's process ended (a signal's death included)."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _end_group(scheduler_pid: int, when: str) -> NoReturn:
    # Its run is recorded lost once the dead scheduler's heartbeat is stale, and retried: the
    # code must not still be running then.
    sys.stderr.write(
        f"posixcron: the scheduler process {scheduler_pid} is gone {when}; "
        "killing this run's process group\n"
    )
    sys.stderr.flush()
    os.killpg(0, signal.SIGKILL)
    os._exit(1)  # not reached: the group includes this process
