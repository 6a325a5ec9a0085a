"""History at a glance: the strip of recent runs in the list, the chart on the task page."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from html.parser import HTMLParser

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_posixcron.admin.display import in_zone
from django_posixcron.models import Run, RunStatus, Task, Trigger
from tests.admin.conftest import client_for, make_run, make_task

pytestmark = pytest.mark.django_db

LIST = reverse("admin:django_posixcron_task_changelist")
STATUSES = [
    RunStatus.SUCCEEDED,
    RunStatus.FAILED,
    RunStatus.SKIPPED,
    RunStatus.LOST,
    RunStatus.TIMED_OUT,
    RunStatus.INTERRUPTED,
    RunStatus.SUCCEEDED,
]


class Elements(HTMLParser):
    """Collect (tag, attributes, text) of every element, to check markup, not substrings."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None], str]] = []
        self._open: list[int] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs), ""))
        self._open.append(len(self.found) - 1)

    def handle_endtag(self, tag: str) -> None:
        if self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        # The text of an element includes its children's (a bar's <title>).
        for i in self._open:
            tag, attrs, text = self.found[i]
            self.found[i] = (tag, attrs, text + data)


def elements(html: str, cls: str) -> list[tuple[str, dict[str, str | None], str]]:
    parser = Elements()
    parser.feed(html)
    return [e for e in parser.found if cls in (e[1].get("class") or "").split()]


def history(task: Task, statuses: Sequence[str]) -> None:
    start = timezone.now() - dt.timedelta(hours=len(statuses))
    for i, status in enumerate(statuses):
        when = start + dt.timedelta(hours=i)
        make_run(
            task,
            status=status,
            scheduled_for=when,
            started_at=when + dt.timedelta(seconds=i),
            duration=dt.timedelta(seconds=10 * (i + 1)),
        )


def test_the_list_shows_each_tasks_recent_runs_as_marks_with_shapes_and_titles(superuser):
    task = make_task(name="mixed")
    history(task, STATUSES)
    make_task(name="fresh")

    html = client_for(superuser).get(LIST).content.decode()

    [strip] = elements(html, "posixcron-strip")  # the task without runs has none
    marks = elements(html, "posixcron-mark")
    assert [text for _, _, text in marks] == ["✓", "✗", "\u2013", "?", "◷", "‖", "✓"]
    # Colour only repeats what the shape and the title say.
    titles = [attrs["title"] or "" for _, attrs, _ in marks]
    assert [t.split(" · ")[0] for t in titles] == [str(s.label) for s in STATUSES]
    assert all(re.fullmatch(r"[a-z ]+ · cron · 20\d\d-.* CES?T · .*\d s", t) for t in titles)
    assert strip[1]["role"] == "img"
    assert strip[1]["aria-label"] == (
        "Last 7 runs, oldest first: succeeded, failed, skipped, lost, timed out, "
        "interrupted, succeeded"
    )
    fresh = html.split(">fresh</a>")[1].split("</tr>")[0]
    assert "posixcron-strip" not in fresh  # the task without history: "never"
    assert ">never<" in fresh


def test_a_strip_of_one_run_says_so_in_the_singular(superuser):
    history(make_task(name="once"), [RunStatus.FAILED])
    [strip] = elements(client_for(superuser).get(LIST).content.decode(), "posixcron-strip")
    assert strip[1]["aria-label"] == "Last run: failed"


def test_the_strip_keeps_the_latest_ten_runs(superuser):
    task = make_task(name="busy")
    history(task, [RunStatus.FAILED] * 5 + [RunStatus.SUCCEEDED] * 10)
    html = client_for(superuser).get(LIST).content.decode()
    assert [text for _, _, text in elements(html, "posixcron-mark")] == ["✓"] * 10


def test_recent_runs_are_each_tasks_latest_with_ties_and_short_histories(db):
    from django_posixcron.admin.history import recent_runs

    long, short, none = make_task(name="long"), make_task(name="short"), make_task(name="none")
    start = timezone.now() - dt.timedelta(days=1)
    for i in range(30):
        make_run(long, scheduled_for=start + dt.timedelta(minutes=i))
    # A manual run at the instant of the 10th-latest cron run: a tie at the cutoff.
    tie = start + dt.timedelta(minutes=20)
    tied = make_run(long, trigger=Trigger.MANUAL, scheduled_for=tie)
    make_run(short, scheduled_for=start)

    with CaptureQueriesContext(connection) as queries:
        found = recent_runs([long.pk, short.pk, none.pk])

    assert len(queries) == 2  # the cutoffs, then the runs: whatever the history's size
    latest = sorted(Run.objects.filter(task=long), key=lambda r: (r.scheduled_for, r.pk))
    assert [r.pk for r in found[long.pk]] == [r.pk for r in latest[-10:]]
    assert tied.pk in [r.pk for r in found[long.pk]]
    assert [r.scheduled_for for r in found[short.pk]] == [start]
    assert found[none.pk] == []


