"""The run history: read-only, filterable, and a failed run's traceback readable."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_posixcron.admin.filters import TASK_FILTER_CHOICES
from django_posixcron.models import Run, RunStatus, Task, Trigger
from tests.admin.conftest import _staff, client_for, make_run, make_task

pytestmark = pytest.mark.django_db

LIST = reverse("admin:django_posixcron_run_changelist")

TRACEBACK = """Traceback (most recent call last):
  File "/srv/app/reports/jobs.py", line 12, in nightly
    raise RuntimeError("SMTP said <550> & went away")
RuntimeError: SMTP said <550> & went away"""


def run_url(run: Run) -> str:
    return reverse("admin:django_posixcron_run_change", args=[run.pk])


def test_list_columns(superuser):
    task = make_task(name="nightly-report")
    make_run(task, status=RunStatus.FAILED, duration=dt.timedelta(seconds=3, milliseconds=500))
    html = client_for(superuser).get(LIST).content.decode()
    assert "nightly-report" in html
    assert reverse("admin:django_posixcron_task_change", args=[task.pk]) in html
    assert 'posixcron-failure">failed<' in html
    assert "3.50 s" in html
    assert "web-1:4242" in html
    assert "cron" in html


def test_the_list_says_why_each_run_failed(superuser):
    # Filtered to failures, the list says what went wrong without opening each run: the
    # error's first line, shortened, escaped, the whole error on hover.
    task = make_task(name="nightly-report")
    make_run(task, status=RunStatus.FAILED, error="RuntimeError: SMTP said <550> & went away")
    long = "ValueError: " + "x" * 300 + "\nsecond line"
    make_run(task, status=RunStatus.FAILED, error=long, scheduled_for=timezone.now())
    make_run(task, status=RunStatus.SUCCEEDED, scheduled_for=timezone.now())
    html = client_for(superuser).get(LIST + "?status__exact=failed").content.decode()
    errors = re.findall(
        r'class="posixcron-describe posixcron-run-error" title="([^"]*)">([^<]*)<', html
    )
    assert len(errors) == 2
    shown = {text: title for title, text in errors}
    assert "RuntimeError: SMTP said &lt;550&gt; &amp; went away" in shown
    (shortened,) = (text for text in shown if text.startswith("ValueError"))
    assert len(shortened) == 100
    assert shortened.endswith("…")
    assert "second line" in shown[shortened]


def test_the_list_says_where_a_handed_off_run_runs(superuser):
    task = make_task()
    make_run(task, process_label="sched-1:10", status=RunStatus.QUEUED, backend="default")
    make_run(
        task,
        process_label="sched-1:10",
        status=RunStatus.RUNNING,
        backend="default",
        worker="worker-7:99",
        started_at=timezone.now() - dt.timedelta(minutes=20),
    )
    html = client_for(superuser).get(reverse("admin:django_posixcron_run_changelist"))
    text = html.content.decode()
    assert "backend default" in text
    assert "worker-7:99 (worker)" in text
    assert "sched-1:10" not in text  # the scheduler that queued them is on the run's page


def test_run_list_does_not_count_the_whole_table(superuser):
    task = make_task()
    make_run(task)
    response = client_for(superuser).get(LIST)
    assert response.context["cl"].show_full_result_count is False
    assert response.context["cl"].full_result_count is None


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status__exact=failed", {"a-fail"}),
        ("trigger__exact=manual", {"b-manual"}),
        ("q=b", {"b-manual", "b-ok"}),
    ],
)
def test_filters_and_search(superuser, query, expected):
    a, b = make_task(name="a"), make_task(name="b")
    now = timezone.now()
    make_run(a, status=RunStatus.FAILED, process_label="a-fail")
    make_run(b, trigger=Trigger.MANUAL, process_label="b-manual", started_at=now)
    make_run(b, process_label="b-ok", started_at=now - dt.timedelta(hours=1))
    response = client_for(superuser).get(f"{LIST}?{query}")
    assert response.status_code == 200
    assert {r.process_label for r in response.context["cl"].result_list} == expected


def test_filter_by_task(superuser):
    a, b = make_task(name="a"), make_task(name="b")
    run_a = make_run(a)
    make_run(b)
    response = client_for(superuser).get(f"{LIST}?task={a.pk}")
    assert list(response.context["cl"].result_list) == [run_a]


def test_task_filter_menu_is_bounded_but_keeps_the_selected_task(superuser):
    tasks = [make_task(name=f"t-{i:03}") for i in range(TASK_FILTER_CHOICES + 5)]
    last = tasks[-1]
    make_run(last)
    response = client_for(superuser).get(f"{LIST}?task={last.pk}")
    task_filter = next(f for f in response.context["cl"].filter_specs if f.parameter_name == "task")
    choices = task_filter.lookup_choices
    assert len(choices) == TASK_FILTER_CHOICES + 1
    assert (str(last.pk), last.name) in choices
    assert len(response.context["cl"].result_list) == 1


def test_bad_task_filter_value_is_not_a_crash(superuser):
    make_task()
    response = client_for(superuser).get(f"{LIST}?task=abc")
    assert response.status_code == 302
    assert "e=1" in response["Location"]


@pytest.mark.parametrize("value", ["²", "-", "1.5", str(2**63), "9" * 5000])
def test_a_task_filter_value_that_is_no_id_is_not_a_crash(superuser, value):
    make_run(make_task())
    response = client_for(superuser).get(LIST, {"task": value})
    assert response.status_code == 302
    assert "e=1" in response["Location"]


@pytest.fixture(params=["few runs", "more than the count's cap"])
def counted(request, monkeypatch):
    """The date hierarchy reads the instants of a list the paginator counted whole, and
    probes the index per period past the count's cap: both ways, the same periods."""
    if request.param != "few runs":
        from django_posixcron.admin.runs import CappedPaginator

        monkeypatch.setattr(CappedPaginator, "cap", 1)
    return request.param


