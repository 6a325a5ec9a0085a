"""The metrics view, parsed with prometheus_client's own parser and checked against the rows."""

from __future__ import annotations

import datetime as dt
import sys
from collections import Counter
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.db.models import Max
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_posixcron.db import app_alias
from django_posixcron.models import Run, RunStatus, Task
from django_posixcron.scheduling.maintenance import Pruner
from django_posixcron.scheduling.outcomes import Outcome, write_outcomes
from tests.factories import SchedulerProcessFactory
from tests.harness.tasks import T0

pytestmark = pytest.mark.django_db(transaction=True)

HOUR = dt.timedelta(hours=1)


def scrape(client: Client | None = None) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Return {sample name: {labels: value}} as Prometheus would read the view."""
    response = (client or Client()).get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def per_task(samples: dict[str, Any], name: str) -> dict[str, float]:
    return {dict(labels)["task"]: value for labels, value in samples.get(name, {}).items()}


def run_counts() -> Counter[tuple[str, str, str]]:
    return Counter(Run.objects.values_list("task__name", "status", "trigger"))


@pytest.fixture
def history(tasks, make_scheduler):
    """Two hours of a succeeding and a failing task, run by a real scheduler."""
    tasks("good", next_run_at=T0)
    tasks("bad", callable_path="tests.testapp.jobs.fail", next_run_at=T0)
    tasks("resting", next_run_at=T0 + HOUR, paused=True)
    scheduler = make_scheduler()
    for now in (T0, T0 + HOUR):
        scheduler.tick(now)
        assert scheduler.wait_idle(timeout=10)
    return scheduler


def test_the_last_success_outlives_the_runs_it_came_from(history):
    good = Task.objects.get(name="good")
    finished = Run.objects.filter(task=good, status=RunStatus.SUCCEEDED).aggregate(
        m=Max("finished_at")
    )["m"]
    assert good.last_success_at == finished
    assert Task.objects.get(name="bad").last_success_at is None

    # Pruned, deleted in the admin or with the ORM: the alert on it must still fire.
    Run.objects.all().delete()
    assert per_task(scrape(), "posixcron_last_success_timestamp_seconds") == {
        "good": pytest.approx(finished.timestamp())
    }


def test_the_latest_runs_figures_outlive_the_runs_they_came_from(history):
    """A monthly task with HISTORY_DAYS 30 has no run in the history for a day or so each
    month: its duration and fire lag are still the latest finished run's."""
    figures = {}
    for name in ("good", "bad"):
        latest = Run.objects.filter(task__name=name).latest("scheduled_for")
        assert latest.duration is not None
        assert latest.started_at is not None
        figures[name] = (
            latest.duration.total_seconds(),
            (latest.started_at - latest.scheduled_for).total_seconds(),
        )
    before = scrape()

    Pruner(app_alias(), 30, timezone.now).prune(T0 + dt.timedelta(days=365))
    assert not Run.objects.exists()
    after = scrape()

    for samples in (before, after):
        assert per_task(samples, "posixcron_last_run_duration_seconds") == pytest.approx(
            {name: duration for name, (duration, _) in figures.items()}
        )
        assert per_task(samples, "posixcron_fire_lag_seconds") == pytest.approx(
            {name: lag for name, (_, lag) in figures.items()}
        )
    # A task that never finished a run has neither, with or without history.
    assert "resting" not in per_task(after, "posixcron_last_run_duration_seconds")


def test_the_latest_runs_are_read_through_the_task_and_time_index(history):
    # On MariaDB the optimizer may take the unique (task, trigger, scheduled_for) index and
    # sort each task's whole history (80-90 s a scrape with 1.5 million runs, measured): the
    # subqueries name the index there. Elsewhere the planner is left to choose.
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        samples = scrape()
    assert per_task(samples, "posixcron_last_run_duration_seconds").keys() == {"good", "bad"}
    hinted = [q["sql"] for q in queries if "FORCE INDEX" in q["sql"]]
    if connection.vendor == "mysql":
        assert len(hinted) == 1
        assert hinted[0].count("FORCE INDEX (`posixcron_run_task_sched`)") == 2
    else:
        assert hinted == []


