"""A PgBouncer in front of the test database, started for one test."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.waiting import wait_until


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _executable() -> str:
    found = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
    )
    if found is None:
        reason = "PgBouncer is not installed (Debian: apt-get install pgbouncer)"
        # CI installs it and sets POSIXCRON_REQUIRE_PGBOUNCER=1: missing there is a failure.
        if os.environ.get("POSIXCRON_REQUIRE_PGBOUNCER") == "1":
            pytest.fail(f"{reason} (POSIXCRON_REQUIRE_PGBOUNCER=1)", pytrace=False)
        pytest.skip(reason)
    return found


@contextlib.contextmanager
def pgbouncer_to_test_database(pool_mode: str, pool_size: int) -> Iterator[int]:
    """Run PgBouncer in `pool_mode` with `pool_size` server connections to the test
    database's PostgreSQL server; yield the port it listens on (127.0.0.1)."""
    from django.db import connection

    executable = _executable()
    settings = connection.settings_dict
    user = settings["USER"] or pwd.getpwuid(os.getuid()).pw_name
    port = _free_port()
    # PgBouncer refuses to run as root: it is told to become the postgres user, which must
    # read its files.
    as_root = os.getuid() == 0
    directory = Path(tempfile.mkdtemp(prefix="posixcron-pgbouncer-"))
    (directory / "users.txt").write_text(f'"{user}" ""\n')
    (directory / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={settings['HOST'] or '127.0.0.1'} port={settings['PORT'] or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {directory / 'users.txt'}\n"
        f"pool_mode = {pool_mode}\ndefault_pool_size = {pool_size}\n"
        "ignore_startup_parameters = extra_float_digits\n"
        f"logfile = {directory / 'pgbouncer.log'}\n"
    )
    command = [executable, str(directory / "pgbouncer.ini")]
    if as_root:
        owner = pwd.getpwnam("postgres")
        for path in (directory, *directory.iterdir()):
            os.chown(path, owner.pw_uid, owner.pw_gid)
        command[1:1] = ["-u", "postgres"]
    log = directory / "pgbouncer.log"
    with open(directory / "output.txt", "wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)

    def listening() -> bool:
        if process.poll() is not None:
            said = (directory / "output.txt").read_text()
            pytest.fail(f"PgBouncer exited:\n{said}\n{log.read_text() if log.exists() else ''}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return True
        return False

    try:
        wait_until(listening, timeout=15, what=f"PgBouncer to listen on port {port}")
        yield port
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(directory, ignore_errors=True)
