"""Runs handed to real Django Tasks workers: runscheduler processes beside db_worker and RQ.

Settings in, processes started, rows out. django-tasks-db's DatabaseBackend stores its jobs in
the test database (the enqueue commits with the claim); django-tasks-rq's goes through the
Redis on localhost, a database of its own per test database (tests.settings).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from django.db.models import Count

from django_posixcron.models import Run, RunStatus, Task
from tests.harness.processes import Child, Schedulers, record_task, task
from tests.testapp.models import Hit

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def redis():
    """Return the Redis connection of the RQ queue, emptied before and after the test."""
    django_rq = pytest.importorskip("django_rq")
    connection = django_rq.get_connection("default")
    try:
        connection.ping()
    except Exception as exc:  # redis.ConnectionError and its kin
        if os.environ.get("CI"):  # .ci/run starts Redis: there it must answer
            raise AssertionError(f"Redis does not answer: {exc}") from exc
        pytest.skip(f"no Redis answers for the RQ tests: {exc}")
    connection.flushdb()
    yield connection
    connection.flushdb()


def statuses(name: str) -> list[str]:
    return list(Run.objects.filter(task__name=name).order_by("pk").values_list("status", flat=True))


def request_and_wait(schedulers: Schedulers, name: str, count: int) -> None:
    """Ask for a run of `name`, wait for its outcome; `count` times, one after the other."""
    succeeded = Run.objects.filter(task__name=name, status=RunStatus.SUCCEEDED)
    for i in range(1, count + 1):
        Task.objects.get(name=name).request_run()
        schedulers.wait_for(
            functools.partial(lambda n: succeeded.count() >= n, i),
            what=f"run {i} of {name} to succeed on a worker",
        )


def long_run_on_a_worker(
    schedulers: Schedulers, release: Path, enqueue: object = True, *worker_args: str
) -> Child:
    """Start a scheduler and a worker; have the worker take a run of "long", which waits for
    `release` to exist (retry_delay 1 s); return the worker."""
    schedulers.configure(
        {
            "long": task(
                "tests.testapp.jobs.wait_for_file",
                kwargs={"path": str(release), "task_name": "long"},
                retry_delay=1,
                enqueue=enqueue,
            )
        }
    )
    schedulers.start_live(1)
    worker = schedulers.start_worker(*worker_args)
    Task.objects.get(name="long").request_run()
    # The only worker: its run (an RQ work horse runs it under a pid of its own).
    schedulers.wait_for(
        lambda: Run.objects.filter(status=RunStatus.RUNNING).exists(),
        what="the worker to take the run",
    )
    return worker


@pytest.mark.parametrize("workers", [1, 2])
def test_db_workers_run_each_requested_run_once_beside_two_schedulers(schedulers, workers):
    schedulers.configure(
        {name: record_task(name, enqueue=True) for name in ("alpha", "beta")},
    )
    schedulers.start_live(2)
    for _ in range(workers):
        schedulers.start_worker()

    for name in ("alpha", "beta"):
        request_and_wait(schedulers, name, 3)

    for name in ("alpha", "beta"):
        assert statuses(name) == ["succeeded"] * 3
        assert Hit.objects.filter(task_name=name).count() == 3
    runs = Run.objects.all()
    assert all(r.backend == "default" and r.result_id and r.worker for r in runs)


@pytest.mark.long
def test_a_killed_worker_leaves_its_run_lost_then_the_retry_runs_on_another(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    doomed = long_run_on_a_worker(schedulers, release)

    schedulers.expect_exit(doomed)
    doomed.kill()
    release.touch()  # the retry, on the next worker, finishes at once
    schedulers.start_worker()

    # Lost once the worker's heartbeat is stale (30 s), retried after retry_delay.
    schedulers.wait_for(
        lambda: statuses("long") == ["lost", "succeeded"],
        timeout=90,
        what="the run to be lost and its retry to succeed",
    )
    lost, retry = Run.objects.filter(task__name="long").order_by("pk")
    assert f":{doomed.pid}" in lost.error
    assert (retry.trigger, retry.attempt) == ("retry", 2)


def test_a_db_worker_stopped_by_a_second_sigterm_leaves_its_run_lost_and_retried(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    """db_worker finishes its job on a first SIGTERM and abandons it on a second (its handler
    raises SystemExit in the job): "a run cut off by it ends lost and is retried"."""
    release = tmp_path / "release"
    stopped = long_run_on_a_worker(schedulers, release)

    schedulers.expect_exit(stopped)
    stopped.signal(signal.SIGTERM)
    schedulers.wait_for(
        lambda: "shutting down gracefully" in stopped.output(), what="the first signal's log"
    )
    # db_worker catches the job's exception and ends its loop (status 0). The SystemExit its
    # handler raises is swallowed when it lands inside a __del__ (Django 6.1's ModelState
    # has one): the job then goes on, as it would for any signal lost that way, and the
    # orchestrator's next signal is what stops it.
    for _ in range(5):
        stopped.signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            stopped.popen.wait(timeout=5)
            break
    stopped.wait()

    # Recorded lost by the worker itself, at once (not after the 30 s stale limit). Its retry
    # (retry_delay 1 s) may be queued already, for the next worker.
    lost = Run.objects.filter(task__name="long").order_by("pk").first()
    assert lost is not None
    assert lost.status == RunStatus.LOST, schedulers.outputs()
    # Running, or starting: the second signal can land as the worker takes the run.
    assert re.search(
        r"was stopped while this run was (running|starting) \(SystemExit: 1\)", lost.error
    )
    release.touch()
    schedulers.start_worker()
    schedulers.wait_for(
        lambda: statuses("long") == ["lost", "succeeded"], what="the retry to succeed"
    )


def test_a_job_that_calls_sys_exit_fails_and_the_db_worker_takes_the_next(
    schedulers: Schedulers,
) -> None:
    schedulers.configure(
        {
            "exits": task(
                "tests.testapp.jobs.raise_system_exit",
                kwargs={"task_name": "exits"},
                enqueue=True,
            ),
            "after": record_task("after", enqueue=True),
        }
    )
    schedulers.start_live(1)
    worker = schedulers.start_worker()
    Task.objects.get(name="exits").request_run()
    schedulers.wait_for(lambda: statuses("exits") == ["failed"], what="the run to fail")

    request_and_wait(schedulers, "after", 1)

    failed = Run.objects.get(task__name="exits")
    assert failed.error == "SystemExit: 2"
    assert worker.alive()


def test_sigterm_to_a_scheduler_leaves_queued_runs_to_the_workers(schedulers):
    schedulers.configure({"export": record_task("export", enqueue=True)})
    (scheduler,) = schedulers.start_live(1)
    Task.objects.get(name="export").request_run()
    schedulers.wait_for(lambda: statuses("export") == ["queued"], what="the run to be queued")
    schedulers.expect_exit(scheduler)
    scheduler.signal(signal.SIGTERM)
    assert scheduler.wait() == 0

    schedulers.start_worker()

    schedulers.wait_for(lambda: statuses("export") == ["succeeded"], what="the worker's run")
    assert Hit.objects.filter(task_name="export").count() == 1


def test_a_backend_kept_for_a_cron_queue_alone_takes_the_runs(schedulers):
    # The module's Task was defined on the backend's default queue, which a backend whose
    # QUEUES lack "default" refuses: the checks failed with "Queue 'default' is not valid",
    # a queue the project never asked for.
    schedulers.configure(
        {"export": record_task("export")},
        ENQUEUE={"queue_name": "cron"},
        extra={
            "TASKS_SETTING": {
                "default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["cron"]}
            }
        },
    )
    check = schedulers.manage("check")
    assert check.returncode == 0, check.stdout + check.stderr
    schedulers.start_live(1)
    schedulers.start_worker("default", "--queue-name", "cron")
    request_and_wait(schedulers, "export", 1)
    assert statuses("export") == ["succeeded"]


def test_an_rq_worker_runs_handed_off_runs_once(schedulers, redis):
    schedulers.configure(
        {"export": record_task("export", enqueue={"backend": "rq"})},
    )
    schedulers.start_live(2)
    schedulers.start_worker("rq")

    request_and_wait(schedulers, "export", 3)

    assert statuses("export") == ["succeeded"] * 3
    assert Hit.objects.filter(task_name="export").count() == 3
    assert all(r.backend == "rq" and r.result_id for r in Run.objects.all())


@pytest.mark.long
def test_an_rq_heroku_worker_shut_down_mid_run_leaves_it_lost_not_failed(
    schedulers: Schedulers, redis: object, tmp_path: Path
) -> None:
    """RQ's HerokuWorker cuts its work horse's job off with ShutDownImminentException, an
    Exception raised from the horse's shutdown signal handler: the worker's shutdown, so
    lost (run_lost, retried), not a failure of the task's own."""
    release = tmp_path / "release"
    worker = long_run_on_a_worker(
        schedulers, release, {"backend": "rq"}, "rq", "--worker-class", "rq.worker.HerokuWorker"
    )

    schedulers.expect_exit(worker)
    worker.signal(signal.SIGTERM)  # its horse gets SIGRTMIN, and the job ends 6 s later
    schedulers.wait_for(
        lambda: not Run.objects.filter(status=RunStatus.RUNNING).exists(),
        what="the worker to end the run",
    )

    (lost,) = Run.objects.filter(task__name="long")
    assert lost.status == RunStatus.LOST, lost.error
    assert "ShutDownImminentException" in lost.error
    assert Task.objects.get(name="long").retry_at is not None
    worker.wait()