def test_a_lost_run_leaves_the_figures_of_the_run_before_it(history):
    good = Task.objects.get(name="good")
    kept = (good.last_duration, good.last_fire_lag)
    assert None not in kept
    # The scheduler ends a run lost (its process went silent): no duration, nothing moves.
    run = Run.objects.filter(task=good).latest("scheduled_for")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, finished_at=None, duration=None)
    run.refresh_from_db()
    write_outcomes([Outcome(run, RunStatus.LOST, timezone.now(), "Lost: test", "")], app_alias())
    good.refresh_from_db()
    assert (good.last_duration, good.last_fire_lag) == kept


def test_every_series_matches_the_database(history):
    SchedulerProcessFactory.create(last_heartbeat_at=timezone.now() - dt.timedelta(hours=2))  # dead
    overdue = Task.objects.create(
        name="late",
        schedule="0 * * * *",
        callable_path="tests.testapp.jobs.noop",
        timezone="UTC",
        retry_delay=dt.timedelta(minutes=5),
        definition_hash="x",
        due_at=timezone.now() - HOUR,
        next_run_at=timezone.now() - HOUR,
        updated_at=timezone.now() - HOUR,
    )

    samples = scrape()

    counted = {
        (labels["task"], labels["status"], labels["trigger"]): value
        for labels, value in (
            (dict(key), value) for key, value in samples["posixcron_runs_total"].items()
        )
    }
    assert counted == {key: float(n) for key, n in run_counts().items()}
    assert counted == {("good", "succeeded", "cron"): 2.0, ("bad", "failed", "cron"): 2.0}

    for name in ("good", "bad"):
        latest = Run.objects.filter(task__name=name).latest("finished_at")
        assert latest.duration is not None
        assert latest.started_at is not None
        assert per_task(samples, "posixcron_last_run_duration_seconds")[name] == pytest.approx(
            latest.duration.total_seconds()
        )
        assert per_task(samples, "posixcron_fire_lag_seconds")[name] == pytest.approx(
            (latest.started_at - latest.scheduled_for).total_seconds()
        )
    success = Run.objects.filter(task__name="good", status=RunStatus.SUCCEEDED)
    last_success = success.aggregate(m=Max("finished_at"))["m"]
    assert per_task(samples, "posixcron_last_success_timestamp_seconds") == {
        "good": pytest.approx(last_success.timestamp())
    }
    due = {t.name: t.due_at.timestamp() for t in Task.objects.filter(paused=False) if t.due_at}
    assert per_task(samples, "posixcron_next_run_timestamp_seconds") == pytest.approx(due)
    assert "resting" not in per_task(samples, "posixcron_next_run_timestamp_seconds")
    assert per_task(samples, "posixcron_task_paused") == {
        "good": 0.0,
        "bad": 0.0,
        "resting": 1.0,
        "late": 0.0,
    }
    assert per_task(samples, "posixcron_task_overdue") == {
        "good": 0.0,
        "bad": 0.0,
        "resting": 0.0,
        overdue.name: 1.0,
    }
    assert set(per_task(samples, "posixcron_runs_queued").values()) == {0.0}
    # The test's own scheduler beats; the dead process does not count.
    assert samples["posixcron_schedulers_alive"] == {(): 1.0}


def test_the_counter_never_goes_down_whatever_deletes_runs(history):
    before = scrape()["posixcron_runs_total"]
    assert sum(before.values()) == 4

    # Pruning everything the scheduler would prune a year from now.
    Pruner(app_alias(), 30, timezone.now).prune(T0 + dt.timedelta(days=365))
    assert not Run.objects.exists()
    assert scrape()["posixcron_runs_total"] == before

    # New runs count on from there.
    history.tick(T0 + 2 * HOUR)
    assert history.wait_idle(timeout=10)
    after_run = scrape()["posixcron_runs_total"]
    assert sum(after_run.values()) == 6

    # The admin's delete view, and the ORM.
    admin = User.objects.create_superuser("root", "root@example.com", "x")
    client = Client()
    client.force_login(admin)
    run = Run.objects.filter(task__name="good").get()
    url = f"/admin/django_posixcron/run/{run.pk}/delete/"
    assert client.post(url, {"post": "yes"}).status_code == 302
    Run.objects.all().delete()
    Task.objects.filter(name="bad").delete()
    assert scrape()["posixcron_runs_total"] == after_run


