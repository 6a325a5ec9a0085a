"""Start the example project in one terminal: the admin web server and the scheduler.

    python example_project/demo.py [--port 8000] [--schedulers 1] [--worker]

Exits 1 at once, with a message, if the port is already taken. Otherwise migrates the
database (SQLite file example_project/db.sqlite3 unless DATABASE_URL says otherwise), creates
the demo admin login admin / admin (development only), then starts ``runserver`` and
``runscheduler`` as child processes and prints their output line by line, prefixed with [web]
and [scheduler]. Ctrl-C stops both cleanly and exits 0. With --worker it also starts a Django
Tasks worker (django-tasks-db's ``db_worker``, prefixed [worker]) and declares a task handed to
it, "on-a-worker" (EXAMPLE_PROJECT_WORKER=1 for every child).

Once the admin answers it says how long that took: counted from ``make demo`` when the Makefile
passes its start time in DEMO_STARTED (seconds since the epoch), so installing is included.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType
from typing import IO

HERE = Path(__file__).resolve().parent
MANAGE = [sys.executable, str(HERE / "manage.py")]

# The scheduler's grace period on shutdown: the demo tasks take milliseconds, so a short one
# keeps Ctrl-C snappy; the wait below allows for it plus the web server's own shutdown.
SCHEDULER_GRACE = 10.0
STOP_TIMEOUT = SCHEDULER_GRACE + 10.0
# How long runserver gets to stop on SIGINT before a SIGTERM.
WEB_SIGINT_WAIT = 3.0
READY_TIMEOUT = 60.0

_print_lock = threading.Lock()
_script_started = time.time()


def say(prefix: str, line: str) -> None:
    """Print one line with its prefix; whole lines only, so output from the children interleaves."""
    with _print_lock:
        sys.stdout.write(f"[{prefix}] {line.rstrip()}\n")
        sys.stdout.flush()


def pump(prefix: str, stream: IO[str]) -> None:
    for line in stream:
        say(prefix, line)


class Child:
    """A manage.py command running in its own session, its output pumped with a prefix."""

    def __init__(self, prefix: str, args: list[str], env: dict[str, str]) -> None:
        self.prefix = prefix
        # Its own session: a Ctrl-C in the terminal reaches only this script, which forwards
        # exactly one SIGINT. Were the children in the terminal's process group they would get
        # the terminal's SIGINT and then ours, and a second signal stops the scheduler at once.
        self.process = subprocess.Popen(
            [*MANAGE, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=env,
            start_new_session=True,
        )
        assert self.process.stdout is not None
        self.reader = threading.Thread(target=pump, args=(prefix, self.process.stdout), daemon=True)
        self.reader.start()

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)


def run_step(prefix: str, args: list[str], env: dict[str, str]) -> None:
    """Run a setup command to completion, its output prefixed; exit if it fails."""
    child = Child(prefix, args, env)
    code = child.process.wait()
    child.reader.join(timeout=5)
    if code != 0:
        say("demo", f"'manage.py {' '.join(args)}' failed with exit code {code}; stopping.")
        sys.exit(code)


def another_port(port: int) -> str:
    """How to run the demo on another port, as a make command line."""
    return f'make demo DEMO_ARGS="--port {port + 1 if port < 65535 else 8001}"'


def port_problem(port: int) -> str | None:
    """Return why runserver could not listen on 127.0.0.1:port, or None if it is free.

    Asked before anything starts: otherwise the readiness probe below would get its answer
    from whatever server already holds the port, and announce an admin that is not ours.
    SO_REUSEADDR as runserver sets it, so a port left in TIME_WAIT by a previous run is free.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                why = "is already in use, probably by another server; stop it or"
            else:
                why = f"cannot be used ({exc.strerror});"
            return f"Port {port} on 127.0.0.1 {why} choose another port: {another_port(port)}"
    return None


def tcp_port(text: str) -> int:
    """Parse --port (or DEMO_PORT): an int from 1 to 65535."""
    port = int(text)
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port (1 to 65535)")
    return port


def time_to_ready(now: float, environ: dict[str, str]) -> str:
    """Say how long the demo took to answer, from `make demo` if DEMO_STARTED says when."""
    try:
        make_started: float | None = float(environ["DEMO_STARTED"])
    except (KeyError, ValueError):
        make_started = None  # started by hand, or not a time: count from this script's start
    if make_started is not None and make_started <= now:
        return f"Set up and started in {now - make_started:.0f} s (since 'make demo' began)."
    return f"Started in {now - _script_started:.0f} s."