def test_date_hierarchy(superuser, counted):
    task = make_task()
    make_run(task, started_at=dt.datetime(2086, 1, 7, 3, 15, tzinfo=dt.UTC))
    make_run(task, started_at=dt.datetime(2086, 2, 7, 3, 15, tzinfo=dt.UTC))
    client = client_for(superuser)
    response = client.get(f"{LIST}?scheduled_for__year=2086&scheduled_for__month=1")
    assert response.status_code == 200
    assert len(response.context["cl"].result_list) == 1
    assert "scheduled_for__year=2086" in client.get(LIST).content.decode()


@pytest.mark.parametrize(
    "instants",
    [
        [dt.datetime(9999, 12, 31, 23, 59, tzinfo=dt.UTC)],
        [dt.datetime(9999, 12, 31, 23, 59, tzinfo=dt.UTC), dt.datetime(9999, 1, 1, tzinfo=dt.UTC)],
        [dt.datetime(9999, 12, 31, 23, 59, tzinfo=dt.UTC), dt.datetime(2086, 1, 7, tzinfo=dt.UTC)],
        [dt.datetime(1, 1, 1, tzinfo=dt.UTC), dt.datetime(2086, 1, 7, tzinfo=dt.UTC)],
    ],
)
def test_the_date_hierarchy_reaches_the_first_and_the_last_year(superuser, instants, counted):
    task = make_task()
    for instant in instants:
        make_run(task, started_at=instant)
    response = client_for(superuser).get(LIST)
    assert response.status_code == 200
    html = response.content.decode()
    years = sorted({instant.year for instant in instants})
    if len(years) > 1:
        for year in years:
            assert f'scheduled_for__year={year}"' in html
    elif len({instant.month for instant in instants}) > 1:
        assert "scheduled_for__month=12" in html
    else:
        assert "scheduled_for__day=31" in html


def test_the_date_hierarchy_asks_no_more_for_a_longer_span(superuser, counted):
    task = make_task()
    client = client_for(superuser)
    make_run(task, started_at=dt.datetime(2085, 6, 1, tzinfo=dt.UTC))
    make_run(task, started_at=dt.datetime(2086, 6, 1, tzinfo=dt.UTC))
    client.get(LIST)
    with CaptureQueriesContext(connection) as adjacent:
        client.get(LIST)
    # Two thousand years apart: the years between hold nothing, and are not each asked.
    Run.objects.filter(started_at__year=2085).update(
        scheduled_for=dt.datetime(1, 6, 1, tzinfo=dt.UTC)
    )
    with CaptureQueriesContext(connection) as apart:
        response = client.get(LIST)
    assert 'href="?scheduled_for__year=1"' in response.content.decode()
    assert len(apart) == len(adjacent)


