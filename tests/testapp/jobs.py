"""Callables that tests declare as tasks, and the test receivers of the scheduler's signals.

One module for every layer: the in-process scheduler tests, the acceptance tests and the
runscheduler processes all name their callables here (`tests.testapp.jobs.NAME`).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import connection, transaction

from django_posixcron.signals import run_finished, run_lost
from tests.testapp.models import Hit


def record(label: str = "", task_name: str = "record") -> None:
    Hit.objects.create(task_name=task_name, label=label)


def record_context(
    context: Any, task_name: str = "context", fail: bool = False, path: str = ""
) -> None:
    """Record the run context's fields in a Hit (a line of `path`, from another process)."""
    label = (
        f"{context.trigger}|{context.attempt}|{context.scheduled_for.isoformat()}"
        f"|{context.occurrence.isoformat()}"
    )
    name = f"{task_name}:{context.task_name}:{context.run_id}"
    if path:
        with open(path, "a", encoding="utf-8") as file:
            file.write(f"{name}|{label}\n")
    else:
        Hit.objects.create(task_name=name, label=label)
    if fail:
        raise RuntimeError(f"{task_name} attempt {context.attempt} fails on purpose")


def noop() -> None:
    return None


def request_run_of(task_name: str) -> None:
    """Ask for a run of another task now, by the database's clock (as the admin does)."""
    from django_posixcron.models import Task

    Task.objects.filter(name=task_name).request_run()


def fail() -> None:
    raise RuntimeError("boom")


def fail_unless_file(path: str) -> None:
    """Fail while `path` does not exist: a test turns a task's outcome with one file."""
    if not Path(path).exists():
        raise RuntimeError(f"{path} does not exist")


NOT_CALLABLE = 42


# --- signatures the checks read (E011, E013, W003) ---


class Holder:
    """Methods a path may try to reach through their class: only `module.attribute` imports."""

    @staticmethod
    def static() -> None:
        return None

    @classmethod
    def klass(cls) -> None:
        return None

    def method(self) -> None:
        return None


def positional_only(a: int, /, b: int = 2) -> None:
    return None


def context_and_more(context: Any, **kwargs: Any) -> None:
    return None


class _NoSignature:
    """A callable inspect cannot read a signature of, like many builtins (time.sleep)."""

    def __call__(self, *args: Any) -> None:
        return None

    @property
    def __signature__(self) -> Any:
        raise ValueError("no signature found for builtin <built-in function no_signature>")


no_signature = _NoSignature()

# Its bound argument already breaks noop's signature: inspect gives it no signature at all.
PARTIAL_TOO_MANY = functools.partial(noop, 1)  # type: ignore[call-arg]
PARTIAL_OF_RECORD = functools.partial(record, task_name="partial")


# --- callables that block, or raise what task code should not raise ---

# Events a test sets to let a blocked task return; keyed so concurrent tests do not collide.
GATES: dict[str, threading.Event] = {}


def gate(name: str) -> threading.Event:
    return GATES.setdefault(name, threading.Event())


def blocked(gate_name: str = "default", task_name: str = "blocked") -> None:
    """Record a hit, then wait (bounded) until the test opens the gate."""
    Hit.objects.create(task_name=task_name, label="started")
    if not gate(gate_name).wait(timeout=30):
        raise TimeoutError(f"gate {gate_name!r} was never opened")


def block_hour_else_fail(
    context: Any, gate_name: str, block_hour: int, then_fail: bool = False
) -> None:
    """The cron run of the occurrence at `block_hour` waits for its gate, then succeeds (or
    fails, with `then_fail`); every other run fails at once (overlap "allow": an old run
    outlives a newer one)."""
    if context.trigger == "cron" and context.occurrence.hour == block_hour:
        if not gate(gate_name).wait(timeout=30):
            raise TimeoutError(f"gate {gate_name!r} was never opened")
        if not then_fail:
            return
    raise RuntimeError(f"attempt {context.attempt} of {context.occurrence:%H:%M} failed")


def exit_now() -> None:
    raise SystemExit(3)


def interrupt() -> None:
    raise KeyboardInterrupt


def huge_failure() -> None:
    raise ValueError("x" * 200_000)


def sleep_for(seconds: float = 60.0) -> None:
    """Sleep without touching the database (runs in the process executor's children too)."""
    import time

    time.sleep(seconds)


