"""The example project: its settings pass the checks, it runs, and demo.py stops cleanly."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from example_project.demo import time_to_ready

ROOT = Path(__file__).resolve().parents[2]
MANAGE = [sys.executable, str(ROOT / "example_project" / "manage.py")]
TIMEOUT = 60.0

pytestmark = pytest.mark.processes


@pytest.fixture
def env(tmp_path):
    """Return an environment for the example project on a fresh SQLite file."""
    environment = {
        key: value
        for key, value in os.environ.items()
        # The example project has its own settings; the suite's must not leak into it.
        if key not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "SECRET_KEY", "TIME_ZONE")
    }
    environment["DATABASE_URL"] = f"sqlite:///{tmp_path / 'example.sqlite3'}"
    environment["PYTHONUNBUFFERED"] = "1"
    return environment


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MANAGE, *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def test_settings_pass_the_checks_and_warn_about_the_development_key(env):
    result = manage(env, "check", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SECRET_KEY is not set" in result.stderr


def test_no_warning_when_a_secret_key_is_set(env):
    result = manage({**env, "SECRET_KEY": "x" * 50}, "check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SECRET_KEY" not in result.stderr


def test_migrate_then_one_tick_writes_a_heartbeat(env):
    migrate = manage(env, "migrate", "--no-input")
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr
    assert manage(env, "makemigrations", "demo_jobs", "--check", "--dry-run").returncode == 0

    admin = manage(env, "demoadmin")
    assert admin.returncode == 0, admin.stderr
    again = manage(env, "demoadmin")
    assert "Reset the demo admin login: admin / admin" in again.stdout
    # A user called admin that the demo did not create keeps its password.
    code = (
        "from django.contrib.auth.models import User; "
        "User.objects.filter(username='admin').update(email='ops@example.com', password='x')"
    )
    assert manage(env, "shell", "-c", code).returncode == 0
    theirs = manage(env, "demoadmin")
    assert "that the demo did not create exists in this database: left as it is" in theirs.stdout
    password = manage(
        env,
        "shell",
        "-c",
        "from django.contrib.auth.models import User; "
        "print(User.objects.get(username='admin').password)",
    )
    assert password.stdout.strip().splitlines()[-1] == "x"
    code = "from django.contrib.auth.models import User; User.objects.all().delete()"
    assert manage(env, "shell", "-c", code).returncode == 0

    # Every-minute tasks fire at once on first start (the current minute matches).
    once = manage(env, "runscheduler", "--once")
    assert once.returncode == 0, once.stdout + once.stderr
    count = manage(
        env,
        "shell",
        "-c",
        "from example_project.demo_jobs.models import Heartbeat; print(Heartbeat.objects.count())",
    )
    # The last line: Django 5.2+ prints a note about auto-imported objects first.
    assert count.stdout.strip().splitlines()[-1] == "1", count.stdout + count.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status in (200, 302))
    except urllib.error.HTTPError as exc:
        return exc.code in (200, 302)
    except OSError:
        return False


def test_demo_refuses_a_port_another_server_holds(env, tmp_path):
    with socket.socket() as other_server:
        other_server.bind(("127.0.0.1", 0))
        other_server.listen()
        port = int(other_server.getsockname()[1])
        result = subprocess.run(
            [sys.executable, str(ROOT / "example_project" / "demo.py"), "--port", str(port)],
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert f"Port {port} on 127.0.0.1 is already in use" in output
    assert 'choose another port: make demo DEMO_ARGS="--port ' in output
    assert "The admin is at" not in output
    # Refused before anything started: not even the migration ran.
    assert "[setup]" not in output
    assert not (tmp_path / "example.sqlite3").exists()


def test_demo_counts_its_start_from_make_demo_when_told_when_that_was():
    said = time_to_ready(1_000_042.4, {"DEMO_STARTED": "1000000"})
    assert said == "Set up and started in 42 s (since 'make demo' began)."
    # Started by hand, or a value that is no time: counted from demo.py's own start.
    for environ in ({}, {"DEMO_STARTED": "soon"}, {"DEMO_STARTED": "2000000"}):
        assert time_to_ready(1_000_042.4, environ).startswith("Started in "), environ


def make(venv: Path, *args: str, database_url: str = "") -> str:
    """Run make in the checkout on the virtual environment venv; return what it printed."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed here")
    environment = {
        key: value
        for key, value in os.environ.items()
        # Not the flags of a make that started this suite (make test).
        if key not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "DATABASE_URL")
    }
    if database_url:
        environment["DATABASE_URL"] = database_url
    result = subprocess.run(
        ["make", f"VENV={venv}", *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_make_demo_installs_only_the_demo_and_make_test_still_installs_everything(tmp_path):
    venv = tmp_path / "venv"
    demo_only = f"scripts/bootstrap.py --demo sqlite {venv}"
    everything = f"scripts/bootstrap.py {venv}\n"
    assert demo_only in make(venv, "-n", "demo")
    assert everything not in make(venv, "-n", "demo")
    # The demo's driver follows DATABASE_URL.
    postgres = make(venv, "-n", "demo", database_url="postgres://postgres@127.0.0.1/x")
    assert f"scripts/bootstrap.py --demo postgres {venv}" in postgres
    assert "--demo mysql" in make(venv, "-n", "demo", database_url="mysql://root@127.0.0.1/x")

    # After make demo's install (its recipe, with a Python that installs nothing)...
    venv.mkdir()
    make(venv, f"{venv}/.installed-demo-sqlite", "PYTHON=true")
    assert (venv / ".installed-demo-sqlite").exists()
    assert "bootstrap.py" not in make(venv, "-n", "demo")
    # ...make test still installs the whole toolchain, and after that the demo is set up on
    # SQLite and PostgreSQL too.
    assert everything in make(venv, "-n", "test")
    make(venv, f"{venv}/.installed", "PYTHON=true")
    assert "bootstrap.py" not in make(venv, "-n", "test")
    assert "bootstrap.py" not in make(
        venv, "-n", "demo", database_url="postgres://postgres@127.0.0.1/x"
    )


@pytest.mark.slow
@pytest.mark.parametrize("worker", [False, True], ids=["scheduler", "with-worker"])
def test_demo_serves_the_admin_runs_the_scheduler_and_stops_on_sigint(env, worker):
    port = free_port()
    # As make demo passes it: the demo counts from there.
    env["DEMO_STARTED"] = str(int(time.time()) - 100)
    flags = ["--worker"] if worker else []
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "example_project" / "demo.py"), "--port", str(port), *flags],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    lines: list[str] = []
    stdout = process.stdout
    assert stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        url = f"http://127.0.0.1:{port}/admin/login/"
        banner = f"The admin is at http://127.0.0.1:{port}/admin/"

        def up() -> bool:
            output = "".join(lines)
            # With a worker: the new every-minute task fires at once, on the worker.
            ran = not worker or ("[worker]" in output and "Hello from the worker" in output)
            return banner in output and "scheduler started" in output and ran

        while not up():
            assert process.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "demo did not come up:\n" + "".join(lines)
            time.sleep(0.1)
        assert answers(url)

        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=TIMEOUT)
        reader.join(timeout=10)
        output = "".join(lines)
        assert code == 0, output
        assert "login admin / admin" in output
        took = re.search(
            r"\[demo\] Set up and started in (\d+) s \(since 'make demo' began\)\.", output
        )
        assert took is not None, output
        assert 100 <= int(took.group(1)) < 100 + 2 * TIMEOUT, output
        assert "[web] " in output
        assert "[scheduler] " in output
        # 0, or -15 when runserver lost its KeyboardInterrupt and the demo sent SIGTERM.
        assert re.search(r"\[demo\] web stopped \(exit code (0|-15)\)\.", output), output
        assert "[demo] scheduler stopped (exit code 0)." in output
        if worker:
            assert "handed_off=1" in output
            assert "[demo] worker stopped (exit code 0)." in output
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        reader.join(timeout=10)
        stdout.close()