def test_the_date_hierarchy_of_a_filter_matching_few_runs_reads_them_once(superuser):
    # Probing the index per period, a filter matching few runs of a long history walked most
    # of it at each probe (6.3 s on PostgreSQL with 1.5 million runs, for the bounds alone).
    task = make_task()
    for month in (1, 3, 5):
        make_run(task, started_at=dt.datetime(2086, month, 7, tzinfo=dt.UTC))
    make_run(
        task,
        status=RunStatus.INTERRUPTED,
        trigger=Trigger.RETRY,
        started_at=dt.datetime(2086, 3, 9, tzinfo=dt.UTC),
    )
    client = client_for(superuser)
    url = f"{LIST}?status__exact=interrupted&trigger__exact=retry"
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    html = response.content.decode()
    # One month holds the match: opened straight away, its one day listed.
    assert "scheduled_for__day=9" in html
    assert "scheduled_for__month=1" not in html
    on_runs = [q["sql"] for q in queries if "django_posixcron_run" in q["sql"]]
    # The page's runs, their count, and the instants for the hierarchy.
    assert len(on_runs) == 3


def _probe_steps(client: Any, url: str) -> int:
    """The SQLite virtual machine's steps (in hundreds) for the date hierarchy's probes of
    one request (each asks for one row): what they read, counted by the engine itself,
    whatever the machine's speed."""
    steps = [0]
    probing = [False]

    def count() -> int:
        steps[0] += probing[0]
        return 0

    def probe(execute, sql, params, many, context):
        probing[0] = bool(re.search(r"LIMIT 1$", sql))
        try:
            return execute(sql, params, many, context)
        finally:
            probing[0] = False

    connection.ensure_connection()
    raw = connection.connection
    raw.set_progress_handler(count, 100)
    try:
        with connection.execute_wrapper(probe):
            assert client.get(url).status_code == 200
    finally:
        raw.set_progress_handler(None, 100)
    return steps[0]


def test_the_date_hierarchy_under_a_filter_does_not_read_the_history_on_sqlite(
    superuser, monkeypatch
):
    # SQLite keeps no statistics unless someone runs ANALYZE: it probed each day of a month
    # under status=succeeded through the status index, sorting every succeeded run of the
    # history per probe, and walked each day's probe from the month's start (3.5 s for a
    # month at 300,000 runs).
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's planner without statistics")
    from django_posixcron.admin.runs import CappedPaginator

    monkeypatch.setattr(CappedPaginator, "cap", 10)  # past the cap: the probes
    task = make_task()
    client = client_for(superuser)
    url = f"{LIST}?status__exact=succeeded&scheduled_for__year=2086&scheduled_for__month=1"
    start = dt.datetime(2086, 1, 1, tzinfo=dt.UTC)

    def history(per_day: int) -> None:
        Run.objects.all().delete()
        Run.objects.bulk_create(
            Run(
                task=task,
                trigger=Trigger.CRON,
                status=RunStatus.SUCCEEDED,
                scheduled_for=start + dt.timedelta(days=day, minutes=minute),
            )
            for day in range(31)
            for minute in range(per_day)
        )

    history(20)
    client.get(url)
    short = _probe_steps(client, url)
    history(200)
    long = _probe_steps(client, url)
    html = client.get(url).content.decode()
    assert "scheduled_for__day=31" in html
    # Ten times the history: about the same reading (it was about ten times as much).
    assert long < short * 2, (short, long)


def test_the_date_hierarchy_of_one_tasks_runs_does_not_walk_the_others_on_sqlite(
    superuser, monkeypatch
):
    # Told to walk the dates' index, the probes of one task's runs, all in one old month,
    # read every other task's runs newer than them (0.13 s became 0.7-1.3 s at 1.5 million
    # runs): the task's own index reaches them at once.
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's planner without statistics")
    from django_posixcron.admin.runs import CappedPaginator

    monkeypatch.setattr(CappedPaginator, "cap", 10)
    rare, busy = make_task(name="rare"), make_task(name="busy")
    start = dt.datetime(2086, 1, 1, tzinfo=dt.UTC)
    Run.objects.bulk_create(
        Run(
            task=rare,
            trigger=Trigger.CRON,
            status=RunStatus.SUCCEEDED,
            scheduled_for=start + dt.timedelta(hours=hour),
        )
        for hour in range(50)
    )
    client = client_for(superuser)

    def busy_history(days: int) -> None:
        Run.objects.filter(task=busy).delete()
        Run.objects.bulk_create(
            Run(
                task=busy,
                trigger=Trigger.CRON,
                status=RunStatus.SUCCEEDED,
                scheduled_for=start + dt.timedelta(days=40 + day, minutes=minute),
            )
            for day in range(days)
            for minute in range(0, 1440, 30)
        )

    for url in (f"{LIST}?task={rare.pk}", f"{LIST}?q=rare"):
        busy_history(10)
        short = _probe_steps(client, url)
        busy_history(100)
        long = _probe_steps(client, url)
        assert long < short * 2 + 10, (url, short, long)