def until_own_run(
    context: Any, beaten_for: float | None = None, status: str = "", timeout: float = 30.0
) -> None:
    """Return once the run's own row shows a heartbeat `beaten_for` seconds past its start,
    or the `status` (a timeout recorded while the call runs); fail after `timeout`.

    A wait on the condition, not a sleep of a guessed length: on a loaded host a beat or a
    timeout check may come late, and the call must not return before it does.
    """
    from django_posixcron.models import Run

    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        started_at, beat_at, now = Run.objects.values_list(
            "started_at", "heartbeat_at", "status"
        ).get(pk=context.run_id)
        if status and now == status:
            return
        beaten = beat_at - started_at if beat_at and started_at else None
        if beaten_for is not None and beaten is not None and beaten.total_seconds() >= beaten_for:
            return
        time.sleep(0.05)
    raise AssertionError(f"run {context.run_id}: neither beaten for {beaten_for} s nor {status!r}")


# --- async callables in disguise (E026 and the executors' run-time refusal) ---


async def async_body() -> None:
    Hit.objects.create(task_name="async-body")  # never reached: nothing awaits it


def logged(func: Callable[..., Any]) -> Callable[..., Any]:
    """A sync decorator that passes the result through: a coroutine stays unawaited."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


class AsyncCall:
    async def __call__(self) -> None:
        Hit.objects.create(task_name="async-call")


ASYNC_CALL = AsyncCall()
SYNC_TO_ASYNC = sync_to_async(noop)
WRAPPED_ASYNC = logged(async_body)
ATOMIC_ASYNC = transaction.atomic(async_body)
# The fix E026 advises, even behind a sync decorator: it runs the coroutine.
ASYNC_TO_SYNC = logged(async_to_sync(async_body))


def returns_coroutine() -> Coroutine[Any, Any, None]:
    """A plain function no check can see through: it hands back the coroutine it made."""
    return async_body()


def returns_generator() -> Iterator[int]:
    return (Hit.objects.create(task_name="generator").pk for _ in range(1))


# --- the process executor: process groups, the forced exit, jobs with processes of their own ---


def spawn_and_sleep(directory: str, seconds: float = 3.0) -> None:
    """Start a grandchild, note both pids in `started`, sleep, then leave a `finished` file.

    Files only, no database: the markers say what ran even when the run is killed mid-way.
    """
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    folder = Path(directory)
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    _write_whole(folder / "started", f"{os.getpid()} {grandchild.pid}")
    time.sleep(seconds)
    (folder / "finished").touch()
    grandchild.kill()
    grandchild.wait()


def uses_multiprocessing(path: str) -> None:
    """Compute with a multiprocessing pool, then write the result to `path`."""
    import multiprocessing
    from pathlib import Path

    with multiprocessing.get_context("spawn").Pool(2) as pool:
        values = pool.map(abs, [-1, -2, -3])
    Path(path).write_text(",".join(map(str, values)))


# --- the acceptance tests: gates by task name, and what task code should not raise ---


def wait_for_gate(task_name: str) -> None:
    """Record a hit, then block (bounded) until the test opens this task's gate."""
    Hit.objects.create(task_name=task_name, label="started")
    if not gate(task_name).wait(timeout=20):
        raise TimeoutError(f"gate {task_name!r} was never opened")


def raise_system_exit(task_name: str) -> None:
    Hit.objects.create(task_name=task_name)
    raise SystemExit(2)


