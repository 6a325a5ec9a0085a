"""Run the test suite on every database that answers on this machine.

`make test` runs it with the development environment's Python and Django against SQLite,
then PostgreSQL and MariaDB when they answer on localhost, printing one line for each
database it skips and why. `make test FULL=1` (what CI runs) runs the whole matrix instead:
for each Django version (a tox environment with its own Python), the suite on the three
databases side by side, then lint and docs; there a database that does not answer is a
failure, not a skip.

Database URLs come from POSIXCRON_PG_URL and POSIXCRON_MYSQL_URL when set.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
TOX_ENVS = ("py311-django52", "py312-django60", "py313-django61")
# The suite that runs the long multi-process tests (marked `long`) on each database.
LONG_TESTS_ENV = "py313-django61"
# Tests that touch no database (the pure cron engine): each version's SQLite suite runs them,
# its PostgreSQL and MariaDB suites, which would repeat them to the bit, leave them out.
NO_DATABASE_TESTS = ("tests/engine",)
LOGS = ROOT / "test-artifacts" / "matrix"

# A suite takes 6-9 minutes here, the one with the long tests on PostgreSQL 15-18; one that
# runs past this is hung (a deadlock, a child process that never exits), and CI must fail
# with its log rather than time out mute. Not tighter: a slower host must not read as a hang.
SUITE_TIMEOUT = 30 * 60

# pytest's closing line, e.g. "== 776 passed, 4 skipped, 1 xfailed in 131.90s ==".
_COUNT_RE = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)")


@dataclass(frozen=True)
class Database:
    label: str
    url: str
    module: str  # the driver the tests need

    def unavailable(self) -> str | None:
        """Return why this database cannot be used here, or None when it can."""
        if not self.url.startswith(("postgres", "mysql")):
            return None
        parts = urlsplit(self.url)
        host, port = parts.hostname or "127.0.0.1", parts.port
        try:
            with socket.create_connection((host, port or 0), timeout=2):
                pass
        except OSError as exc:
            return f"nothing answers on {host}:{port} ({exc.strerror or exc})"
        return None


DATABASES = (
    Database("SQLite", "sqlite:///:memory:", "sqlite3"),
    Database(
        "PostgreSQL",
        os.environ.get("POSIXCRON_PG_URL", "postgres://postgres@127.0.0.1:5432/posixcron"),
        "psycopg",
    ),
    Database(
        "MariaDB",
        os.environ.get("POSIXCRON_MYSQL_URL", "mysql://root@127.0.0.1:3306/posixcron"),
        "MySQLdb",
    ),
)


@dataclass
class Outcome:
    label: str
    status: str  # "passed", "skipped: why" or "failed (...)"
    counts: dict[str, int] | None = None
    # pytest's short summary lines of a failed suite ("FAILED tests/...::name - reason"), so
    # that the closing summary, the part of a long CI log that is read first, names them.
    failures: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return self.status.startswith("failed")


def pyenv_path() -> str:
    """Return PATH with pyenv's 3.12 and 3.13 in front, where tox looks for its interpreters."""
    versions = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    extra = [str(p / "bin") for p in sorted(versions.glob("3.1[23].*")) if (p / "bin").is_dir()]
    return os.pathsep.join([*extra, os.environ.get("PATH", "")])


def driver_missing(python: str, module: str) -> bool:
    probe = subprocess.run([python, "-c", f"import {module}"], check=False, capture_output=True)
    return probe.returncode != 0


def pytest_counts(output: str) -> dict[str, int] | None:
    """Return the counts on pytest's closing line, or None if it printed none."""
    for line in reversed(output.splitlines()):
        if re.search(r" in [\d.]+s", line) and _COUNT_RE.search(line):
            counts: dict[str, int] = {}
            for number, word in _COUNT_RE.findall(line):
                key = "errors" if word.startswith("error") else word
                counts[key] = counts.get(key, 0) + int(number)
            return counts
    return None


def failure_lines(output: str) -> tuple[str, ...]:
    """Return pytest's "FAILED ..." and "ERROR ..." short summary lines in `output`."""
    return tuple(line for line in output.splitlines() if line.startswith(("FAILED ", "ERROR ")))


def run_quick(pytest_args: list[str]) -> list[Outcome]:
    """Run the suite with this environment's Python, one database after the other."""
    outcomes = []
    for db in DATABASES:
        reason = db.unavailable()
        if reason is None and driver_missing(sys.executable, db.module):
            reason = f"its driver ({db.module}) is not installed in this environment"
        if reason is not None:
            print(f"testmatrix: skipped {db.label}: {reason}", flush=True)
            outcomes.append(Outcome(db.label, f"skipped: {reason}"))
            continue
        print(f"testmatrix: running the suite on {db.label}", flush=True)
        env = {**os.environ, "DATABASE_URL": db.url}
        command = [sys.executable, "-m", "pytest", *pytest_args]
        # Shown as it comes, and kept: the closing summary counts every database's tests.
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line)
        code = process.wait()
        output = "".join(lines)
        status = "passed" if code == 0 else f"failed (exit {code})"
        outcomes.append(Outcome(db.label, status, pytest_counts(output), failure_lines(output)))
    return outcomes


