"""The admin at the scale of a real history, and the states between two runs.

A run list over a million runs must not count or DISTINCT the whole table on each page view;
a task whose run has started but not finished must read "running", not the previous outcome.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone, translation

from django_posixcron.admin.display import elapsed, relative
from django_posixcron.admin.runs import CappedPaginator
from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task, Trigger
from tests.admin.conftest import client_for, make_run, make_task

pytestmark = pytest.mark.django_db

TASKS = reverse("admin:django_posixcron_task_changelist")
RUNS = reverse("admin:django_posixcron_run_changelist")
PROCESSES = reverse("admin:django_posixcron_schedulerprocess_changelist")


def cell(html: str, name: str) -> str:
    """Return the task list row of task `name`."""
    rows = [row.split("</tr>")[0] for row in html.split("<tr") if f">{name}</a>" in row]
    assert len(rows) == 1, f"no single row for {name}"
    return rows[0]


def bulk_runs(task: Task, count: int, start: dt.datetime, step: dt.timedelta) -> None:
    Run.objects.bulk_create(
        Run(
            task=task,
            trigger=Trigger.CRON,
            status=RunStatus.SUCCEEDED,
            scheduled_for=start + i * step,
            started_at=start + i * step,
            finished_at=start + i * step,
            duration=dt.timedelta(0),
        )
        for i in range(count)
    )


# -- the task list between claim and outcome ---------------------------------------------


def test_a_task_whose_run_has_started_reads_running_not_the_previous_outcome(superuser):
    task = make_task(name="long-report")
    make_run(task, status=RunStatus.SUCCEEDED, started_at=timezone.now() - dt.timedelta(days=1))
    # What the scheduler's claim writes: only last_run_started_at moves.
    started = timezone.now() - dt.timedelta(minutes=3)
    type(task).objects.filter(pk=task.pk).update(last_run_started_at=started)

    row = cell(client_for(superuser).get(TASKS).content.decode(), "long-report")
    assert 'posixcron-running">running<' in row
    # The last run's status; the strip of recent runs below it still shows yesterday's run.
    last_run = row.split("field-last_run_display")[1].split("posixcron-strip")[0]
    assert "succeeded" not in last_run
    assert "for 3\xa0minutes" in row
    assert not re.search(r"-\d", row.split("posixcron-running")[1][:60]), row

    response = client_for(superuser).get(f"{TASKS}?last_run_status__exact=running")
    assert [t.name for t in response.context["cl"].result_list] == ["long-report"]
    # Found where its row shows it, not under the previous run's status.
    make_run(make_task(name="done-report"), status=RunStatus.SUCCEEDED)
    response = client_for(superuser).get(f"{TASKS}?last_run_status__exact=succeeded")
    assert [t.name for t in response.context["cl"].result_list] == ["done-report"]


def test_the_last_status_filter_has_never_run(superuser):
    make_task(name="fresh")
    make_run(make_task(name="old"))
    response = client_for(superuser).get(f"{TASKS}?last_run_status__exact=never")
    assert [t.name for t in response.context["cl"].result_list] == ["fresh"]


def test_the_last_status_filter_offers_only_what_a_last_run_can_be(superuser):
    # A skipped occurrence never becomes the task's last run: the choice found nothing.
    html = client_for(superuser).get(TASKS).content.decode()
    assert "last_run_status__exact=failed" in html
    assert "last_run_status__exact=skipped" not in html


def test_a_paused_task_shows_paused_instead_of_a_next_run_time(superuser):
    make_task(name="held", paused=True, next_run_at=timezone.now() + dt.timedelta(hours=1))
    make_task(name="going", next_run_at=timezone.now() + dt.timedelta(hours=1))
    html = client_for(superuser).get(TASKS).content.decode()
    assert "in 1\xa0hour" not in cell(html, "held")
    assert 'posixcron-paused">paused<' in cell(html, "held")
    assert "in 59\xa0minutes" in cell(html, "going") or "in 1\xa0hour" in cell(html, "going")


def test_the_zone_has_its_own_sortable_column(superuser):
    make_task(name="berlin", timezone="Europe/Berlin")
    make_task(name="tokyo", timezone="Asia/Tokyo")
    response = client_for(superuser).get(TASKS)
    assert "column-zone_display" in response.content.decode()
    index = list(response.context["cl"].list_display).index("zone_display")
    response = client_for(superuser).get(f"{TASKS}?o={index}")
    assert [t.name for t in response.context["cl"].result_list] == ["tokyo", "berlin"]
    response = client_for(superuser).get(f"{TASKS}?o=-{index}")
    assert [t.name for t in response.context["cl"].result_list] == ["berlin", "tokyo"]


# -- the run list over a large history ---------------------------------------------------


def test_the_run_list_never_counts_or_scans_the_whole_history(superuser):
    task = make_task(name="busy")
    bulk_runs(task, 300, dt.datetime(2025, 11, 1, tzinfo=dt.UTC), dt.timedelta(hours=7))
    with CaptureQueriesContext(connection) as queries:
        response = client_for(superuser).get(RUNS)
    assert response.status_code == 200
    sql = [q["sql"].upper() for q in queries.captured_queries if "posixcron_run" in q["sql"]]
    assert not [q for q in sql if "DISTINCT" in q], sql
    # Every count over runs stops early: COUNT(*) of a LIMITed subquery.
    counts = [q for q in sql if "COUNT(" in q]
    assert counts
    assert all("LIMIT" in q for q in counts), counts
    assert "Show counts" not in response.content.decode()


def test_the_date_hierarchy_offers_the_periods_that_hold_runs(superuser):
    task = make_task(name="busy")
    bulk_runs(task, 3, dt.datetime(2024, 12, 30, 12, tzinfo=dt.UTC), dt.timedelta(days=1))
    bulk_runs(task, 2, dt.datetime(2025, 3, 10, 12, tzinfo=dt.UTC), dt.timedelta(days=2))
    client = client_for(superuser)

    years = client.get(RUNS).content.decode()
    assert "scheduled_for__year=2024" in years
    assert "scheduled_for__year=2025" in years

    months = client.get(f"{RUNS}?scheduled_for__year=2025").content.decode()
    assert "scheduled_for__month=1" in months
    assert "scheduled_for__month=3" in months
    assert "scheduled_for__month=2&" not in months

    days = client.get(f"{RUNS}?scheduled_for__year=2025&scheduled_for__month=3")
    html = days.content.decode()
    assert "scheduled_for__day=10" in html
    assert "scheduled_for__day=12" in html
    assert "scheduled_for__day=11" not in html
    assert len(days.context["cl"].result_list) == 2


def test_a_history_larger_than_the_count_cap_says_more_than(superuser, monkeypatch):
    monkeypatch.setattr(CappedPaginator, "cap", 150)
    task = make_task(name="busy")
    bulk_runs(task, 160, dt.datetime(2025, 1, 1, tzinfo=dt.UTC), dt.timedelta(minutes=1))
    response = client_for(superuser).get(RUNS)
    assert response.context["cl"].paginator.capped is True
    assert "more than 150 runs" in response.content.decode()
    # Under the cap the count is exact.
    response = client_for(superuser).get(f"{RUNS}?q=nothing-matches")
    assert "0 runs" in response.content.decode()


def test_bulk_deleting_runs_summarises_and_logs_no_entry_per_run(superuser):
    task = make_task(name="busy")
    bulk_runs(task, 250, dt.datetime(2025, 1, 1, tzinfo=dt.UTC), dt.timedelta(minutes=1))
    keep = make_run(task, scheduled_for=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    client = client_for(superuser)
    selection: dict[str, str | list[str]] = {
        "action": "delete_selected",
        "select_across": "1",
        "index": "0",
        "_selected_action": [str(pk) for pk in Run.objects.values_list("pk", flat=True)],
    }
    query = f"{RUNS}?scheduled_for__year=2025"

    confirm = client.post(query, selection)
    assert confirm.status_code == 200
    html = confirm.content.decode()
    assert "250 runs of history" in html
    assert html.count("<li>") < 20

    done = client.post(query, {**selection, "post": "yes"})
    assert done.status_code == 302
    assert list(Run.objects.values_list("pk", flat=True)) == [keep.pk]
    assert LogEntry.objects.count() == 0


# -- scheduler process rows ---------------------------------------------------------------


def test_a_live_process_cannot_be_deleted_a_dead_one_can(superuser):
    now = timezone.now()
    live = SchedulerProcess.objects.create(
        hostname="alive", pid=1, started_at=now, last_heartbeat_at=now
    )
    dead = SchedulerProcess.objects.create(
        hostname="dead",
        pid=2,
        started_at=now - dt.timedelta(days=1),
        last_heartbeat_at=now - dt.timedelta(days=1),
    )
    client = client_for(superuser)
    live_url = reverse("admin:django_posixcron_schedulerprocess_delete", args=[live.pk])
    dead_url = reverse("admin:django_posixcron_schedulerprocess_delete", args=[dead.pk])
    assert client.post(live_url, {"post": "yes"}).status_code == 403
    assert client.post(dead_url, {"post": "yes"}).status_code == 302
    assert list(SchedulerProcess.objects.values_list("hostname", flat=True)) == ["alive"]

    # The bulk action refuses it too.
    response = client.post(
        PROCESSES,
        {"action": "delete_selected", "_selected_action": [str(live.pk)], "post": "yes"},
    )
    assert response.status_code == 403
    assert SchedulerProcess.objects.filter(pk=live.pk).exists()


def test_a_dead_process_that_still_owns_a_running_run_is_kept(superuser):
    old = timezone.now() - dt.timedelta(days=1)
    dead = SchedulerProcess.objects.create(
        hostname="dead", pid=2, started_at=old, last_heartbeat_at=old
    )
    make_run(make_task(), status=RunStatus.RUNNING, process=dead)
    url = reverse("admin:django_posixcron_schedulerprocess_delete", args=[dead.pk])
    assert client_for(superuser).post(url, {"post": "yes"}).status_code == 403


def test_times_off_the_minute_show_their_seconds(superuser):
    task = make_task(name="flaky", timezone="UTC")
    failed_at = dt.datetime(2026, 11, 22, 15, 15, tzinfo=dt.UTC)
    make_run(task, status=RunStatus.FAILED, scheduled_for=failed_at, started_at=failed_at)
    make_run(
        task,
        trigger=Trigger.RETRY,
        scheduled_for=failed_at + dt.timedelta(seconds=20),
        started_at=failed_at + dt.timedelta(seconds=20, microseconds=30757),
    )
    html = client_for(superuser).get(RUNS).content.decode()
    assert "2026-11-22 15:15 UTC" in html  # the cron occurrence, on the minute
    assert "2026-11-22 15:15:20 UTC" in html  # its retry, 20 s later


def test_relative_times_under_a_minute_count_seconds():
    now = timezone.now()
    assert relative(now + dt.timedelta(seconds=20), now) == "in 20 seconds"
    assert relative(now - dt.timedelta(seconds=1), now) == "1 second ago"
    assert relative(now, now) == "now"
    assert relative(now + dt.timedelta(minutes=3), now) == "in 3\xa0minutes"


@pytest.mark.parametrize("language", ["de", "fr", "pt-br"])
def test_relative_times_stay_in_one_language(language):
    # The app ships no catalogues: the phrase around Django's translated "3 Minuten" would stay
    # English ("3 Minuten ago"). Without a translation of the phrase, all of it is English.
    now = timezone.now()
    with translation.override(language):
        assert relative(now - dt.timedelta(minutes=3), now) == "3\xa0minutes ago"
        assert relative(now + dt.timedelta(hours=2), now) == "in 2\xa0hours"
        assert elapsed(now - dt.timedelta(minutes=5), now) == "for 5\xa0minutes"
        assert translation.get_language() == language  # and the page's language is left alone
