"""The example project: its settings pass the checks, it runs, and demo.py stops cleanly."""

from __future__ import annotations

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

import pytest

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


@pytest.mark.slow
def test_demo_serves_the_admin_runs_the_scheduler_and_stops_on_sigint(env):
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "example_project" / "demo.py"), "--port", str(port)],
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
            return banner in output and "scheduler started" in output

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
        assert "[web] " in output
        assert "[scheduler] " in output
        assert "[demo] web stopped (exit code 0)." in output
        assert "[demo] scheduler stopped (exit code 0)." in output
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        reader.join(timeout=10)
        stdout.close()