def tox(*args: str) -> int:
    env = {**os.environ, "PATH": pyenv_path()}
    return subprocess.run(
        [sys.executable, "-m", "tox", *args], cwd=ROOT, env=env, check=False
    ).returncode


def run_full(pytest_args: list[str]) -> list[Outcome]:
    """Run each tox environment's suite on the three databases at once, then lint and docs.

    The databases run side by side because a suite spends most of its time waiting on
    processes and servers, not on the CPU; each has its own database (and SQLite file).
    """
    LOGS.mkdir(parents=True, exist_ok=True)
    outcomes = []
    for name in TOX_ENVS:
        print(f"testmatrix: preparing tox environment {name}", flush=True)
        if tox("run", "-e", name, "--notest") != 0:
            outcomes.append(Outcome(name, "failed (its environment could not be built)"))
            continue
        python = ROOT / ".tox" / name / "bin" / "python"
        running = []
        for db in DATABASES:
            label = f"{name} {db.label}"
            reason = db.unavailable()
            if reason is not None:
                print(f"testmatrix: FAILED {label}: {reason}", flush=True)
                outcomes.append(Outcome(label, "failed (database unavailable)"))
                continue
            log_path = LOGS / f"{name}-{db.label}.log"
            env = {
                **os.environ,
                "DATABASE_URL": db.url,
                "POSIXCRON_SQLITE_TEST_DB": str(ROOT / f".test-db-{name}.sqlite3"),
            }
            if name != LONG_TESTS_ENV:
                # The multi-minute chaos tests run once per database, in one Django version.
                env["POSIXCRON_SKIP_LONG"] = f"runs in the {LONG_TESTS_ENV} suite"
            args = list(pytest_args)
            if db.label != "SQLite":
                args += [f"--ignore={path}" for path in NO_DATABASE_TESTS]
            print(f"testmatrix: running the suite on {label} (log: {log_path})", flush=True)
            log = log_path.open("w")
            process = subprocess.Popen(
                # The slowest tests named in each log: where CI's time goes.
                [str(python), "-m", "pytest", "--durations=15", *args],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            running.append((label, process, log, log_path, time.monotonic()))
        for label, process, log, log_path, started in running:
            try:
                code = process.wait(timeout=max(1.0, started + SUITE_TIMEOUT - time.monotonic()))
                status = "passed" if code == 0 else f"failed (exit {code})"
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                status = f"failed (hung: killed after {SUITE_TIMEOUT} s)"
            log.close()
            output = log_path.read_text(errors="replace")
            print(f"\n===== {label}: {status} =====\n{output}", flush=True)
            outcomes.append(Outcome(label, status, pytest_counts(output), failure_lines(output)))
    for name in ("lint", "docs"):
        print(f"testmatrix: running tox -e {name}", flush=True)
        code = tox("run", "-e", name)
        outcomes.append(Outcome(name, "passed" if code == 0 else f"failed (exit {code})"))
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--full", action="store_true", help="the CI matrix through tox")
    parser.epilog = "Every other argument is passed on to pytest, in its order."
    # pytest's own arguments ("-x", "-k name", paths) go through as given, with or without a
    # "--" before them.
    args, pytest_args = parser.parse_known_args()
    pytest_args = [arg for arg in pytest_args if arg != "--"]

    outcomes = run_full(pytest_args) if args.full else run_quick(pytest_args)

    print("\ntestmatrix summary:")
    for outcome in outcomes:
        print(f"  {outcome.label}: {outcome.status}")
        for line in outcome.failures:
            print(f"    {line}")
    totals: dict[str, int] = {}
    for outcome in outcomes:
        for key, number in (outcome.counts or {}).items():
            totals[key] = totals.get(key, 0) + number
    if totals:
        # A suite that failed without a closing line (it crashed, or hung) counts as one.
        uncounted = sum(1 for outcome in outcomes if outcome.failed and outcome.counts is None)
        failed = totals.get("failed", 0) + totals.get("errors", 0) + uncounted
        extra = f", {totals['skipped']} skipped" if totals.get("skipped") else ""
        print(f"testmatrix: {totals.get('passed', 0)} passed, {failed} failed{extra}")
    return 1 if any(outcome.failed for outcome in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