def test_the_task_page_charts_durations_and_fire_lag(superuser):
    task = make_task(name="charted")
    history(task, [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.SKIPPED, RunStatus.SUCCEEDED])

    html = client_for(superuser).get(f"{LIST}{task.pk}/change/").content.decode()

    [svg] = elements(html, "posixcron-chart")
    assert svg[1]["role"] == "img"
    assert svg[1]["aria-labelledby"] == "posixcron-chart-title"
    assert svg[1]["aria-describedby"] == "posixcron-chart-desc"
    assert "Durations of the last 3 runs as bars" in html  # the skip is left out
    bars = elements(html, "posixcron-bar")
    assert len(bars) == 3
    heights = [float(attrs["height"] or 0) for _, attrs, _ in bars]
    assert heights[0] < heights[1] < heights[2]  # 10 s, 20 s, 40 s on one axis
    # Each bar and each lag dot says what it is in its title; the failure has its own mark.
    assert [text.split(": ")[1].split(",")[0] for _, _, text in bars] == [
        "succeeded",
        "failed",
        "succeeded",
    ]
    assert [text for _, _, text in elements(html, "posixcron-bar-mark")] == ["✗"]
    dots = elements(html, "posixcron-lag")
    assert len(dots) == 3
    assert re.search(r"started 3\.00 s late", dots[2][2])
    # The runs are evenly spaced: the axis says when the first and the last were scheduled,
    # in the task's zone.
    charted = Run.objects.filter(task=task).exclude(status=RunStatus.SKIPPED).order_by("pk")
    ends = [in_zone(run.scheduled_for, task.timezone) for run in (charted[0], charted[2])]
    assert [text for _, _, text in elements(html, "posixcron-axis-time")] == ends
    assert f"The runs were scheduled from {ends[0]} to {ends[1]}." in html


def test_the_chart_takes_the_latest_started_runs_in_two_queries():
    # Ordered by their start, the database read and sorted the task's whole history for the
    # page (3.5 s on MariaDB for a task with 86,000 runs): by scheduled time, through its
    # index, as the strip.
    from django_posixcron.admin.history import CHART_RUNS, chart_points

    task = make_task(name="busy")
    history(task, [RunStatus.SUCCEEDED] * (CHART_RUNS + 5))
    newest = Run.objects.filter(task=task).latest("scheduled_for").scheduled_for
    # Skipped runs and a run not started yet are not charted.
    make_run(task, status=RunStatus.SKIPPED, scheduled_for=newest + dt.timedelta(minutes=1))
    make_run(task, status=RunStatus.QUEUED, scheduled_for=newest + dt.timedelta(minutes=2))
    Run.objects.filter(task=task, status=RunStatus.QUEUED).update(started_at=None)
    with CaptureQueriesContext(connection) as queries:
        points = chart_points(task)
    assert len(queries) == 2
    expected = (
        Run.objects.filter(task=task, status=RunStatus.SUCCEEDED)
        .order_by("-scheduled_for")
        .values_list("pk", flat=True)[:CHART_RUNS]
    )
    assert [point.run.pk for point in points] == list(reversed(expected))
    assert chart_points(make_task(name="idle")) == []


def test_the_task_page_without_runs_says_so(superuser):
    task = make_task(name="new")
    html = client_for(superuser).get(f"{LIST}{task.pk}/change/").content.decode()
    assert "No runs to chart yet." in html


def test_a_pause_made_by_the_scheduler_says_why_on_list_and_page(superuser):
    reason = "Paused automatically after 3 failed runs in a row (pause_after_failures = 3)."
    task = make_task(name="tired", paused=True, paused_reason=reason)
    client = client_for(superuser)
    assert reason in client.get(LIST).content.decode()
    assert reason in client.get(f"{LIST}{task.pk}/change/").content.decode()
    task.resume()
    assert reason not in client.get(LIST).content.decode()