def test_a_skipped_run_is_counted_when_it_is_recorded(tasks, make_scheduler, gate):
    name, event = gate
    tasks(
        "slow",
        callable_path="tests.testapp.jobs.blocked",
        kwargs={"gate_name": name},
        next_run_at=T0,
    )
    scheduler = make_scheduler()
    scheduler.tick(T0)
    scheduler.tick(T0 + HOUR)  # still running: this occurrence is skipped
    counted = scrape()["posixcron_runs_total"]
    assert counted == {(("status", "skipped"), ("task", "slow"), ("trigger", "cron")): 1.0}
    event.set()
    assert scheduler.wait_idle(timeout=10)
    assert (
        scrape()["posixcron_runs_total"][
            (("status", "succeeded"), ("task", "slow"), ("trigger", "cron"))
        ]
        == 1.0
    )


def test_the_view_answers_only_get_and_head(db):
    # With CSRF checked, as a real client's POST is: a 405, not CSRF's 403.
    assert Client(enforce_csrf_checks=True).post("/metrics").status_code == 405
    head = Client().head("/metrics")
    assert head.status_code == 200
    assert head["Cache-Control"] == "no-store"


def test_openmetrics_is_served_to_a_scraper_that_asks_for_it(history):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse

    response = Client().get(
        "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert response["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert response["Cache-Control"] == "no-store"
    text = response.content.decode()
    families = {family.name: family for family in parse(text)}  # type: ignore[no-untyped-call]
    assert families["posixcron_runs"].type == "counter"
    good = [s for s in families["posixcron_runs"].samples if s.labels.get("task") == "good"]
    assert (
        sum(s.value for s in good if s.name == "posixcron_runs_total")
        == Run.objects.filter(task__name="good").count()
    )
    # Series in seconds say so.
    assert "# UNIT posixcron_fire_lag_seconds seconds" in text
    assert families["posixcron_last_run_duration_seconds"].unit == "seconds"
    assert families["posixcron_task_paused"].unit == ""


def test_a_scrape_the_database_cannot_answer_is_a_503_that_says_why(db, monkeypatch):
    # Django's error page and a traceback at every scrape while the database was away.
    from django.db import OperationalError

    from django_posixcron import metrics

    def refuse(using: str) -> dt.datetime:
        raise OperationalError("connection refused\n\tIs the server running?")

    monkeypatch.setattr(metrics, "database_now", refuse)
    response = Client(raise_request_exception=True).get("/metrics")
    assert response.status_code == 503
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Cache-Control"] == "no-store"
    assert response.content.decode() == (
        "database unavailable: connection refused; Is the server running?"
    )


def test_without_prometheus_client_the_error_names_the_extra(db, monkeypatch):
    # A None entry in sys.modules makes the import fail, as in a project without the extra.
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ImproperlyConfigured, match=r"pip install 'django-posixcron\[prometheus\]'"):
        Client(raise_request_exception=True).get("/metrics")


def test_a_scrape_costs_the_same_queries_for_3_tasks_as_for_30(db):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.factories import RunFactory, TaskFactory

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            scrape()
        return len(captured)

    for _ in range(3):
        RunFactory.create(task=TaskFactory.create())
    few = queries()
    for _ in range(27):
        RunFactory.create(task=TaskFactory.create())
    assert queries() == few <= 5


def test_runs_queued_counts_the_runs_waiting_for_a_worker(world):
    world.settings(
        {
            "export": {
                "schedule": "* * * * *",
                "callable": "tests.testapp.jobs.noop",
                "enqueue": True,
                "overlap": "allow",
            },
            "local": {"schedule": "* * * * *", "callable": "tests.testapp.jobs.noop"},
        }
    )
    world.start(T0)
    for minute in range(3):
        world.tick(T0 + dt.timedelta(minutes=minute))

    samples = scrape()

    assert per_task(samples, "posixcron_runs_queued") == {"export": 3.0, "local": 0.0}
    # A queued run has not started: the fire lag is the local task's only.
    assert set(per_task(samples, "posixcron_fire_lag_seconds")) == {"local"}