def signal_own_process(task_name: str) -> None:
    """Send SIGTERM to this process, as an orchestrator stopping the worker would."""
    Hit.objects.create(task_name=task_name)
    os.kill(os.getpid(), signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the handler runs between two of these
        time.sleep(0.01)
    raise AssertionError("no SIGTERM handler stopped this run")


def reload_or_exit(signum: object = None, frame: object = None, task_name: str = "") -> None:
    """A project's SIGTERM hook that is also scheduled: it exits when its check fails."""
    Hit.objects.create(task_name=task_name or "handler")
    raise SystemExit(3)


def leave_mysql_out_of_sync(task_name: str) -> None:
    """Fail with a result left unread on this thread's MySQL connection, as a stop signal
    landing in the middle of a query leaves it: the next command is "out of sync"."""
    import MySQLdb.cursors
    from django.db import connection

    Hit.objects.create(task_name=task_name)
    cursor = connection.connection.cursor(MySQLdb.cursors.SSCursor)
    cursor.execute("SELECT 1 UNION SELECT 2")
    # Kept: collected, the cursor would read the rest and put the connection back in sync,
    # which a query cut off inside the driver does not.
    _UNREAD.append(cursor)
    raise ValueError("stopped in the middle of a query")


_UNREAD: list[Any] = []


def raise_keyboard_interrupt(task_name: str) -> None:
    Hit.objects.create(task_name=task_name)
    raise KeyboardInterrupt


def raise_value_error(task_name: str) -> None:
    Hit.objects.create(task_name=task_name)
    raise ValueError(f"{task_name} broke on purpose")


def fail_then_succeed(task_name: str) -> None:
    """Fail on the first call for this task name, succeed afterwards."""
    first = not Hit.objects.filter(task_name=task_name).exists()
    Hit.objects.create(task_name=task_name, label="failed" if first else "ok")
    if first:
        raise RuntimeError("first call fails")


class UnprintableError(Exception):
    """An exception whose str() itself raises, as some library exceptions do."""

    def __str__(self) -> str:
        raise RuntimeError("str() of this exception fails")


def raise_unprintable(task_name: str) -> None:
    Hit.objects.create(task_name=task_name)
    raise UnprintableError


def raise_with_nul(task_name: str) -> None:
    """Fail with a message holding a NUL byte (binary output), which PostgreSQL text refuses."""
    Hit.objects.create(task_name=task_name)
    raise ValueError("unexpected bytes b'\x00\x01' in response")


def raise_with_surrogate(task_name: str) -> None:
    """Fail quoting a file name decoded with surrogateescape: a lone surrogate, which no
    database driver can encode."""
    Hit.objects.create(task_name=task_name)
    raise ValueError("cannot parse " + os.fsdecode(b"report-\xff.csv"))


def raise_with_emoji(task_name: str) -> None:
    """Fail with a character outside the Basic Multilingual Plane, which utf8mb3 refuses."""
    Hit.objects.create(task_name=task_name)
    raise ValueError("deploy failed \U0001f525")


def leave_atomic_open(task_name: str = "") -> None:
    """Enter a transaction and never leave it (a context manager's __enter__ called alone);
    record a Hit in it, or without `task_name` (a run's own process, whose database is not
    the test's) only read."""
    from django.db import transaction

    transaction.atomic().__enter__()
    _write_or_read(task_name)


def _write_or_read(task_name: str) -> None:
    if task_name:
        Hit.objects.create(task_name=task_name)
    else:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")


def leave_thread_running(directory: str, seconds: float, flag: str = "atexit") -> None:
    """Return at once, leaving a non-daemon thread asleep; note when atexit handlers run."""
    import atexit

    atexit.register(lambda: (Path(directory) / flag).write_text("ran"))
    threading.Thread(target=time.sleep, args=(seconds,), daemon=False).start()


async def coroutine_job(task_name: str) -> None:
    Hit.objects.create(task_name=task_name)


def generator_job(task_name: str):  # type: ignore[no-untyped-def]
    Hit.objects.create(task_name=task_name)
    yield


def takes_anything(**kwargs: object) -> None:
    Hit.objects.create(task_name="takes-anything")


# --- runscheduler processes: files as gates, and receivers of run_finished ---


def wait_for_file(
    path: str,
    task_name: str = "blocker",
    timeout: float = 120.0,
    record_end: bool = True,
    done_path: str = "",
) -> None:
    """Record a start, block until `path` exists (bounded), then record the end.

    With `record_end` false the end is signalled only by creating `done_path`, without the
    database, so a test can end a run while the database is down.
    """
    Hit.objects.create(task_name=task_name, label="started")
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.05)
    if done_path:
        Path(done_path).touch()
    if record_end:
        Hit.objects.create(task_name=task_name, label="finished")


def pid_then_wait(path: str, pid_file: str, task_name: str = "child") -> None:
    """Write this process's pid to `pid_file`, record a start, block until `path` exists."""
    import os

    Path(pid_file).write_text(str(os.getpid()))
    wait_for_file(path, task_name=task_name, timeout=60.0)


def _slow_receiver(sender: object, run: Any, **kwargs: object) -> None:
    """Block on a file named in the task's kwargs: a receiver slower than the stale limit."""
    gate = run.task.kwargs.get("receiver_gate")
    if not gate or run.status == "running":
        return
    Hit.objects.create(task_name=run.task.name, label="receiver-blocked")
    deadline = time.monotonic() + 60.0
    while not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def with_receiver_gate(receiver_gate: str, task_name: str = "slow-receiver") -> None:
    """Record one hit; the receiver connected below blocks on `receiver_gate` afterwards."""
    Hit.objects.create(task_name=task_name, label="ran")


run_finished.connect(_slow_receiver, dispatch_uid="tests.testapp.jobs.slow_receiver")


def wait_then_signal(path: str, task_name: str, record_signals: bool = True) -> None:
    """As wait_for_file; the receiver below records each run_finished for this task."""
    wait_for_file(path, task_name=task_name, timeout=60.0)


def _record_signal(sender: object, run: Any, **kwargs: object) -> None:
    if run.task.kwargs.get("record_signals"):
        Hit.objects.create(task_name=run.task.name, label=f"signal:{run.status}")


run_finished.connect(_record_signal, dispatch_uid="tests.testapp.jobs.record_signal")


