"""The task list and task page: what operators see, and what each user may do."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_posixcron.admin.tasks import TaskAdmin
from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task, Trigger
from tests.admin.conftest import _staff, client_for, make_run, make_task

pytestmark = pytest.mark.django_db

LIST = reverse("admin:django_posixcron_task_changelist")


def change_url(task: Task) -> str:
    return reverse("admin:django_posixcron_task_change", args=[task.pk])


def action_url(task: Task, action: str) -> str:
    return reverse(f"admin:django_posixcron_task_{action}", args=[task.pk])


# The list -----------------------------------------------------------------------------------


def test_list_shows_schedule_description_zone_state_last_and_next_run(superuser):
    task = make_task(name="nightly-report", timezone="Europe/Berlin")
    make_run(task, status=RunStatus.FAILED, duration=dt.timedelta(seconds=42))
    make_task(name="paused-one", paused=True)
    make_task(name="gone", declared=False)
    response = client_for(superuser).get(LIST)
    assert response.status_code == 200
    html = response.content.decode()
    assert "nightly-report" in html
    assert "15 3 * * 1-5" in html
    assert "At 03:15, Monday through Friday" in html
    assert "Europe/Berlin" in html
    assert 'posixcron-badge posixcron-active">active<' in html
    assert 'posixcron-badge posixcron-paused">paused<' in html
    assert 'posixcron-badge posixcron-retired">retired<' in html
    assert 'posixcron-failure">failed<' in html
    assert "42 s" in html
    # Next run in the task's zone, with a relative time.
    assert "CET" in html or "CEST" in html
    assert "in 3\xa0minutes" in html


def test_list_shows_a_handed_off_run_waiting_for_a_worker_as_queued(superuser):
    waiting = make_task(name="waiting")
    make_run(waiting, status=RunStatus.QUEUED, backend="default")
    working = make_task(name="working")
    make_run(working, status=RunStatus.RUNNING)
    html = client_for(superuser).get(LIST).content.decode()

    def last_run_cell(name: str) -> str:
        row = html[html.index(f">{name}<") :]
        cell = row[row.index('field-last_run_display">') :]
        return cell[: cell.index("</td>")]

    assert ">queued<" in last_run_cell("waiting")
    assert ">running<" not in last_run_cell("waiting")
    assert ">running<" in last_run_cell("working")


def test_header_counts_live_processes_failing_and_overdue(superuser):
    now = timezone.now()
    SchedulerProcess.objects.create(hostname="sched-a", pid=11, last_heartbeat_at=now)
    SchedulerProcess.objects.create(
        hostname="dead-b", pid=12, last_heartbeat_at=now - dt.timedelta(hours=1)
    )
    failing = make_task(name="fails")
    make_run(failing, status=RunStatus.TIMED_OUT)
    make_task(name="late", next_run_at=now - dt.timedelta(hours=1))
    html = client_for(superuser).get(LIST).content.decode()
    assert "sched-a:11" in html
    assert "dead-b:12" not in html
    assert "1 failing task" in html
    assert "1 overdue task" in html


def test_header_warns_when_no_scheduler_is_live(superuser):
    html = client_for(superuser).get(LIST).content.decode()
    assert "no task will run until a scheduler is started" in html


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("state=active", {"a"}),
        ("state=paused", {"p"}),
        ("state=retired", {"r"}),
        ("health=failing", {"p"}),
        ("health=overdue", {"a"}),
        ("last_run_status__exact=failed", {"p"}),
        ("timezone=Asia/Tokyo", {"r"}),
        ("q=needle", {"a"}),
        ("q=jobs.special", {"p"}),
        ("q=r", {"r"}),
    ],
)
def test_filters_and_search(superuser, query, expected):
    now = timezone.now()
    make_task(name="a", description="find the needle", next_run_at=now - dt.timedelta(hours=1))
    p = make_task(name="p", paused=True, callable_path="tests.jobs.special")
    make_run(p, status=RunStatus.FAILED)
    make_task(name="r", declared=False, timezone="Asia/Tokyo")
    response = client_for(superuser).get(f"{LIST}?{query}")
    assert response.status_code == 200
    assert {t.name for t in response.context["cl"].result_list} == expected


def test_list_sorts_by_next_run(superuser):
    now = timezone.now()
    make_task(name="b-later", next_run_at=now + dt.timedelta(hours=2))
    make_task(name="a-sooner", next_run_at=now + dt.timedelta(hours=1))
    response = client_for(superuser).get(LIST)
    assert [t.name for t in response.context["cl"].result_list] == ["a-sooner", "b-later"]
    # Sort on the next-run column, the sixth.
    response = client_for(superuser).get(f"{LIST}?o=-6")
    assert [t.name for t in response.context["cl"].result_list] == ["b-later", "a-sooner"]


def test_a_large_fleet_is_counted_in_the_header_and_links_to_the_process_list(superuser):
    now = timezone.now()
    SchedulerProcess.objects.bulk_create(
        SchedulerProcess(hostname=f"pod-{i:02}", pid=1, last_heartbeat_at=now) for i in range(27)
    )
    html = client_for(superuser).get(LIST).content.decode()
    header = html.split('id="posixcron-status"')[1].split("</div>")[0]
    assert header.count('class="posixcron-process"') == 20
    assert "pod-19:1" in header
    assert "pod-20:1" not in header
    processes = reverse("admin:django_posixcron_schedulerprocess_changelist")
    assert f'<a href="{processes}" id="posixcron-more-processes">and 7 more</a>' in header


def names_sorted_by(superuser: Any, column: str) -> list[str]:
    # The list's columns start with the action checkbox.
    index = 1 + list(TaskAdmin.list_display).index(column)
    response = client_for(superuser).get(f"{LIST}?o={index}")
    return [t.name for t in response.context["cl"].result_list]


def test_time_columns_sort_alike_on_every_database(superuser):
    # Each database puts NULL at its own end (PostgreSQL last when ascending, SQLite and
    # MariaDB first): the list must not depend on it. Names are chosen against their order.
    now = timezone.now()
    make_task(name="a-paused", paused=True, next_run_at=now - dt.timedelta(hours=3))
    make_task(name="b-retired", declared=False, next_run_at=now - dt.timedelta(hours=2))
    make_task(name="c-later", next_run_at=now + dt.timedelta(hours=2))
    make_task(name="d-sooner", next_run_at=now + dt.timedelta(hours=1), retry_at=now)
    make_run(Task.objects.get(name="c-later"), started_at=now - dt.timedelta(hours=1))
    make_run(Task.objects.get(name="d-sooner"), started_at=now - dt.timedelta(hours=5))

    # What fires first at the top; a paused or retired task fires never, so last.
    order = names_sorted_by(superuser, "next_run_display")
    assert order[:2] == ["d-sooner", "c-later"]
    assert set(order[2:]) == {"a-paused", "b-retired"}
    # A task that never ran is the oldest.
    order = names_sorted_by(superuser, "last_run_display")
    assert set(order[:2]) == {"a-paused", "b-retired"}
    assert order[2:] == ["d-sooner", "c-later"]
    # A pending retry before none.
    assert names_sorted_by(superuser, "retry_display")[0] == "d-sooner"


def test_list_shows_pending_retry_and_run_request(superuser):
    now = timezone.now()
    task = make_task(
        name="retrying",
        retry_at=now + dt.timedelta(minutes=5, seconds=30),
        next_run_at=now + dt.timedelta(hours=1),
    )
    html = client_for(superuser).get(LIST).content.decode()
    assert "in 5\xa0minutes" in html
    task.request_run(now)
    html = client_for(superuser).get(LIST).content.decode()
    assert "run requested now" in html
    # The requested run comes first and consumes the retry.
    assert "replaced by the next run, which comes first" in html


def _seed(count: int) -> None:
    now = timezone.now()
    for i in range(count):
        task = make_task(name=f"bulk-{i:03}", retry_at=now + dt.timedelta(minutes=i))
        make_run(task, status=RunStatus.FAILED if i % 2 else RunStatus.SUCCEEDED)
        make_run(
            task,
            trigger=Trigger.RETRY,
            scheduled_for=now - dt.timedelta(minutes=1),
            status=RunStatus.SUCCEEDED,
        )
    SchedulerProcess.objects.create(hostname="h", pid=1, last_heartbeat_at=now)


def _list_queries(client: Client) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(LIST)
    assert response.status_code == 200
    return len(queries)


def test_task_list_query_count_does_not_grow_with_tasks_and_runs(superuser):
    client = client_for(superuser)
    _seed(5)
    few = _list_queries(client)
    _seed_more = 45
    now = timezone.now()
    for i in range(_seed_more):
        task = make_task(name=f"more-{i:03}")
        make_run(task, status=RunStatus.LOST, started_at=now - dt.timedelta(minutes=i + 1))
    assert Task.objects.count() == 50
    assert _list_queries(client) == few


def test_task_list_query_count_is_small(superuser, django_assert_max_num_queries):
    _seed(20)
    client = client_for(superuser)
    client.get(LIST)  # warm the session
    # session, user, 2 counts, page, zone filter, processes, failing, overdue, plus savepoints
    with django_assert_max_num_queries(12):
        client.get(LIST)


# The task page ------------------------------------------------------------------------------


def test_task_page_is_read_only_and_says_where_the_definition_comes_from(superuser):
    task = make_task(name="nightly-report", kwargs={"full": True}, description="Mail it")
    response = client_for(superuser).get(change_url(task))
    assert response.status_code == 200
    html = response.content.decode()
    assert "comes from settings.POSIXCRON and cannot be edited here" in html
    assert 'name="_save"' not in html
    assert 'name="schedule"' not in html
    assert "<textarea" not in html
    assert "tests.testapp.jobs.succeed" in html
    assert "At 03:15, Monday through Friday" in html
    # Indented in a box that wraps and scrolls, not one line running off the page.
    assert '<pre class="posixcron-kwargs">{\n  &quot;full&quot;: true\n}</pre>' in html


def test_the_task_page_shows_no_kwargs_as_an_empty_dict(superuser):
    html = client_for(superuser).get(change_url(make_task(kwargs={}))).content.decode()
    assert "<code>{}</code>" in html
    assert "posixcron-kwargs" not in html


def test_posting_to_the_task_page_changes_nothing(superuser):
    task = make_task(name="nightly-report", schedule="15 3 * * 1-5")
    response = client_for(superuser).post(
        change_url(task), {"name": "evil", "schedule": "* * * * *", "paused": "on"}
    )
    assert response.status_code == 403
    task.refresh_from_db()
    assert (task.name, task.schedule, task.paused) == ("nightly-report", "15 3 * * 1-5", False)


def test_task_page_lists_next_five_occurrences_in_the_task_zone(superuser):
    task = make_task(schedule="15 3 * * 1-5", timezone="Europe/Berlin")
    response = client_for(superuser).get(change_url(task))
    upcoming = response.context["posixcron_upcoming"]
    assert len(upcoming) == 5
    assert all(" 03:15 CE" in item for item in upcoming)


def test_task_page_lists_recent_runs_newest_first_with_links(superuser):
    task = make_task()
    now = timezone.now()
    runs = [
        make_run(
            task, scheduled_for=now - dt.timedelta(days=d), started_at=now - dt.timedelta(days=d)
        )
        for d in range(12)
    ]
    response = client_for(superuser).get(change_url(task))
    recent = response.context["posixcron_recent_runs"]
    assert len(recent) == 10
    assert recent[0]["url"] == reverse("admin:django_posixcron_run_change", args=[runs[0].pk])
    assert recent[-1]["url"] == reverse("admin:django_posixcron_run_change", args=[runs[9].pk])
    html = response.content.decode()
    assert recent[0]["url"] in html
    assert f"?task={task.pk}" in html


def test_task_page_recent_runs_show_the_first_line_of_each_error(superuser):
    task = make_task()
    make_run(task, status=RunStatus.FAILED, error="ValueError: bad row 7\nwhile reading a.csv")
    make_run(task, status=RunStatus.FAILED, error="OSError: " + "x" * 200)
    html = client_for(superuser).get(change_url(task)).content.decode()
    table = html[html.index('id="posixcron-recent-runs"') :]
    assert "<td>ValueError: bad row 7</td>" in table
    assert "while reading a.csv" not in table
    assert "<td>OSError: " + "x" * 110 + "…</td>" in table  # 120 characters at most


def test_task_page_buttons_follow_permissions(superuser, viewer, pauser, resumer, runner):
    task = make_task()
    html = client_for(superuser).get(change_url(task)).content.decode()
    assert 'id="posixcron-pause"' in html
    assert 'id="posixcron-run"' in html
    assert action_url(task, "pause") in html
    html = client_for(viewer).get(change_url(task)).content.decode()
    assert 'id="posixcron-pause"' not in html
    assert 'id="posixcron-run"' not in html
    html = client_for(pauser).get(change_url(task)).content.decode()
    assert 'id="posixcron-pause"' in html
    assert 'id="posixcron-run"' not in html
    html = client_for(runner).get(change_url(task)).content.decode()
    assert 'id="posixcron-pause"' not in html
    assert 'id="posixcron-run"' in html
    html = client_for(resumer).get(change_url(task)).content.decode()
    assert 'id="posixcron-pause"' not in html
    task.pause()
    html = client_for(resumer).get(change_url(task)).content.decode()
    assert 'id="posixcron-resume"' in html
    html = client_for(pauser).get(change_url(task)).content.decode()
    assert 'id="posixcron-resume"' not in html


def test_paused_task_page_offers_resume(superuser):
    task = make_task(paused=True)
    html = client_for(superuser).get(change_url(task)).content.decode()
    assert 'id="posixcron-resume"' in html
    assert 'id="posixcron-pause"' not in html
    assert "do not fire until it is resumed" in html


def test_retired_task_page_offers_no_state_buttons_but_delete(superuser):
    task = make_task(declared=False)
    html = client_for(superuser).get(change_url(task)).content.decode()
    assert 'id="posixcron-pause"' not in html
    assert 'id="posixcron-run"' not in html
    assert "This task is retired" in html
    assert reverse("admin:django_posixcron_task_delete", args=[task.pk]) in html


def test_task_page_survives_a_schedule_the_engine_rejects(superuser):
    task = make_task(schedule="*/5 * * * *", declared=False)
    response = client_for(superuser).get(change_url(task))
    assert response.status_code == 200
    assert "Invalid schedule" in response.content.decode()
    assert client_for(superuser).get(LIST).status_code == 200


@pytest.mark.parametrize("zone", ["Europe", "No/Such_Zone", "../zoneinfo"])
def test_pages_survive_a_stored_zone_this_python_cannot_load(superuser, zone):
    # 'Europe' names a directory of the zone files: ZoneInfo raises IsADirectoryError.
    task = make_task(name="elsewhere", timezone=zone, declared=False)
    run = make_run(task, started_at=dt.datetime(2086, 1, 7, 3, 15, tzinfo=dt.UTC))
    client = client_for(superuser)
    for url in (
        LIST,
        change_url(task),
        reverse("admin:django_posixcron_run_changelist"),
        reverse("admin:django_posixcron_run_change", args=[run.pk]),
    ):
        response = client.get(url)
        assert response.status_code == 200, url
        # Times fall back to UTC, which still says when.
        assert "2086-01-07 03:15 UTC" in response.content.decode(), url


# Pause, resume, run now: the views ---------------------------------------------------------


def test_pause_and_resume_views(operator):
    task = make_task()
    client = client_for(operator)
    response = client.post(action_url(task, "pause"))
    assert response.status_code == 302
    assert response["Location"] == change_url(task)
    task.refresh_from_db()
    assert task.paused
    assert LogEntry.objects.filter(object_id=str(task.pk), change_message="Paused.").exists()
    client.post(action_url(task, "resume"))
    task.refresh_from_db()
    assert not task.paused


def test_run_now_view_records_a_request_and_runs_nothing(operator, monkeypatch):
    SchedulerProcess.objects.create(hostname="alive", pid=3, last_heartbeat_at=timezone.now())
    task = make_task(callable_path="tests.admin.test_task_admin.explode")
    before = timezone.now()
    response = client_for(operator).post(action_url(task, "run"), follow=True)
    assert response.status_code == 200
    task.refresh_from_db()
    assert task.run_requested_at is not None
    assert task.run_requested_at >= before
    assert task.due_at == task.run_requested_at
    assert not Run.objects.exists()
    assert "a scheduler starts it at its next tick" in response.content.decode()


def explode() -> None:  # pragma: no cover - the admin must never call it
    raise AssertionError("task code ran in the web process")


def test_run_now_on_a_paused_task_warns(operator):
    SchedulerProcess.objects.create(hostname="alive", pid=3, last_heartbeat_at=timezone.now())
    task = make_task(paused=True)
    response = client_for(operator).post(action_url(task, "run"), follow=True)
    assert "its run starts once it is resumed" in response.content.decode()
    assert "next tick" not in response.content.decode()
    task.refresh_from_db()
    assert task.run_requested_at is not None


def test_run_now_while_a_run_is_going_warns_that_overlap_skip_applies(operator):
    SchedulerProcess.objects.create(hostname="alive", pid=3, last_heartbeat_at=timezone.now())
    going = make_task(name="going", last_run_started_at=timezone.now())
    allowed = make_task(name="allowed", overlap="allow", last_run_started_at=timezone.now())
    done = make_task(name="done", last_run_finished_at=timezone.now())
    client = client_for(operator)
    text = client.post(action_url(going, "run"), follow=True).content.decode()
    assert "A run of going is still going and its overlap is &quot;skip&quot;" in text
    for task in (allowed, done):
        text = client.post(action_url(task, "run"), follow=True).content.decode()
        assert "still going" not in text
        assert "a scheduler starts it at its next tick" in text

    Task.objects.update(run_requested_at=None)
    text = _act(client, "run_selected", going, allowed, done).content.decode()
    assert "Requested a run of 3 tasks" in text
    assert "1 of them has a run still going and overlap &quot;skip&quot;" in text


NO_SCHEDULER = "No scheduler is running: the run starts once one is started"


def test_run_now_warns_when_no_scheduler_is_live(operator):
    # The header's rule: a dead process (stale heartbeat) or a stopped one is not live.
    now = timezone.now()
    SchedulerProcess.objects.create(
        hostname="dead", pid=1, last_heartbeat_at=now - dt.timedelta(hours=1)
    )
    SchedulerProcess.objects.create(hostname="gone", pid=2, last_heartbeat_at=now, stopped_at=now)
    button, action = make_task(name="button"), make_task(name="action")
    client = client_for(operator)
    for _twice in range(2):
        text = client.post(action_url(button, "run"), follow=True).content.decode()
        assert NO_SCHEDULER in text
        # Not "a scheduler starts it at its next tick" beside it: none is running.
        assert "next tick" not in text
        text = _act(client, "run_selected", action).content.decode()
        assert NO_SCHEDULER in text
        assert "next tick" not in text

    SchedulerProcess.objects.create(hostname="alive", pid=3, last_heartbeat_at=now)
    assert NO_SCHEDULER not in client.post(action_url(button, "run"), follow=True).content.decode()
    assert NO_SCHEDULER not in _act(client, "run_selected", action).content.decode()


def test_run_selected_on_paused_tasks_does_not_promise_the_next_tick(operator):
    SchedulerProcess.objects.create(hostname="alive", pid=3, last_heartbeat_at=timezone.now())
    held, kept = make_task(name="held", paused=True), make_task(name="kept", paused=True)
    text = _act(client_for(operator), "run_selected", held, kept).content.decode()
    assert "Requested a run of 2 tasks." in text
    assert "2 of them are paused: their runs start once they are resumed." in text
    assert "next tick" not in text


def test_pausing_a_task_the_scheduler_paused_makes_the_pause_the_operators(operator):
    reason = "Paused automatically after 3 failed runs in a row (pause_after_failures = 3)."
    task = make_task(name="auto", paused=True, paused_reason=reason)
    text = _act(client_for(operator), "pause_selected", task).content.decode()
    assert "Paused 1 task." in text
    task.refresh_from_db()
    assert (task.paused, task.paused_reason) == (True, "")


def test_run_now_again_on_a_paused_task_says_it_starts_once_resumed(operator):
    task = make_task(name="held", paused=True)
    client = client_for(operator)
    client.post(action_url(task, "run"), follow=True)
    text = client.post(action_url(task, "run"), follow=True).content.decode()
    assert "A run of held is already requested; it starts once the task is resumed." in text
    assert "next tick" not in text
    text = _act(client, "run_selected", task).content.decode()
    assert "1 already had a run requested" in text
    assert "1 of them is paused: its run starts once it is resumed." in text


def test_state_views_leave_retired_tasks_alone(operator):
    task = make_task(declared=False)
    client = client_for(operator)
    client.post(action_url(task, "pause"))
    response = client.post(action_url(task, "run"), follow=True)
    assert "no longer in settings" in response.content.decode()
    task.refresh_from_db()
    assert (task.paused, task.run_requested_at) == (False, None)


@pytest.mark.parametrize(
    ("action", "button"), [("pause", "Pause"), ("resume", "Resume"), ("run", "Run now")]
)
def test_state_views_change_nothing_on_get(operator, action, button):
    # The login page sends an operator whose session ended while pressing a button back to
    # the button's URL by GET: the task's page, saying nothing was done, not a blank 405.
    task = make_task(paused=action == "resume")
    client = client_for(operator)
    response = client.get(action_url(task, action), follow=True)
    assert response.status_code == 200
    assert response.redirect_chain == [(change_url(task), 302)]
    text = response.content.decode()
    assert f"The task {task.name} was not changed: {button} acts only when its button" in text
    task.refresh_from_db()
    assert (task.paused, task.run_requested_at) == (action == "resume", None)
    assert client.put(action_url(task, action)).status_code == 405


def test_state_views_after_login_return_to_the_task(operator):
    task = make_task()
    client = Client()
    response = client.post(action_url(task, "pause"))
    login = response.headers["Location"]
    assert login.startswith("/admin/login/")
    response = client.post(login, {"username": operator.username, "password": "pw"}, follow=True)
    assert response.redirect_chain[-1] == (change_url(task), 302)
    assert "was not changed: Pause acts only" in response.content.decode()
    task.refresh_from_db()
    assert not task.paused


def test_state_views_get_needs_view_permission(db):
    task = make_task()
    assert client_for(_staff("staff")).get(action_url(task, "pause")).status_code == 403


@pytest.mark.parametrize(
    ("user_fixture", "action"),
    [
        ("viewer", "pause"),
        ("viewer", "resume"),
        ("viewer", "run"),
        ("runner", "pause"),
        ("runner", "resume"),
        ("pauser", "run"),
        ("pauser", "resume"),
        ("resumer", "pause"),
        ("bare_staff", "pause"),
        ("bare_staff", "run"),
    ],
)
def test_state_views_refuse_users_without_the_permission(request, user_fixture, action):
    task = make_task(paused=action == "resume")
    user = request.getfixturevalue(user_fixture)
    response = client_for(user).post(action_url(task, action))
    assert response.status_code == 403
    task.refresh_from_db()
    assert task.paused == (action == "resume")
    assert task.run_requested_at is None


@pytest.mark.parametrize("action", ["pause", "run"])
def test_state_views_send_anonymous_users_to_log_in(action):
    task = make_task()
    response = client_for(None).post(action_url(task, action))
    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]
    task.refresh_from_db()
    assert (task.paused, task.run_requested_at) == (False, None)


def test_state_views_require_csrf(operator):
    task = make_task()
    client = client_for(operator, enforce_csrf_checks=True)
    assert client.post(action_url(task, "pause")).status_code == 403
    assert client.post(action_url(task, "run")).status_code == 403
    task.refresh_from_db()
    assert (task.paused, task.run_requested_at) == (False, None)
    # With the token from the page, the same post works.
    client.get(change_url(task))
    token = client.cookies["csrftoken"].value
    response = client.post(action_url(task, "pause"), {"csrfmiddlewaretoken": token})
    assert response.status_code == 302
    task.refresh_from_db()
    assert task.paused


def test_state_view_on_a_missing_task_is_404(operator):
    response = client_for(operator).post(
        reverse("admin:django_posixcron_task_pause", args=[987654])
    )
    assert response.status_code == 404


# Pause, resume, run now: the list actions -----------------------------------------------------


def _act(client: Client, action: str, *tasks: Task) -> Any:
    return client.post(
        LIST,
        {"action": action, "_selected_action": [t.pk for t in tasks]},
        follow=True,
    )


def _actions(client: Client) -> set[str]:
    form = client.get(LIST).context["action_form"]
    return set() if form is None else {name for name, _label in form.fields["action"].choices}


def test_actions_offered_follow_permissions(superuser, viewer, pauser, resumer, runner, deleter):
    assert {"pause_selected", "resume_selected", "run_selected", "delete_selected"} <= _actions(
        client_for(superuser)
    )
    assert _actions(client_for(viewer)) == set()
    assert _actions(client_for(pauser)) == {"", "pause_selected"}
    assert _actions(client_for(resumer)) == {"", "resume_selected"}
    assert _actions(client_for(runner)) == {"", "run_selected"}
    assert _actions(client_for(deleter)) == {"", "delete_selected"}


def test_pause_and_resume_actions(operator):
    a, b = make_task(), make_task()
    retired = make_task(declared=False)
    client = client_for(operator)
    response = _act(client, "pause_selected", a, b, retired)
    assert "Paused 2 tasks." in response.content.decode()
    assert "Left 1 retired task alone" in response.content.decode()
    assert set(Task.objects.filter(paused=True).values_list("pk", flat=True)) == {a.pk, b.pk}
    _act(client, "resume_selected", a)
    assert set(Task.objects.filter(paused=True).values_list("pk", flat=True)) == {b.pk}


def test_run_now_action_records_requests_only(operator):
    a, b = make_task(), make_task()
    response = _act(client_for(operator), "run_selected", a, b)
    assert "Requested a run of 2 tasks" in response.content.decode()
    assert Task.objects.filter(run_requested_at__isnull=False).count() == 2
    assert not Run.objects.exists()


def test_actions_record_history_and_say_what_was_left_as_it_was(operator):
    a, b = make_task(name="a"), make_task(name="b", paused=True)
    client = client_for(operator)

    text = _act(client, "pause_selected", a, b).content.decode()

    assert "Paused 1 task." in text
    assert "1 was already paused." in text
    history = LogEntry.objects.values_list("object_repr", "change_message")
    assert list(history) == [("a", "Paused.")]  # as the task page's button records it

    text = _act(client, "pause_selected", a, b).content.decode()
    assert "Paused 0" not in text
    assert "2 were already paused." in text
    assert LogEntry.objects.count() == 1

    _act(client, "resume_selected", a, b)
    _act(client, "run_selected", a)
    assert sorted(LogEntry.objects.values_list("object_repr", "change_message")) == [
        ("a", "Paused."),
        ("a", "Requested a run."),
        ("a", "Resumed."),
        ("b", "Resumed."),
    ]


def test_buttons_say_when_nothing_changes_and_record_nothing(operator):
    task = make_task(name="held", paused=True)
    client = client_for(operator)

    text = client.post(action_url(task, "pause"), follow=True).content.decode()
    assert "The task held was already paused." in text
    client.post(action_url(task, "resume"))
    text = client.post(action_url(task, "resume"), follow=True).content.decode()
    assert "The task held was not paused." in text
    assert list(LogEntry.objects.values_list("change_message", flat=True)) == ["Resumed."]


def test_a_second_run_now_keeps_the_pending_request(operator):
    task = make_task(name="twice", paused=True)
    client = client_for(operator)
    text = client.post(action_url(task, "run"), follow=True).content.decode()
    assert "The task twice is paused: its run starts once it is resumed." in text
    task.refresh_from_db()
    first = task.run_requested_at
    assert first is not None

    text = client.post(action_url(task, "run"), follow=True).content.decode()
    assert "A run of twice is already requested" in text
    _act(client, "run_selected", task)
    task.refresh_from_db()
    assert task.run_requested_at == first  # one request, its instant kept
    assert task.due_at == first


def test_the_run_action_again_records_nothing_for_a_request_still_pending(operator, caplog):
    SchedulerProcess.objects.create(hostname="alive", pid=3, last_heartbeat_at=timezone.now())
    pending, fresh = make_task(name="pending"), make_task(name="fresh")
    client = client_for(operator)
    _act(client, "run_selected", pending)
    first = Task.objects.get(pk=pending.pk).run_requested_at
    assert first is not None

    caplog.clear()
    with caplog.at_level("INFO", logger="django_posixcron"):
        text = _act(client, "run_selected", pending, fresh).content.decode()

    assert "Requested a run of 1 task:" in text
    assert "1 already had a run requested" in text
    assert sorted(LogEntry.objects.values_list("object_repr", "change_message")) == [
        ("fresh", "Requested a run."),
        ("pending", "Requested a run."),
    ]
    asked = [r.getMessage() for r in caplog.records if getattr(r, "action", "") == "admin_run_now"]
    assert asked == [f"Run requested from the admin task=fresh user={operator.username}"]
    assert Task.objects.get(pk=pending.pk).run_requested_at == first

    text = _act(client, "run_selected", pending, fresh).content.decode()
    assert "Requested a run of" not in text
    assert "2 already had a run requested" in text
    assert LogEntry.objects.count() == 2


def test_the_strip_of_runs_needs_the_run_view_permission(db, superuser):
    task = make_task(name="watched")
    make_run(task, status=RunStatus.FAILED)
    tasks_only = _staff("tasks-only", "view_task")
    assert "posixcron-strip" in client_for(superuser).get(LIST).content.decode()
    assert "posixcron-strip" not in client_for(tasks_only).get(LIST).content.decode()


@pytest.mark.parametrize(
    ("user_fixture", "action"),
    [
        ("viewer", "pause_selected"),
        ("viewer", "run_selected"),
        ("runner", "pause_selected"),
        ("runner", "resume_selected"),
        ("pauser", "run_selected"),
        ("pauser", "resume_selected"),
        ("resumer", "pause_selected"),
        ("viewer", "delete_selected"),
    ],
)
def test_actions_refused_without_permission(request, user_fixture, action):
    task = make_task(paused=action == "resume_selected", declared=action != "delete_selected")
    user = request.getfixturevalue(user_fixture)
    response = _act(client_for(user), action, task)
    assert response.status_code == 403
    task.refresh_from_db()
    assert task.paused == (action == "resume_selected")
    assert task.run_requested_at is None


def test_actions_require_post(operator):
    task = make_task()
    client_for(operator).get(LIST, {"action": "pause_selected", "_selected_action": str(task.pk)})
    task.refresh_from_db()
    assert not task.paused


# Deleting ----------------------------------------------------------------------------------


def test_retired_task_deleted_with_its_history(deleter):
    task = make_task(declared=False)
    make_run(task)
    make_run(task, trigger=Trigger.MANUAL)
    client = client_for(deleter)
    url = reverse("admin:django_posixcron_task_delete", args=[task.pk])
    confirm = client.get(url)
    assert confirm.status_code == 200
    assert "2 runs of history" in confirm.content.decode()
    response = client.post(url, {"post": "yes"})
    assert response.status_code == 302
    # Back to the list it came from, not the admin's index.
    assert response["Location"] == reverse("admin:django_posixcron_task_changelist")
    assert not Task.objects.exists()
    assert not Run.objects.exists()


def test_empty_fields_show_one_kind_of_dash(superuser):
    # Django's own empty cells (no timeout, no description) showed a hyphen beside the app's
    # dashes on the same page.
    task = make_task(timeout=None, description="")
    html = (
        client_for(superuser)
        .get(reverse("admin:django_posixcron_task_change", args=[task.pk]))
        .content.decode()
    )
    assert '<div class="readonly">-</div>' not in html
    assert '<div class="readonly">—</div>' in html


def test_a_sites_own_empty_value_display_stands(superuser, monkeypatch):
    from django.contrib import admin

    monkeypatch.setattr(admin.site, "empty_value_display", "(none)")
    task = make_task(timeout=None, description="")
    html = (
        client_for(superuser)
        .get(reverse("admin:django_posixcron_task_change", args=[task.pk]))
        .content.decode()
    )
    assert '<div class="readonly">(none)</div>' in html


def test_a_delete_permission_without_view_opens_and_deletes_nothing(db):
    # Only view opens the pages: delete alone opened the confirmation of a retired task
    # (its name, its history's size) and deleted it with its history.
    blind = _staff("blind", "delete_task", "delete_run")
    task = make_task(declared=False)
    run = make_run(task)
    client = client_for(blind)
    for name, pk in (("task", task.pk), ("run", run.pk)):
        url = reverse(f"admin:django_posixcron_{name}_delete", args=[pk])
        assert client.get(url).status_code == 403, name
        assert client.post(url, {"post": "yes"}).status_code == 403, name
    assert Task.objects.filter(pk=task.pk).exists()
    assert Run.objects.filter(pk=run.pk).exists()


def test_declared_task_cannot_be_deleted(superuser):
    task = make_task()
    client = client_for(superuser)
    url = reverse("admin:django_posixcron_task_delete", args=[task.pk])
    assert client.post(url, {"post": "yes"}).status_code == 403
    response = _act(client, "delete_selected", task)
    assert "declared in settings" in response.content.decode()
    client.post(LIST, {"action": "delete_selected", "_selected_action": [task.pk], "post": "yes"})
    assert Task.objects.filter(pk=task.pk).exists()


def test_bulk_delete_of_retired_tasks(deleter):
    tasks = [make_task(declared=False) for _ in range(3)]
    make_run(tasks[0])
    client = client_for(deleter)
    client.post(
        LIST,
        {"action": "delete_selected", "_selected_action": [t.pk for t in tasks], "post": "yes"},
    )
    assert not Task.objects.exists()
    assert not Run.objects.exists()


@pytest.mark.parametrize("site", ["admin", "ops", "tasks-only"])
def test_deleting_a_task_with_history_needs_the_run_delete_permission(db, site):
    """On every site, the one without the run list too: delete_task alone never takes the
    history with it, from the task's page or from the list's action."""
    from tests.admin.conftest import _staff

    user = _staff("half", "view_task", "delete_task")
    task = make_task(declared=False)
    make_run(task)
    client = client_for(user)
    url = f"/{site}/django_posixcron/task/{task.pk}/delete/"
    assert client.post(url, {"post": "yes"}).status_code == 403
    client.post(
        f"/{site}/django_posixcron/task/",
        {"action": "delete_selected", "_selected_action": [task.pk], "post": "yes"},
    )
    assert Task.objects.filter(pk=task.pk).exists()
    assert Run.objects.filter(task=task).count() == 1


def test_viewer_cannot_delete_retired_task(viewer):
    task = make_task(declared=False)
    url = reverse("admin:django_posixcron_task_delete", args=[task.pk])
    assert client_for(viewer).post(url, {"post": "yes"}).status_code == 403
    assert Task.objects.filter(pk=task.pk).exists()


# Who may look -------------------------------------------------------------------------------


def test_no_add_page(superuser):
    assert client_for(superuser).get(reverse("admin:django_posixcron_task_add")).status_code == 403
    html = client_for(superuser).get(LIST).content.decode()
    assert reverse("admin:django_posixcron_task_add") not in html


def test_anonymous_is_sent_to_log_in():
    task = make_task()
    for url in (LIST, change_url(task)):
        response = client_for(None).get(url)
        assert response.status_code == 302
        assert reverse("admin:login") in response["Location"]


def test_staff_without_view_permission_is_refused(bare_staff):
    task = make_task()
    assert client_for(bare_staff).get(LIST).status_code == 403
    assert client_for(bare_staff).get(change_url(task)).status_code == 403


def test_change_permissions_do_not_open_the_pages(db):
    # Django lets change stand in for view; nothing here can be changed, so it opens nothing.
    from tests.admin.conftest import _staff

    user = _staff("changer", "change_task", "change_run", "change_schedulerprocess")
    task = make_task()
    run = make_run(task, status=RunStatus.FAILED, error="boom", traceback="Traceback: secret")
    client = client_for(user)
    for url in (
        LIST,
        change_url(task),
        reverse("admin:django_posixcron_run_changelist"),
        reverse("admin:django_posixcron_run_change", args=[run.pk]),
        reverse("admin:django_posixcron_schedulerprocess_changelist"),
    ):
        assert client.get(url).status_code == 403, url
    assert "django_posixcron" not in client.get(reverse("admin:index")).content.decode()


def test_viewer_sees_list_and_page(viewer):
    task = make_task()
    assert client_for(viewer).get(LIST).status_code == 200
    assert client_for(viewer).get(change_url(task)).status_code == 200


def test_recent_runs_hidden_from_users_who_cannot_view_runs(db):
    from tests.admin.conftest import _staff

    user = _staff("tasks-only", "view_task")
    task = make_task()
    make_run(task)
    html = client_for(user).get(change_url(task)).content.decode()
    assert "posixcron-recent-runs" not in html


# Escaping -----------------------------------------------------------------------------------

EVIL = '<script>alert("x")</script>'


def test_user_supplied_text_is_escaped_on_list_and_page(superuser):
    task = make_task(
        name="evil-name",
        description=EVIL,
        callable_path=f"x.{EVIL}",
        kwargs={"html": EVIL},
    )
    make_run(task, status=RunStatus.FAILED, error=EVIL)
    for url in (LIST, change_url(task)):
        html = client_for(superuser).get(url).content.decode()
        assert EVIL not in html
    html = client_for(superuser).get(change_url(task)).content.decode()
    assert "&lt;script&gt;alert(" in html


def test_the_task_page_shows_every_instant_in_the_tasks_zone_and_the_last_success(superuser):
    success = dt.datetime(2086, 1, 7, 2, 15, 3, tzinfo=dt.UTC)
    task = make_task(
        name="kolkata",
        timezone="Asia/Kolkata",
        next_run_at=dt.datetime(2086, 1, 8, 4, 30, tzinfo=dt.UTC),
        created_at=dt.datetime(2085, 12, 1, 0, 0, tzinfo=dt.UTC),
        updated_at=dt.datetime(2085, 12, 2, 0, 0, tzinfo=dt.UTC),
        last_success_at=success,
    )
    html = client_for(superuser).get(change_url(task)).content.decode()
    assert "2086-01-07 07:45:03 IST" in html  # the last success
    assert "2086-01-08 10:00 IST" in html  # due at
    assert "2085-12-01 05:30 IST" in html  # created
    assert "2085-12-02 05:30 IST" in html  # updated
    never = make_task(name="never-succeeded")
    assert "never" in client_for(superuser).get(change_url(never)).content.decode()


def test_a_paused_tasks_pending_retry_is_shown_on_hold(superuser):
    retry = timezone.now() - dt.timedelta(minutes=5)
    make_task(name="held", paused=True, retry_at=retry)
    html = client_for(superuser).get(LIST).content.decode()
    assert "on hold while paused" in html
    assert "5\xa0minutes ago" not in html


def test_a_paused_tasks_retry_says_when_a_resume_loses_it_and_a_retired_ones_is_never(superuser):
    now = timezone.now()
    # Resumed after 11:00 the 11:00 occurrence fires first and consumes the retry.
    make_task(
        name="held",
        paused=True,
        timezone="UTC",
        retry_at=now + dt.timedelta(minutes=5),
        next_run_at=dt.datetime(2086, 1, 7, 11, 0, tzinfo=dt.UTC),
    )
    # Paused with its next occurrence before the retry: replaced, paused or not.
    make_task(
        name="replaced",
        paused=True,
        retry_at=now + dt.timedelta(hours=2),
        next_run_at=now + dt.timedelta(hours=1),
    )
    make_task(name="gone", declared=False, retry_at=now + dt.timedelta(minutes=5))
    html = client_for(superuser).get(LIST).content.decode()
    held = "on hold while paused; resumed after 2086-01-07 11:00 UTC, the next run replaces it"
    assert held in html
    assert html.count("replaced by the next run, which comes first") == 1
    assert "never: the task is retired" in html


def test_a_retry_the_next_cron_run_comes_before_is_shown_replaced(superuser):
    now = timezone.now()
    make_task(
        name="hourly",
        next_run_at=now + dt.timedelta(minutes=10),
        retry_at=now + dt.timedelta(hours=3),
    )
    make_task(
        name="soon",
        next_run_at=now + dt.timedelta(hours=1),
        retry_at=now + dt.timedelta(minutes=5),
    )
    html = client_for(superuser).get(LIST).content.decode()
    assert html.count("replaced by the next run, which comes first") == 1
    assert "in 2\xa0hours" not in html  # the replaced retry (in 3 hours) is not promised
    assert "in 4\xa0minutes" in html or "in 5\xa0minutes" in html


def test_a_run_started_seconds_ago_says_so(superuser):
    task = make_task(name="busy")
    make_run(task, status=RunStatus.RUNNING, started_at=timezone.now() - dt.timedelta(seconds=20))
    html = client_for(superuser).get(LIST).content.decode()
    assert "for 0\xa0minutes" not in html
    assert "for 20 seconds" in html or "for 21 seconds" in html


def test_a_staff_user_without_view_task_gets_403_before_any_query_of_the_app(db):
    client = client_for(_staff("runs-only", "view_run"))
    client.get("/admin/")  # the session and the user are loaded once
    with CaptureQueriesContext(connection) as captured:
        response = client.get(LIST)
    assert response.status_code == 403
    assert not [q for q in captured.captured_queries if "django_posixcron" in q["sql"]]


def test_pausing_and_resuming_from_the_list_log_a_line_per_task(operator, caplog):
    """docs/admin.rst: "one per task so that History and the log name the tasks this request
    changed" -- an auditor looking for who paused a task finds it by its name."""
    first, second, paused = make_task(name="first"), make_task(name="second"), make_task(name="p")
    Task.objects.filter(pk=paused.pk).update(paused=True)
    client = client_for(operator)

    def lines(action: str) -> list[tuple[str, str, str]]:
        return sorted(
            (r.getMessage(), r.task, r.user)
            for r in caplog.records
            if getattr(r, "action", "") == action
        )

    user = operator.username
    with caplog.at_level("INFO", logger="django_posixcron"):
        _act(client, "pause_selected", first, second, paused)
        _act(client, "resume_selected", first, paused)

    assert lines("admin_pause") == [
        (f"Task paused from the admin task=first user={user}", "first", user),
        (f"Task paused from the admin task=second user={user}", "second", user),
    ]
    assert lines("admin_resume") == [
        (f"Task resumed from the admin task=first user={user}", "first", user),
        (f"Task resumed from the admin task=p user={user}", "p", user),
    ]
