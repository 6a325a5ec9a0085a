"""Deleting runs: by count and in batches on a large history; never a running run."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_posixcron.admin.actions import RUN_DELETE_BATCH
from django_posixcron.models import Run, RunStatus, Task, Trigger
from tests.admin.conftest import client_for, make_run, make_task

pytestmark = pytest.mark.django_db

RUNS = reverse("admin:django_posixcron_run_changelist")
HISTORY = 100_000
START = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def insert_history(task: Task, count: int) -> None:
    """Insert `count` finished runs a minute apart, without building them one by one."""
    step = dt.timedelta(minutes=1)
    Run.objects.bulk_create(
        (
            Run(
                task=task,
                trigger=Trigger.CRON,
                status=RunStatus.SUCCEEDED,
                scheduled_for=START + i * step,
                started_at=START + i * step,
                finished_at=START + i * step,
                duration=dt.timedelta(0),
            )
            for i in range(count)
        ),
        batch_size=5000,
    )


def statements(queries: CaptureQueriesContext, verb: str) -> list[str]:
    """Return the captured statements that start with `verb`, upper-cased."""
    captured = (q["sql"].strip().upper() for q in queries.captured_queries)
    return [sql for sql in captured if sql.startswith(verb)]


def run_selects(queries: CaptureQueriesContext) -> list[str]:
    """Return the SELECTs that read the run table."""
    return [sql for sql in statements(queries, "SELECT") if "POSIXCRON_RUN" in sql]


@pytest.mark.slow
def test_deleting_a_hundred_thousand_runs_confirms_by_count_and_deletes_in_batches(deleter):
    task = make_task(name="busy")
    insert_history(task, HISTORY)
    running = make_run(task, status=RunStatus.RUNNING, scheduled_for=START - dt.timedelta(days=1))
    page = [
        str(pk) for pk in Run.objects.order_by("-scheduled_for").values_list("pk", flat=True)[:100]
    ]
    selection = {
        "action": "delete_selected",
        "select_across": "1",
        "index": "0",
        "_selected_action": page,
    }
    client = client_for(deleter)

    with CaptureQueriesContext(connection) as asked:
        confirm = client.post(RUNS, selection)
    # Read now: the next request empties the connection's query log.
    confirm_selects = run_selects(asked)
    assert confirm.status_code == 200
    html = confirm.content.decode()
    assert f"{HISTORY} runs of history" in html
    assert "1 selected run is still queued or running and will be kept." in html
    # The selection travels back as it came (one page and select_across), not as 100,000 keys.
    assert html.count('name="_selected_action"') == len(page)
    assert 'name="select_across" value="1"' in html
    # Nothing read every row: only counts.
    assert confirm_selects
    assert all("COUNT(" in sql for sql in confirm_selects), confirm_selects

    # The confirmation page's form, posted back as a browser would.
    form = {
        "action": "delete_selected",
        "select_across": "1",
        "post": "yes",
        "_selected_action": page,
    }
    with CaptureQueriesContext(connection) as deleting:
        done = client.post(RUNS, form)
    selects, deletes = run_selects(deleting), statements(deleting, "DELETE")
    assert done.status_code == 302
    messages = [str(m) for m in client.get(done["Location"]).context["messages"]]
    assert f"Successfully deleted {HISTORY} runs." in messages
    kept = "Kept 1 queued or running run: it is still executing or about to; delete it once it"
    assert f"{kept} has finished." in messages
    assert list(Run.objects.values_list("pk", flat=True)) == [running.pk]
    # Keys are read a batch at a time, and deleted by key.
    unbounded = [sql for sql in selects if "COUNT(" not in sql and "LIMIT" not in sql]
    assert not unbounded, unbounded[:3]
    assert len(deletes) == HISTORY // RUN_DELETE_BATCH
    assert all(sql.count(",") < RUN_DELETE_BATCH for sql in deletes)


def test_bulk_delete_keeps_the_filter_of_the_list(deleter):
    task = make_task(name="busy")
    insert_history(task, 30)
    later = make_run(task, scheduled_for=dt.datetime(2026, 3, 1, tzinfo=dt.UTC))
    query = f"{RUNS}?scheduled_for__year=2025"
    form = {
        "action": "delete_selected",
        "select_across": "1",
        "post": "yes",
        "_selected_action": [str(Run.objects.filter(scheduled_for__year=2025)[0].pk)],
    }
    assert client_for(deleter).post(query, form).status_code == 302
    assert list(Run.objects.values_list("pk", flat=True)) == [later.pk]


def test_a_running_run_cannot_be_deleted_from_its_page(deleter):
    task = make_task()
    running = make_run(task, status=RunStatus.RUNNING)
    finished = make_run(task, scheduled_for=running.scheduled_for - dt.timedelta(hours=1))
    client = client_for(deleter)
    url = reverse("admin:django_posixcron_run_delete", args=[running.pk])
    assert client.get(url).status_code == 403
    assert client.post(url, {"post": "yes"}).status_code == 403
    assert Run.objects.filter(pk=running.pk).exists()
    page = client.get(reverse("admin:django_posixcron_run_change", args=[running.pk]))
    assert url not in page.content.decode()
    # A finished run of the same task still can.
    url = reverse("admin:django_posixcron_run_delete", args=[finished.pk])
    assert client.post(url, {"post": "yes"}).status_code == 302
    assert not Run.objects.filter(pk=finished.pk).exists()


def test_bulk_delete_of_a_page_skips_running_runs_and_says_so(deleter):
    task = make_task()
    running = make_run(task, status=RunStatus.RUNNING)
    old = [
        make_run(task, scheduled_for=running.scheduled_for - dt.timedelta(hours=h)) for h in (1, 2)
    ]
    selected = [str(r.pk) for r in (running, *old)]
    client = client_for(deleter)
    confirm = client.post(
        RUNS, {"action": "delete_selected", "index": "0", "_selected_action": selected}
    )
    html = confirm.content.decode()
    assert "2 runs of history" in html
    assert "1 selected run is still queued or running and will be kept." in html
    done = client.post(
        RUNS,
        {"action": "delete_selected", "post": "yes", "_selected_action": selected},
        follow=True,
    )
    html = done.content.decode()
    assert "Successfully deleted 2 runs." in html
    assert "Kept 1 queued or running run" in html
    assert list(Run.objects.values_list("pk", flat=True)) == [running.pk]


def test_a_selection_of_running_runs_only_offers_nothing_to_confirm(deleter):
    running = make_run(make_task(), status=RunStatus.RUNNING)
    confirm = client_for(deleter).post(
        RUNS, {"action": "delete_selected", "index": "0", "_selected_action": [str(running.pk)]}
    )
    html = confirm.content.decode()
    assert "None of the selected runs can be deleted." in html
    assert "posixcron-delete-confirm" not in html


def test_bulk_delete_needs_the_delete_permission(viewer):
    run = make_run(make_task())
    form = {"action": "delete_selected", "post": "yes", "_selected_action": [str(run.pk)]}
    assert client_for(viewer).post(RUNS, form).status_code == 403
    assert Run.objects.filter(pk=run.pk).exists()


def test_a_retired_task_whose_run_is_still_running_cannot_be_deleted(deleter):
    task = make_task(name="leaving", declared=False)
    make_run(task, status=RunStatus.RUNNING)
    url = reverse("admin:django_posixcron_task_delete", args=[task.pk])
    confirm = client_for(deleter).get(url)
    assert "leaving (a run is still queued or running)" in confirm.content.decode()
    assert client_for(deleter).post(url, {"post": "yes"}).status_code == 403
    assert Task.objects.filter(pk=task.pk).exists()


def test_a_queued_run_is_kept_like_a_running_one(deleter):
    task = make_task()
    queued = make_run(task, status=RunStatus.QUEUED, backend="default")
    Run.objects.filter(pk=queued.pk).update(started_at=None)  # no worker took it yet
    old = make_run(task, scheduled_for=queued.scheduled_for - dt.timedelta(hours=1))
    client = client_for(deleter)
    done = client.post(
        RUNS,
        {
            "action": "delete_selected",
            "post": "yes",
            "_selected_action": [str(queued.pk), str(old.pk)],
        },
        follow=True,
    )
    assert "Kept 1 queued or running run" in done.content.decode()
    assert list(Run.objects.values_list("pk", flat=True)) == [queued.pk]
    single = reverse("admin:django_posixcron_run_delete", args=[queued.pk])
    assert client.post(single, {"post": "yes"}).status_code == 403


@pytest.mark.django_db(transaction=True)
def test_each_batch_commits_of_its_own_under_atomic_requests(deleter, monkeypatch):
    # ATOMIC_REQUESTS wrapped the whole request in one transaction: every deleted row held
    # until the last batch, what the batches are there to avoid.
    from django_posixcron.admin import actions

    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    inside: list[bool] = []
    real = actions.delete_in_batches

    def delete_in_batches(queryset):
        inside.append(connection.in_atomic_block)
        return real(queryset)

    monkeypatch.setattr(actions, "delete_in_batches", delete_in_batches)
    task = make_task()
    runs = [make_run(task, started_at=dt.datetime(2086, 1, 7, h, tzinfo=dt.UTC)) for h in (1, 2)]
    form = {
        "action": "delete_selected",
        "post": "yes",
        "_selected_action": [str(run.pk) for run in runs],
    }
    assert client_for(deleter).post(RUNS, form).status_code == 302
    assert inside == [False]
    assert not Run.objects.exists()
