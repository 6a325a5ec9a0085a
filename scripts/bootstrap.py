"""Create the development virtual environment and install everything into it.

Standard library only: it runs on a fresh machine that has nothing but Python.
The MariaDB driver (mysqlclient) compiles from source against libmariadb-dev; when that
library is missing it is left out with one clear line, and `make test` skips MariaDB.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    target = Path(sys.argv[1] if len(sys.argv) > 1 else ".venv")
    if not (target / "bin" / "python").exists():
        print(f"bootstrap: creating virtual environment {target}")
        venv.EnvBuilder(with_pip=True).create(target)
    pip = [
        str(target / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
    ]
    subprocess.run([*pip, "-U", "pip"], check=True)
    subprocess.run(
        [
            *pip,
            "-r",
            "requirements-dev.txt",
            "-r",
            "requirements-lint.txt",
            "-r",
            "requirements-docs.txt",
        ],
        check=True,
        cwd=ROOT,
    )
    subprocess.run([*pip, "-e", ".[postgres]"], check=True, cwd=ROOT)
    if mariadb_headers_present():
        subprocess.run([*pip, "-e", ".[postgres,mysql]"], check=True, cwd=ROOT)
    else:
        print(
            "bootstrap: not installing mysqlclient (the MariaDB driver): libmariadb-dev and "
            "pkg-config are missing (Debian/Ubuntu: apt-get install libmariadb-dev pkg-config)"
        )
    return 0


def mariadb_headers_present() -> bool:
    if shutil.which("pkg-config") is None:
        return False
    probe = subprocess.run(
        ["pkg-config", "--exists", "libmariadb"], check=False, capture_output=True
    )
    return probe.returncode == 0


if __name__ == "__main__":
    sys.exit(main())
