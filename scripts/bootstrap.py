"""Create the virtual environment and install into it what one of the README's commands needs.

    python scripts/bootstrap.py [VENV]                         # make test: the whole toolchain
    python scripts/bootstrap.py --demo {sqlite,postgres,mysql} [VENV]   # make demo: its minimum

Standard library only: it runs on a fresh machine that has nothing but Python.

`make test` gets everything: the test, lint and docs requirements, and the package with its
PostgreSQL and MariaDB drivers. The MariaDB driver (mysqlclient) compiles from source against
libmariadb-dev; when that library is missing it is left out with one clear line, and
`make test` skips MariaDB.

`make demo` gets only what the example project imports: the package (which brings Django),
django-environ, and the driver of the database DATABASE_URL names, none for SQLite: about
80 MB of the toolchain's 500, so a newcomer's first `make demo` does not wait for pytest,
Playwright, tox, mypy and Sphinx.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The package's extra for each database the demo can run on (pyproject.toml).
DEMO_EXTRAS = {"sqlite": "", "postgres": "[postgres]", "mysql": "[mysql]"}

MARIADB_MISSING = (
    "libmariadb-dev and pkg-config are missing (Debian/Ubuntu: apt-get install "
    "libmariadb-dev pkg-config)"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--demo",
        choices=sorted(DEMO_EXTRAS),
        help="install only what the example project needs on this database",
    )
    parser.add_argument("venv", nargs="?", default=".venv", type=Path)
    args = parser.parse_args()

    started = time.monotonic()
    if not (args.venv / "bin" / "python").exists():
        print(f"bootstrap: creating virtual environment {args.venv}", flush=True)
        venv.EnvBuilder(with_pip=True).create(args.venv)
    pip = [
        # Absolute: pip runs from the checkout's root, wherever this script was started.
        str(args.venv.resolve() / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
    ]
    if args.demo is None:
        install_toolchain(pip)
        what = "the development toolchain"
    else:
        if args.demo == "mysql" and not mariadb_headers_present():
            print(
                "bootstrap: the demo on MariaDB/MySQL needs mysqlclient, which compiles "
                f"against the MariaDB client library: {MARIADB_MISSING}",
                file=sys.stderr,
            )
            return 1
        print(f"bootstrap: installing only what the demo needs on {args.demo}", flush=True)
        # pip as venv ships it: upgrading it first would cost more than it saves here.
        extra = DEMO_EXTRAS[args.demo]
        run([*pip, "-r", "requirements-demo.txt", "-e", f".{extra}"])
        what = "Django, django-environ, django-tasks-db and django-posixcron" + (
            f" with its {args.demo} driver" if extra else ""
        )
    print(
        f"bootstrap: installed {what} into {args.venv} in {time.monotonic() - started:.0f} s",
        flush=True,
    )
    return 0


def install_toolchain(pip: list[str]) -> None:
    run([*pip, "-U", "pip"])
    run(
        [
            *pip,
            "-r",
            "requirements-dev.txt",
            "-r",
            "requirements-lint.txt",
            "-r",
            "requirements-docs.txt",
        ]
    )
    run([*pip, "-e", ".[postgres]"])
    if mariadb_headers_present():
        run([*pip, "-e", ".[postgres,mysql]"])
    else:
        print(f"bootstrap: not installing mysqlclient (the MariaDB driver): {MARIADB_MISSING}")


def run(command: list[str]) -> None:
    subprocess.run(command, check=True, cwd=ROOT)


def mariadb_headers_present() -> bool:
    if shutil.which("pkg-config") is None:
        return False
    probe = subprocess.run(
        ["pkg-config", "--exists", "libmariadb"], check=False, capture_output=True
    )
    return probe.returncode == 0


if __name__ == "__main__":
    sys.exit(main())
