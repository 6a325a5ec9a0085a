"""The engine is pure: importing it pulls in no Django."""

import subprocess
import sys


def test_engine_imports_without_django():
    code = (
        "import sys; import django_posixcron.cron as cron; "
        "cron.CronExpression('15 3 * * 1-5').describe(); "
        "assert not [m for m in sys.modules if m == 'django' or m.startswith('django.')], "
        "sorted(m for m in sys.modules if m.startswith('django'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