@pytest.mark.long
def test_messages_the_broker_dropped_end_lost_after_start_deadline_and_are_retried(
    schedulers, redis
):
    schedulers.configure(
        {
            "export": record_task(
                "export", enqueue={"backend": "rq"}, start_deadline=10, retry_delay=1
            )
        },
    )
    schedulers.start_live(1)
    Task.objects.get(name="export").request_run()
    # The run is written queued in the claim transaction; RQ keeps its jobs in Redis, so the
    # job is enqueued right after commit and its id recorded on the run a moment later.
    schedulers.wait_for(
        lambda: (
            Run.objects.filter(task__name="export", status="queued").exclude(result_id="").exists()
        ),
        what="the run to be queued on RQ",
    )
    assert redis.dbsize() > 0
    redis.flushdb()  # the broker loses its messages

    schedulers.wait_for(
        lambda: statuses("export")[:1] == ["lost"], timeout=40, what="the run to be lost"
    )
    lost = Run.objects.filter(task__name="export").order_by("pk")[0]
    assert "start_deadline" in lost.error
    schedulers.start_worker("rq")
    schedulers.wait_for(
        lambda: "succeeded" in statuses("export"),
        timeout=40,
        what="the retry to run on a worker",
    )
    assert Hit.objects.filter(task_name="export").count() == 1
    assert Run.objects.filter(task__name="export", status="succeeded").values("trigger").get() == {
        "trigger": "retry"
    }
    per_occurrence = (
        Run.objects.filter(status="succeeded").values("occurrence").annotate(n=Count("pk"))
    )
    assert all(row["n"] == 1 for row in per_occurrence)