def test_a_distinct_run_list_keeps_its_date_hierarchy(superuser, monkeypatch):
    # A project's filter across a relation makes Django's list distinct; combined with
    # the probes' own query, it was a TypeError (a 500) on SQLite past the count's cap.
    from django_posixcron.admin.runs import CappedPaginator, RunAdmin

    monkeypatch.setattr(CappedPaginator, "cap", 1)
    original = RunAdmin.get_queryset
    monkeypatch.setattr(
        RunAdmin, "get_queryset", lambda self, request: original(self, request).distinct()
    )
    task = make_task()
    for month in (1, 2):
        make_run(task, started_at=dt.datetime(2086, month, 7, tzinfo=dt.UTC))
    response = client_for(superuser).get(f"{LIST}?scheduled_for__year=2086")
    assert response.status_code == 200
    assert "scheduled_for__month=2" in response.content.decode()


def test_failed_run_shows_error_and_traceback_escaped(superuser):
    task = make_task(name="nightly-report")
    run = make_run(
        task, status=RunStatus.FAILED, error="RuntimeError: <550> & away", traceback=TRACEBACK
    )
    html = client_for(superuser).get(run_url(run)).content.decode()
    assert '<pre class="posixcron-traceback">Traceback (most recent call last):' in html
    assert "raise RuntimeError(&quot;SMTP said &lt;550&gt; &amp; went away&quot;)" in html
    assert '<pre class="posixcron-error">RuntimeError: &lt;550&gt; &amp; away</pre>' in html
    assert "<550>" not in html


def test_malicious_traceback_is_escaped(superuser):
    task = make_task(name="x")
    run = make_run(
        task,
        status=RunStatus.FAILED,
        error='<img src=x onerror="alert(1)">',
        traceback="<script>alert(1)</script>",
    )
    for url in (LIST, run_url(run)):
        html = client_for(superuser).get(url).content.decode()
        assert "<script>alert(1)</script>" not in html
        assert "<img src=x" not in html


def test_runs_are_read_only(superuser):
    task = make_task()
    run = make_run(task, status=RunStatus.FAILED)
    client = client_for(superuser)
    assert client.get(reverse("admin:django_posixcron_run_add")).status_code == 403
    html = client.get(run_url(run)).content.decode()
    assert 'name="_save"' not in html
    response = client.post(run_url(run), {"status": "succeeded"})
    assert response.status_code == 403
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED


def test_delete_needs_the_delete_permission(viewer, deleter):
    task = make_task()
    run = make_run(task)
    url = reverse("admin:django_posixcron_run_delete", args=[run.pk])
    assert client_for(viewer).post(url, {"post": "yes"}).status_code == 403
    assert Run.objects.filter(pk=run.pk).exists()
    assert client_for(deleter).post(url, {"post": "yes"}).status_code == 302
    assert not Run.objects.filter(pk=run.pk).exists()


def test_a_run_deleted_from_its_page_returns_to_the_list_with_its_filters(deleter):
    run = make_run(make_task())
    url = reverse("admin:django_posixcron_run_delete", args=[run.pk])
    filters = "_changelist_filters=status__exact%3Dsucceeded"
    response = client_for(deleter).post(f"{url}?{filters}", {"post": "yes"})
    assert response.status_code == 302
    assert response["Location"] == f"{LIST}?status__exact=succeeded"


def test_a_user_who_may_not_view_tasks_gets_no_links_to_them(db):
    # Each link answered 403: the run list's task column and the run page's task field.
    user = _staff("runs-only", "view_run")
    task = make_task(name="nightly-report")
    run = make_run(task)
    client = client_for(user)
    task_url = reverse("admin:django_posixcron_task_change", args=[task.pk])
    assert client.get(task_url).status_code == 403
    listed = client.get(LIST).content.decode()
    page = client.get(run_url(run)).content.decode()
    for html in (listed, page):
        assert "nightly-report" in html
        assert task_url not in html
    # With the permission, both link to the task.
    viewer = _staff("both", "view_run", "view_task")
    assert task_url in client_for(viewer).get(LIST).content.decode()
    assert task_url in client_for(viewer).get(run_url(run)).content.decode()