def wait_until_answering(url: str, children: list[Child], stop: threading.Event) -> bool:
    """Return True once url answers at all (any HTTP status), False if stopped or a child died.

    The children are looked at before every probe, and the web child again after an answer:
    once runserver has exited, an answer can only come from some other server on the port.
    """
    deadline = time.monotonic() + READY_TIMEOUT
    web = children[0]
    while time.monotonic() < deadline and not stop.is_set():
        if any(child.process.poll() is not None for child in children):
            return False
        try:
            with urllib.request.urlopen(url, timeout=2):
                pass
        except urllib.error.HTTPError:
            pass
        except OSError:
            stop.wait(0.2)
            continue
        return web.process.poll() is None
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # A str default goes through tcp_port too, so a bad DEMO_PORT is a usage error.
    parser.add_argument("--port", type=tcp_port, default=os.environ.get("DEMO_PORT", "8000"))
    parser.add_argument(
        "--schedulers",
        type=int,
        default=1,
        help="runscheduler processes to start side by side (use PostgreSQL for more than one)",
    )
    parser.add_argument(
        "--worker",
        action="store_true",
        help="also start a Django Tasks worker (db_worker) and declare a task handed to it",
    )
    args = parser.parse_args()

    problem = port_problem(args.port)
    if problem is not None:
        say("demo", problem)
        return 1

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if not env.get("SECRET_KEY"):
        say("demo", "WARNING: development only: SECRET_KEY is not set, the demo key is used.")
        # Said once here rather than by every child process that loads the settings.
        env["EXAMPLE_PROJECT_DEV_KEY_WARNED"] = "1"
    if args.worker:
        env["EXAMPLE_PROJECT_WORKER"] = "1"
    database = env.get("DATABASE_URL") or f"sqlite:///{HERE / 'db.sqlite3'}"
    say("demo", f"database: {database}")
    if env.get("DATABASE_URL"):
        say(
            "demo",
            "DATABASE_URL comes from your environment: the demo migrates that database and "
            "declares its own tasks there, retiring the ones it does not declare until their "
            "own scheduler starts again. Unset it to use the demo's own SQLite file.",
        )

    run_step("setup", ["migrate", "--no-input"], env)
    run_step("setup", ["demoadmin"], env)

    stop = threading.Event()
    signals_seen = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal signals_seen
        signals_seen += 1
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, on_signal)

    address = f"127.0.0.1:{args.port}"
    children = [Child("web", ["runserver", "--noreload", address], env)]
    for number in range(1, args.schedulers + 1):
        prefix = "scheduler" if args.schedulers == 1 else f"scheduler-{number}"
        children.append(Child(prefix, ["runscheduler", "--grace", f"{SCHEDULER_GRACE:g}"], env))
    if args.worker:
        # No reloader: a worker stopped by the reloader may not record its run's end itself
        # (docs/handoff.rst).
        children.append(
            Child("worker", ["db_worker", "--queue-name", "default", "--no-reload"], env)
        )

    admin_url = f"http://{address}/admin/"
    if wait_until_answering(admin_url + "login/", children, stop):
        say("demo", "")
        say("demo", time_to_ready(time.time(), env))
        say("demo", f"The admin is at {admin_url}  (login admin / admin, development only)")
        say("demo", "Watch 'Scheduled tasks' fill up: runs every minute, 'flaky' fails on odd")
        say("demo", "minutes and its retry succeeds 20 seconds later. Ctrl-C stops everything.")
        if args.worker:
            say("demo", "'on-a-worker' is handed to the db_worker every minute: see [worker].")
        say("demo", "")

    crashed: Child | None = None
    while not stop.is_set():
        crashed = next((c for c in children if c.process.poll() is not None), None)
        if crashed is not None:
            say("demo", f"{crashed.prefix} exited with code {crashed.process.returncode}.")
            if crashed is children[0]:
                say(
                    "demo",
                    f"If port {args.port} is taken, choose another: {another_port(args.port)}",
                )
            break
        stop.wait(0.5)

    say("demo", "stopping (Ctrl-C again to kill at once)...")
    seen = signals_seen
    for child in children:
        child.signal(signal.SIGINT)
    deadline = time.monotonic() + STOP_TIMEOUT
    # runserver stops on Ctrl-C through Python's KeyboardInterrupt, which is lost when the
    # signal lands in a weakref callback or a __del__ ("Exception ignored"): still up after
    # this long, it gets a SIGTERM, which ends it whatever it is doing. (The scheduler and the
    # worker never get a second signal: for them it means "stop at once".)
    web_term_at = time.monotonic() + WEB_SIGINT_WAIT
    killed = False
    for child in children:
        while child.process.poll() is None:
            if time.monotonic() > deadline or signals_seen > seen:
                for other in children:
                    other.signal(signal.SIGKILL)
                killed = True
            elif time.monotonic() > web_term_at and children[0].process.poll() is None:
                children[0].signal(signal.SIGTERM)
                web_term_at = deadline
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(timeout=0.2)
    for child in children:
        child.reader.join(timeout=5)
        say("demo", f"{child.prefix} stopped (exit code {child.process.returncode}).")
    if crashed is not None or killed:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