def _record_run_lost(sender: object, run: Any, **kwargs: object) -> None:
    if run.task.kwargs.get("record_signals"):
        Hit.objects.create(task_name=run.task.name, label=f"run_lost:{run.pk}")


run_lost.connect(_record_run_lost, dispatch_uid="tests.testapp.jobs.record_run_lost")


def chaos_step(context: Any, seconds: float = 1.0) -> None:
    """Record the start and the end of one run of one occurrence, working `seconds` between.

    The chaos tests kill the process running it at any point; the Hit rows tell which runs
    started, which ran to the end, and for which occurrence.
    """
    label = f"{context.run_id}|{context.occurrence.isoformat()}"
    Hit.objects.create(task_name=f"chaos:{context.task_name}", label=f"start|{label}")
    time.sleep(seconds)
    Hit.objects.create(task_name=f"chaos:{context.task_name}", label=f"end|{label}")


class CallableJob:
    """A class whose instances are callable: declaring the class would only build one."""

    def __call__(self) -> None:
        Hit.objects.create(task_name="callable-job")


def cleans_up_slowly(directory: str, cleanup: float = 2.0) -> None:
    """Sleep; on SIGTERM, take `cleanup` seconds to clean up (noting when) before exiting."""
    import os
    import signal
    import time
    from pathlib import Path

    folder = Path(directory)

    def clean_up(signum: int, frame: object) -> None:
        time.sleep(cleanup)
        (folder / "cleaned").write_text(repr(time.time()))
        os._exit(0)

    signal.signal(signal.SIGTERM, clean_up)
    (folder / "started").write_text(str(os.getpid()))
    time.sleep(120)


def fork_and_terminate(path: str, task_name: str = "forks") -> None:
    """Fork a child that sends itself SIGTERM, as Pool.terminate() does to its workers, then
    a multiprocessing pool; write how the child ended ("-15": killed by SIGTERM)."""
    pid = os.fork()
    if pid == 0:  # the child: it must die of this, and the scheduler must not hear it
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert pool.map(abs, [-1, -2]) == [1, 2]
    _write_whole(Path(path), str(os.waitstatus_to_exitcode(status)))
    Hit.objects.create(task_name=task_name)


def _write_whole(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all: tests read such a file as soon as it
    exists, and write_text() creates it empty before writing."""
    partial = path.with_name(f"{path.name}.tmp")
    partial.write_text(text)
    os.replace(partial, path)


def hold_connection(path: str, task_name: str) -> None:
    """Take a connection (recording the session's idle-transaction bound), and hold it until
    `path` exists (bounded): a worker thread keeps its connection until its run ends."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW idle_in_transaction_session_timeout")
        (bound,) = cursor.fetchone()
    Hit.objects.create(task_name=task_name, label=f"started idle bound {bound}")
    wait_for_file(path, task_name=task_name)


class InterruptingStrError(Exception):
    """An exception whose str() raises a BaseException, not an Exception."""

    def __str__(self) -> str:
        raise KeyboardInterrupt


def raise_interrupting_str(task_name: str = "") -> None:
    """Fail with an InterruptingStrError (recording a Hit first, given `task_name`)."""
    if task_name:
        Hit.objects.create(task_name=task_name)
    raise InterruptingStrError


def close_driver_connection(task_name: str = "") -> None:
    """Write (or only read, as leave_atomic_open), then close the driver's connection under
    Django's feet, as code handed the raw connection may: MySQL's close of it then fails."""
    _write_or_read(task_name)
    connection.connection.close()


def leave_autocommit_off(task_name: str = "") -> None:
    """Turn autocommit off, write (or only read, as leave_atomic_open), and return without
    committing."""
    from django.db import transaction

    transaction.set_autocommit(False)
    _write_or_read(task_name)


def activate_zone_and_language(task_name: str) -> None:
    """Activate a time zone and a language, as code written for a request does, and return."""
    from django.utils import timezone, translation

    timezone.activate("Asia/Tokyo")
    translation.activate("de")
    Hit.objects.create(task_name=task_name)


def record_zone_and_language(task_name: str) -> None:
    """Record the current time zone and language in the Hit's label."""
    from django.utils import timezone, translation

    label = f"{timezone.get_current_timezone_name()}|{translation.get_language()}"
    Hit.objects.create(task_name=task_name, label=label)


def print_line(text: str) -> None:
    """Print `text` on stdout, as task code does."""
    print(text)


def commit_with_autocommit_off(task_name: str) -> None:
    """Turn autocommit off, write, commit, and return with autocommit still off."""
    transaction.set_autocommit(False)
    Hit.objects.create(task_name=task_name)
    transaction.commit()
