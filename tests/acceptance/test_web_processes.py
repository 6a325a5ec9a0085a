"""Web processes load the app and run nothing: only `runscheduler` fires tasks.

A scheduler started when the app loads runs in every web worker: under several workers each
job ran once per worker (jcass77/django-apscheduler#156). Here three web processes load the
project, as a WSGI server does, and serve the admin, the metrics and the health check while a
task is due; nothing fires until a scheduler runs.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.contrib.auth import get_user_model

from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task, Trigger
from tests.harness.processes import ROOT, Schedulers, nothing_ignored, record_task
from tests.testapp.models import Hit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

WEB_PROCESSES = 3

WEB_PROCESS = """
import threading

import django
from django.db import connections

django.setup()
# "No queries at import or app loading": not even a connection.
assert all(c.connection is None for c in connections.all()), "connected at app loading"

from django.contrib.auth import get_user_model
from django.core.wsgi import get_wsgi_application
from django.test import Client

get_wsgi_application()  # what a WSGI server loads
client = Client()
client.force_login(get_user_model().objects.get(username="admin"))
for path in (
    "/admin/",
    "/admin/django_posixcron/task/",
    "/admin/django_posixcron/run/",
    "/metrics",
):
    status = client.get(path).status_code
    assert status == 200, (path, status)
others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
assert others == [], others
# No live scheduler: the health check says so, and starts none (django-health-check runs
# its checks on a thread pool of its own).
assert client.get("/health/").status_code == 500
ours = [t.name for t in threading.enumerate() if t.name.startswith("posixcron")]
assert ours == [], ours
print("served")
"""


def test_web_processes_that_load_the_app_fire_nothing(schedulers: Schedulers) -> None:
    schedulers.configure({"report": record_task("report")})
    # Reconciled by a scheduler that finds nothing due and exits; then a run is asked for, so
    # the task is due while the web processes serve. (A cron schedule is not used: a minute
    # boundary passing would make the last step fire the cron occurrence first.)
    first = schedulers.run("--once")
    assert first.returncode == 0, first.stdout + first.stderr
    assert not Run.objects.exists()
    Task.objects.get(name="report").request_run()
    get_user_model().objects.create_superuser("admin", "admin@example.com", "pw")

    web = [
        subprocess.Popen(
            [sys.executable, "-c", WEB_PROCESS],
            cwd=ROOT,
            env=schedulers.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(WEB_PROCESSES)
    ]
    for process in web:
        stdout, stderr = process.communicate(timeout=120)
        result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        nothing_ignored(result)
        assert (process.returncode, stdout.strip()) == (0, "served"), stderr

    assert not Run.objects.exists()
    assert Task.objects.get(name="report").run_requested_at is not None
    assert SchedulerProcess.objects.count() == 1  # the --once process, stopped

    second = schedulers.run("--once")
    assert second.returncode == 0, second.stdout + second.stderr
    assert list(Run.objects.values_list("trigger", "status")) == [
        (Trigger.MANUAL, RunStatus.SUCCEEDED)
    ]
    assert Hit.objects.filter(task_name="report").count() == 1