def test_bulk_delete_of_old_runs(deleter):
    task = make_task()
    runs = [make_run(task, trigger=t) for t in (Trigger.CRON, Trigger.RETRY, Trigger.MANUAL)]
    client_for(deleter).post(
        LIST,
        {"action": "delete_selected", "_selected_action": [r.pk for r in runs[:2]], "post": "yes"},
    )
    assert list(Run.objects.all()) == [runs[2]]


def test_anonymous_and_staff_without_permission(bare_staff):
    task = make_task()
    run = make_run(task)
    for url in (LIST, run_url(run)):
        anonymous = client_for(None).get(url)
        assert anonymous.status_code == 302
        assert reverse("admin:login") in anonymous["Location"]
        assert client_for(bare_staff).get(url).status_code == 403


def test_run_list_query_count_does_not_grow_with_runs(superuser):
    client = client_for(superuser)
    task = make_task()
    now = timezone.now()
    for i in range(5):
        make_run(task, started_at=now - dt.timedelta(minutes=i))
    client.get(LIST)
    with CaptureQueriesContext(connection) as few:
        client.get(LIST)
    for i in range(5, 60):
        make_run(make_task(), started_at=now - dt.timedelta(minutes=i))
    with CaptureQueriesContext(connection) as many:
        client.get(LIST)
    assert len(many) == len(few)


def test_process_list_says_which_processes_are_live_stopped_or_presumed_dead(superuser):
    from django_posixcron.models import SchedulerProcess

    now = timezone.now()
    SchedulerProcess.objects.create(hostname="alive", pid=1, last_heartbeat_at=now)
    SchedulerProcess.objects.create(hostname="done", pid=2, last_heartbeat_at=now, stopped_at=now)
    # Silent for longer than the stale limit (30 s at least), and never stopped.
    silent = now - dt.timedelta(minutes=4)
    SchedulerProcess.objects.create(hostname="gone", pid=3, last_heartbeat_at=silent)
    html = client_for(superuser).get(reverse("admin:django_posixcron_schedulerprocess_changelist"))
    states = {
        label: state
        for label, state in re.findall(
            r'>(\w+:\d)</a>.*?posixcron-badge [\w-]+">([\w ]+)</span>', html.content.decode(), re.S
        )
    }
    assert states == {"alive:1": "live", "done:2": "stopped", "gone:3": "presumed dead"}


def test_process_admin_is_read_only(superuser):
    from django_posixcron.models import SchedulerProcess

    process = SchedulerProcess.objects.create(hostname="sched-a", pid=7)
    client = client_for(superuser)
    html = client.get(reverse("admin:django_posixcron_schedulerprocess_changelist")).content
    assert b"sched-a:7" in html
    assert b'<span class="posixcron-badge posixcron-active">live</span>' in html
    url = reverse("admin:django_posixcron_schedulerprocess_change", args=[process.pk])
    assert client.get(url).status_code == 200
    assert client.post(url, {"hostname": "other"}).status_code == 403


@override_settings(TIME_ZONE="America/Sao_Paulo", LANGUAGE_CODE="de", USE_THOUSAND_SEPARATOR=True)
def test_process_pages_show_the_pid_as_is_and_times_to_the_second_in_the_zone(superuser):
    from django_posixcron.models import SchedulerProcess

    started = dt.datetime(2086, 1, 7, 10, 0, 5, 250_000, tzinfo=dt.UTC)
    process = SchedulerProcess.objects.create(
        hostname="sched-a",
        pid=10466,
        started_at=started,
        last_heartbeat_at=started + dt.timedelta(seconds=42),
        stopped_at=dt.datetime(2086, 1, 7, 10, 1, tzinfo=dt.UTC),
    )
    client = client_for(superuser)
    listed = client.get(reverse("admin:django_posixcron_schedulerprocess_changelist"))
    url = reverse("admin:django_posixcron_schedulerprocess_change", args=[process.pk])
    page = client.get(url).content.decode()
    for html in (listed.content.decode(), page):
        assert "2086-01-07 07:00:05 -03" in html  # started, to the second, zone named
        assert "2086-01-07 07:00:47 -03 (" in html  # the heartbeat, and how long ago
        assert "2086-01-07 07:01:00 -03" in html  # stopped: seconds even when :00
    assert '<div class="readonly">10466</div>' in page  # not "10.466"
    assert "10.466" not in page


