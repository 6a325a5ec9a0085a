"""A harness that starts real `runscheduler` processes against the test database.

Each process gets the settings module tests.harness.child_settings, told through a JSON file
which database to use (the one pytest-django created for this session) and which tasks to
declare. Tests run with transaction=True so what they write is committed and visible to the
children, and what the children write is visible to the test. Waiting is always on a
condition polled every 50 ms with a deadline; every child is killed in teardown, and the
output of every child is attached to a failure.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from django_posixcron.models import SchedulerProcess

ROOT = Path(__file__).resolve().parents[2]
POLL = 0.05
DEFAULT_TIMEOUT = 30.0


def vendor() -> str:
    return connection.vendor


def only_on(*vendors: str, why: str = "") -> None:
    """Skip the calling test unless the test database is one of `vendors`."""
    if connection.vendor not in vendors:
        names = {"postgresql": "PostgreSQL", "mysql": "MariaDB/MySQL", "sqlite": "SQLite"}
        wanted = " or ".join(names.get(v, v) for v in vendors)
        pytest.skip(
            f"runs on {wanted} only{f' ({why})' if why else ''}; "
            f"DATABASE_URL points at {names.get(connection.vendor)}"
        )


# The slowest cases wait on real time (a minute boundary, the stale-heartbeat threshold);
# each runs on the databases where it matters most, so the suite stays within its CI budget.
SLOW_CASE = "slow, so run on one or two databases to keep the suite within its CI budget"


def _half_a_year_away() -> str:
    """A yearly schedule whose one occurrence is half a year from today (UTC).

    A fixed "0 0 1 1 *" fires in the first minute of every year: a test started then saw a
    run it did not expect. Computed once per session, the same in every child process.
    """
    day = dt.datetime.now(dt.UTC) + dt.timedelta(days=182)
    return f"0 12 {min(day.day, 28)} {day.month} *"


# Yearly, and never due while the suite runs.
YEARLY = _half_a_year_away()


def task(
    callable_path: str = "tests.testapp.jobs.record",
    schedule: str = YEARLY,
    retry_delay: float = 300,
    **extra: Any,
) -> dict[str, Any]:
    """Return one TASKS entry; the default schedule (yearly) never fires during a test."""
    return {"schedule": schedule, "callable": callable_path, "retry_delay": retry_delay, **extra}


def record_task(name: str, schedule: str = YEARLY, **extra: Any) -> dict[str, Any]:
    """Return a task whose callable writes one Hit row named after it."""
    return task(
        "tests.testapp.jobs.record",
        schedule=schedule,
        kwargs={"label": name, "task_name": name},
        **extra,
    )


class Child:
    """One runscheduler subprocess and the file its output goes to."""

    def __init__(
        self,
        label: str,
        args: list[str],
        env: dict[str, str],
        log: Path,
        *,
        process_group: int | None = None,
        command: str = "runscheduler",
    ) -> None:
        self.label = label
        self.args = args
        self.command = command
        self.log = log
        self._log_file = log.open("wb")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "django", command, *args],
            cwd=ROOT,
            env=env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            process_group=process_group,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        if not self._log_file.closed:
            self._log_file.flush()
        return self.log.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        if self.alive():
            self.popen.send_signal(signum)

    def kill(self) -> int:
        """Kill -9 and reap; return the exit status."""
        self.signal(signal.SIGKILL)
        return self.popen.wait(timeout=DEFAULT_TIMEOUT)

    def wait(self, timeout: float = DEFAULT_TIMEOUT) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.label} did not exit within {timeout} s\n{self.output()}"
            ) from None

    def close(self) -> None:
        if self.alive():
            self.kill()
        self._log_file.close()


class Schedulers:
    """Start, watch and always clean up runscheduler processes for one test."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.children: list[Child] = []
        self._configs = 0
        self.config_path: Path | None = None
        self.configure({})

    # -- settings -------------------------------------------------------------------------

    def configure(
        self,
        tasks: dict[str, Any],
        *,
        db_name: str | None = None,
        extra: dict[str, Any] | None = None,
        **top_level: Any,
    ) -> Path:
        """Write the settings the next started processes read; return the file.

        `extra` goes to proc_settings beside the database name (EMPTY_DB_NAME, ROUTER).
        """
        posixcron = {"TASKS": tasks, "POLL_INTERVAL": 1, "CONCURRENCY": 4, **top_level}
        self._configs += 1
        path = self.tmp_path / f"settings-{self._configs}.json"
        name = str(connection.settings_dict["NAME"]) if db_name is None else db_name
        path.write_text(json.dumps({"DB_NAME": name, "POSIXCRON": posixcron, **(extra or {})}))
        self.config_path = path
        return path

    def env(self) -> dict[str, str]:
        assert self.config_path is not None
        env = dict(os.environ)
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "tests.harness.child_settings",
                "POSIXCRON_PROC_CONFIG": str(self.config_path),
                "PYTHONPATH": os.pathsep.join(
                    [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
                ),
                "PYTHONUNBUFFERED": "1",
                "PYTHONWARNINGS": "error",
            }
        )
        return env

    # -- processes ------------------------------------------------------------------------

    def start(self, *args: str) -> Child:
        """Start `runscheduler *args` in the background."""
        label = f"scheduler-{len(self.children) + 1}"
        child = Child(label, list(args), self.env(), self.tmp_path / f"{label}.log")
        self.children.append(child)
        return child

    def start_worker(self, backend: str = "default", *args: str) -> Child:
        """Start a Django Tasks worker for `backend`: django-tasks-db's or an RQ worker.

        Both take jobs from the queue named "default"; an RQ worker works in its own process
        (no fork per job), so a SIGKILL to it kills the run it executes.
        """
        label = f"worker-{len(self.children) + 1}"
        if backend == "rq":
            command = "rqworker"
            args = (
                "default",
                "--worker-class",
                "rq.worker.SimpleWorker",
                "--job-class",
                "django_tasks_rq.Job",
                *args,
            )
        else:
            command = "db_worker"
            args = ("--backend", backend, "--interval", "0.2", "--no-startup-delay", *args)
        child = Child(
            label, list(args), self.env(), self.tmp_path / f"{label}.log", command=command
        )
        self.children.append(child)
        return child

    def start_live(self, count: int = 1, *args: str) -> list[Child]:
        """Start `count` schedulers; wait until each has registered and reconciled settings.

        A scheduler registers before it reconciles (so that concurrent ones see each other),
        and prints its start-up summary once it has reconciled.
        """
        children = [self.start(*args) for _ in range(count)]
        pids = {c.pid for c in children}
        self.wait_for(
            lambda: (
                pids <= set(SchedulerProcess.objects.values_list("pid", flat=True))
                and all("django-posixcron scheduler " in c.output() for c in children)
            ),
            what=f"{count} scheduler(s) to register and reconcile",
        )
        return children

    def run(self, *args: str, timeout: float = DEFAULT_TIMEOUT) -> subprocess.CompletedProcess[str]:
        """Run `runscheduler *args` to completion; return its result."""
        return self.manage("runscheduler", *args, timeout=timeout)

    def manage(
        self, command: str, *args: str, timeout: float = DEFAULT_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        """Run a management command to completion with the children's settings.

        Fails the test if the command's interpreter reported an ignored exception (see the
        `schedulers` fixture).
        """
        try:
            result = subprocess.run(
                [sys.executable, "-m", "django", command, *args],
                cwd=ROOT,
                env=self.env(),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{command} {args} ran past {timeout} s: {exc}") from None
        return nothing_ignored(result)

    def outputs(self) -> str:
        return "\n".join(
            f"----- {c.label} (pid {c.pid}, {' '.join(c.args) or 'no args'}, "
            f"exit {c.popen.poll()}) -----\n{c.output()[-6000:]}"
            for c in self.children
        )

    def close(self) -> None:
        for child in self.children:
            child.close()

    # -- waiting --------------------------------------------------------------------------

    def wait_for(
        self,
        condition: Callable[[], Any],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        what: str = "the condition",
    ) -> Any:
        """Poll `condition` every 50 ms until it is truthy; fail with all output after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            for child in self.children:
                # A child that died when it should not have is the failure to report.
                if not child.alive() and getattr(child, "expect_alive", True):
                    raise AssertionError(
                        f"{child.label} exited ({child.popen.returncode}) while waiting for "
                        f"{what}\n{self.outputs()}"
                    )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout} s waiting for {what}\n{self.outputs()}"
                )
            time.sleep(POLL)

    def expect_exit(self, child: Child) -> None:
        """Tell wait_for that this child exiting is expected (killed or stopped on purpose)."""
        child.expect_alive = False  # type: ignore[attr-defined]


@pytest.fixture
def schedulers(transactional_db: None, tmp_path: Path) -> Iterator[Schedulers]:
    """Yield a Schedulers harness; every child is killed before the database is flushed."""
    harness = Schedulers(tmp_path)
    try:
        yield harness
    finally:
        harness.close()
    # What a child's interpreter reports while it shuts down (a ResourceWarning, which the
    # children's PYTHONWARNINGS=error makes an error, raised in a __del__) cannot fail the
    # child: Python prints "Exception ignored" and exits with the status it had. Look for it.
    # The report's first line names what was ignored: it is what a CI summary prints.
    ignored = {
        c.label: what_was_ignored(c.output(), tolerate=redis_socket_at_exit(c.command))
        for c in harness.children
    }
    ignored = {label: what for label, what in ignored.items() if what}
    assert not ignored, f"ignored exceptions: {ignored}\n{harness.outputs()}"


def what_was_ignored(output: str, *, tolerate: re.Pattern[str] | None = None) -> str:
    """Return the first "Exception ignored" report in `output` on one line, or "".

    Python prints it over several lines: "Exception ignored in: <where>", the traceback if
    there is one, then the exception itself (the first line after them that is not indented).
    A report whose line matches `tolerate` is passed over, not the ones after it.
    """
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if "Exception ignored" not in line:
            continue
        rest = (
            later
            for later in lines[i + 1 : i + 40]
            if later.strip() and not later.startswith((" ", "Traceback"))
        )
        report = f"{line.strip()} -> {next(rest, '(no exception line)').strip()}"
        if tolerate is None or not tolerate.search(report):
            return report
    return ""


def redis_socket_at_exit(command: str) -> re.Pattern[str] | None:
    """For an RQ worker, the report of its own Redis socket left open as it exits; else None.

    An RQ worker stopped by SIGTERM can exit with a socket redis-py left open to the Redis
    server (most likely its pub/sub thread's: a daemon thread reading the worker's command
    channel, which RQ joins for one second only), and the interpreter's finaliser reports it:
    a ResourceWarning raised in a __del__ at exit, seen once in CI after many clean runs. The
    socket is RQ's, not this package's (the package opens none in a worker; its database
    drivers are C clients), so only that report is passed over, and only in an RQ worker.
    """
    if command != "rqworker":
        return None
    port = settings.RQ_QUEUES["default"]["PORT"]
    return re.compile(rf"ResourceWarning: unclosed <socket\.socket .*raddr=\('[^']*', {port}\)>")


def running(pid: int) -> bool:
    """Return True while `pid` runs: a zombie (dead, not yet reaped) does not count.

    A run's process outlived by its watcher is reaped by init, whenever init gets to it
    (seconds later on some hosts, never on others): it is gone once it no longer executes.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def nothing_ignored(
    result: subprocess.CompletedProcess[str],
) -> subprocess.CompletedProcess[str]:
    """Return `result`, failing the test if its interpreter reported an ignored exception."""
    output = (result.stdout or "") + (result.stderr or "")
    what = what_was_ignored(output)
    assert not what, f"{result.args} reported an ignored exception: {what}\n{output[-6000:]}"
    return result


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def runscheduler_with(settings_module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `manage.py runscheduler *args` under `settings_module`, without DATABASE_URL."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": settings_module}
    env.pop("DATABASE_URL", None)
    return nothing_ignored(
        subprocess.run(
            [sys.executable, "-m", "django", "runscheduler", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    )