def test_a_retry_shows_the_occurrence_it_serves_and_its_attempt(superuser):
    task = make_task(name="retried", timezone="Europe/Berlin")
    occurrence = dt.datetime(2086, 1, 7, 10, 0, tzinfo=dt.UTC)
    retry = make_run(
        task,
        trigger=Trigger.RETRY,
        scheduled_for=occurrence + dt.timedelta(minutes=5),
        occurrence=occurrence,
        attempt=2,
    )
    html = client_for(superuser).get(run_url(retry)).content.decode()
    assert "2086-01-07 11:00 CET" in html  # the occurrence, in the task's zone
    assert '<div class="readonly">2</div>' in html


def test_a_handed_off_run_shows_its_backend_result_id_worker_and_deadlines(superuser):

    task = make_task(name="export")
    run = make_run(
        task,
        status=RunStatus.RUNNING,
        backend="rq",
        result_id="5f0c-result",
        worker="worker-7:311",
        heartbeat_at=timezone.now(),
        start_deadline_at=timezone.now() + dt.timedelta(minutes=5),
    )
    local = make_run(task, scheduled_for=run.scheduled_for - dt.timedelta(hours=1))
    client = client_for(superuser)

    page = client.get(reverse("admin:django_posixcron_run_change", args=[run.pk]))
    html = page.content.decode().lower()
    for shown in ("rq", "5f0c-result", "worker-7:311", "worker heartbeat", "start deadline"):
        assert shown in html, shown
    html = client.get(
        reverse("admin:django_posixcron_run_change", args=[local.pk])
    ).content.decode()
    assert "run by the scheduler" in html


def test_the_run_list_filters_on_queued(superuser):

    task = make_task(name="export")
    queued = make_run(task, status=RunStatus.QUEUED, backend="default")
    make_run(task, scheduled_for=queued.scheduled_for - dt.timedelta(hours=1))

    page = client_for(superuser).get(
        reverse("admin:django_posixcron_run_changelist"), {"status__exact": "queued"}
    )

    assert [r.pk for r in page.context["cl"].result_list] == [queued.pk]
    assert "?status__exact=queued" in page.content.decode()


def test_the_two_instances_of_a_repeated_hour_are_told_apart(superuser):
    # 2026-11-01 01:30 happens twice in New York: at 05:30 UTC (EDT) and 06:30 UTC (EST).
    task = make_task(name="twice", timezone="America/New_York", schedule="30 * * * *")
    first = dt.datetime(2026, 11, 1, 5, 30, tzinfo=dt.UTC)
    for instant in (first, first + dt.timedelta(hours=1)):
        make_run(task, scheduled_for=instant, started_at=instant)
    client = client_for(superuser)
    html = client.get(reverse("admin:django_posixcron_run_changelist")).content.decode()
    assert "2026-11-01 01:30 EDT" in html
    assert "2026-11-01 01:30 EST" in html


def test_a_repeated_hour_under_one_abbreviation_shows_its_offset():
    # Moscow went back from +04 to +03 on 2014-10-26, calling both MSK.
    from django_posixcron.admin.display import in_zone

    first = dt.datetime(2014, 10, 25, 21, 30, tzinfo=dt.UTC)
    assert in_zone(first, "Europe/Moscow") == "2014-10-26 01:30 MSK (UTC+04:00)"
    assert in_zone(first + dt.timedelta(hours=1), "Europe/Moscow") == (
        "2014-10-26 01:30 MSK (UTC+03:00)"
    )
    assert in_zone(first + dt.timedelta(hours=2), "Europe/Moscow") == "2014-10-26 02:30 MSK"
    assert in_zone(dt.datetime(2086, 1, 7, 10, 0, 5, tzinfo=dt.UTC), "Europe/Berlin") == (
        "2086-01-07 11:00:05 CET"
    )


def test_a_run_is_named_by_its_task_on_its_page(superuser):
    task = make_task(name="named", timezone="Asia/Kolkata")
    run = make_run(task, started_at=dt.datetime(2086, 1, 7, 3, 15, tzinfo=dt.UTC))
    html = client_for(superuser).get(run_url(run)).content.decode()
    # The breadcrumb: in the task's zone, as every other time of the page.
    assert "named:cron@2086-01-07T08:45:00+05:30" in html
    # A zone this host's zone files lack (another deploy's row): UTC.
    Task.objects.filter(pk=task.pk).update(timezone="Mars/Olympus_Mons")
    assert str(Run.objects.select_related("task").get(pk=run.pk)) == (
        "named:cron@2086-01-07T03:15:00+00:00"
    )
    # Its wall time past year 9999: UTC too.
    last = make_run(make_task(), started_at=dt.datetime(9999, 12, 31, 23, 59, tzinfo=dt.UTC))
    assert str(Run.objects.select_related("task").get(pk=last.pk)).endswith(
        "@9999-12-31T23:59:00+00:00"
    )
    # Without its task loaded, printing a run costs no query.
    bare = Run.objects.get(pk=run.pk)
    with CaptureQueriesContext(connection) as queries:
        assert str(bare).startswith(f"{task.pk}:cron@")
    assert not queries.captured_queries


def test_the_list_sorts_by_task_name_except_on_mysql(superuser):
    # On MariaDB a sort by the task's name joined the tasks first and sorted the whole
    # history for each page (40-73 s with 1.5 million runs): not offered there, and a URL
    # that asks for it (copied from another database's admin) gets the default order.
    make_run(make_task(name="b-task"), scheduled_for=timezone.now() - dt.timedelta(hours=1))
    make_run(make_task(name="a-task"), scheduled_for=timezone.now() - dt.timedelta(hours=2))
    response = client_for(superuser).get(LIST, {"o": "2"})
    names = [run.task.name for run in response.context["cl"].result_list]
    header = response.content.decode().split('class="sortable column-task_link', 1)
    if connection.vendor == "mysql":
        assert names == ["b-task", "a-task"]  # newest first, as by default
        assert len(header) == 1
    else:
        assert names == ["a-task", "b-task"]
        assert len(header) == 2


def test_oldest_first_breaks_ties_oldest_first(superuser):
    # "scheduled_for, -id" (Django's tie-break, whatever the direction) is served by no index:
    # MariaDB sorted the whole history for the page.
    task = make_task()
    instant = timezone.now() - dt.timedelta(hours=1)
    first = make_run(task, scheduled_for=instant)
    second = make_run(task, trigger=Trigger.MANUAL, scheduled_for=instant)
    response = client_for(superuser).get(LIST, {"o": "1"})
    cl = response.context["cl"]
    assert cl.get_ordering(response.wsgi_request, cl.root_queryset) == ["scheduled_for", "pk"]
    assert [run.pk for run in cl.result_list] == [first.pk, second.pk]


@pytest.mark.parametrize("many", [False, True])
def test_the_search_finds_runs_by_every_word_of_their_tasks_names(superuser, many, monkeypatch):
    # Through the matching tasks' ids (a list, or a subquery past SEARCH_TASKS of them), not
    # a join that MariaDB answered by sorting every matching run (22 s at 1.5 million runs).
    from django_posixcron.admin import runs

    if many:
        monkeypatch.setattr(runs, "SEARCH_TASKS", 1)
    names = ("nightly-report", "nightly-export", "weekly-report", "report")
    for name in names:
        make_run(make_task(name=name), process_label=name)
    client = client_for(superuser)

    def found(term: str) -> set[str]:
        response = client.get(LIST, {"q": term})
        assert response.status_code == 200
        return {run.process_label for run in response.context["cl"].result_list}

    assert found("REPORT") == {"nightly-report", "weekly-report", "report"}
    assert found("nightly report") == {"nightly-report"}
    assert found('"nightly-e"') == {"nightly-export"}
    assert found("nothing") == set()


def test_the_date_hierarchy_of_a_change_list_without_a_paginator(superuser):
    # A project's own change list (a subclass that pages differently) may have none: the
    # hierarchy reads the index per period instead of raising TypeError from vars().
    from django_posixcron.templatetags.posixcron_admin import posixcron_date_hierarchy

    task = make_task()
    make_run(task, started_at=dt.datetime(2086, 1, 7, 3, 15, tzinfo=dt.UTC))
    make_run(task, started_at=dt.datetime(2086, 2, 7, 3, 15, tzinfo=dt.UTC))
    cl = client_for(superuser).get(LIST).context["cl"]
    del cl.paginator
    months = [choice["title"] for choice in posixcron_date_hierarchy(cl)["choices"]]
    assert len(months) == 2
