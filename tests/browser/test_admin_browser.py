"""Operate the admin in a real browser: list, pause, run now, read a traceback."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task, Trigger
from tests.admin.conftest import make_run, make_task

pytestmark = pytest.mark.browser

TRACEBACK = """Traceback (most recent call last):
  File "/srv/app/reports/jobs.py", line 41, in nightly
    send(report, to=recipients)
  File "/srv/app/reports/mail.py", line 17, in send
    raise ConnectionRefusedError("<smtp.internal:25> refused the connection")
ConnectionRefusedError: <smtp.internal:25> refused the connection"""


def _seed() -> tuple[Task, Run]:
    now = timezone.now()
    SchedulerProcess.objects.create(hostname="sched-a", pid=4242, last_heartbeat_at=now)
    report = make_task(
        name="nightly-report",
        schedule="15 3 * * 1-5",
        timezone="Europe/Berlin",
        description="Mail the nightly report",
        callable_path="reports.jobs.nightly",
    )
    failed = make_run(
        report,
        status=RunStatus.FAILED,
        duration=dt.timedelta(seconds=3, milliseconds=120),
        error="ConnectionRefusedError: <smtp.internal:25> refused the connection",
        traceback=TRACEBACK,
    )
    Task.objects.filter(pk=report.pk).update(retry_at=now + dt.timedelta(minutes=4, seconds=30))
    cleanup = make_task(
        name="cleanup-sessions",
        schedule="0 * * * *",
        timezone="UTC",
        callable_path="django.contrib.sessions.cleanup",
    )
    make_run(cleanup, duration=dt.timedelta(milliseconds=250))
    make_task(name="quarter-hourly", schedule="0,15,30,45 * * * *", timezone="America/New_York")
    make_task(name="old-export", schedule="0 2 1 * *", declared=False, timezone="UTC")
    return report, failed


def test_list_pause_and_run_now(page: Any, artifacts: Path) -> None:
    from playwright.sync_api import expect

    report, _failed = _seed()
    page.goto("/admin/django_posixcron/task/")
    row = page.locator("#result_list tbody tr", has_text="nightly-report")
    expect(row).to_contain_text("At 03:15, Monday through Friday")
    expect(row).to_contain_text("failed")
    expect(page.locator("#posixcron-status")).to_contain_text("sched-a:4242")
    expect(page.locator("#posixcron-failing")).to_contain_text("1 failing task")
    page.screenshot(path=str(artifacts / "task-list.png"), full_page=True)

    # Pause from the task page's button.
    row.locator("th a").click()
    expect(page.locator("#posixcron-read-only")).to_contain_text("comes from settings")
    expect(page.locator("#posixcron-upcoming li")).to_have_count(5)
    page.click("#posixcron-pause")
    expect(page.locator("ul.messagelist")).to_contain_text("Paused nightly-report.")
    expect(page.locator("#posixcron-resume")).to_be_visible()
    report.refresh_from_db()
    assert report.paused
    page.screenshot(path=str(artifacts / "task-page-paused.png"), full_page=True)

    # Run now from the list's action, on another task.
    page.goto("/admin/django_posixcron/task/")
    row = page.locator("#result_list tbody tr", has_text="cleanup-sessions")
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "run_selected")
    page.click("button[name=index]")
    expect(page.locator("ul.messagelist")).to_contain_text("Requested a run of 1 task")
    row = page.locator("#result_list tbody tr", has_text="cleanup-sessions")
    expect(row).to_contain_text("run requested")
    paused_row = page.locator("#result_list tbody tr", has_text="nightly-report")
    expect(paused_row).to_contain_text("paused")
    cleanup = Task.objects.get(name="cleanup-sessions")
    assert cleanup.run_requested_at is not None
    assert cleanup.due_at == cleanup.run_requested_at
    # A request only: the web process ran nothing.
    assert not Run.objects.filter(trigger=Trigger.MANUAL).exists()


def test_the_task_page_buttons_match_the_history_button(page: Any) -> None:
    # "styled like the admin's own History button": they were 18 px high beside its 26 px,
    # off its baseline (a button's font and line height are not inherited).
    report, _failed = _seed()
    page.goto(f"/admin/django_posixcron/task/{report.pk}/change/")
    history = page.locator("ul.object-tools a.historylink").bounding_box()
    assert history is not None
    for button in ("#posixcron-pause", "#posixcron-run"):
        box = page.locator(button).bounding_box()
        assert box is not None
        assert abs(box["height"] - history["height"]) <= 1, (button, box, history)
        assert abs(box["y"] - history["y"]) <= 1, (button, box, history)


def test_the_process_states_are_coloured_badges(page: Any) -> None:
    # admin.rst: "green live, grey stopped, red presumed dead"; the process list did not
    # link the app's style sheet, and a dead process looked like a live one.
    now = timezone.now()
    SchedulerProcess.objects.create(hostname="live", pid=1, last_heartbeat_at=now)
    SchedulerProcess.objects.create(
        hostname="dead", pid=2, last_heartbeat_at=now - dt.timedelta(hours=1)
    )
    page.goto("/admin/django_posixcron/schedulerprocess/")
    colours = {}
    for host in ("live", "dead"):
        badge = page.locator("#result_list tbody tr", has_text=host).locator("td.field-state span")
        colours[host] = badge.evaluate("e => getComputedStyle(e).backgroundColor")
    assert "rgba(0, 0, 0, 0)" not in colours.values(), colours
    assert colours["live"] != colours["dead"], colours


def test_each_schedule_stays_on_one_line_in_the_list(page: Any) -> None:
    from playwright.sync_api import expect

    _seed()
    make_task(name="berlin-half-hourly", schedule="0,30 * * * *", timezone="Europe/Berlin")
    make_task(name="five", schedule=FIVE_MINUTES, timezone="UTC")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto("/admin/django_posixcron/task/")
    schedules = page.locator("#result_list code.posixcron-schedule")
    expect(schedules).to_have_count(6)
    # A line box per line: an expression wrapped between its fields reads as fewer fields.
    lines = schedules.evaluate_all(
        "codes => codes.map(c => [c.textContent.replace(/\\u00a0/g, ' '), "
        "c.getClientRects().length])"
    )
    assert all(count == 1 for text, count in lines if text != FIVE_MINUTES), lines
    # The long list breaks after its commas only: its last element and the four other
    # fields stay together on one line.
    assert [count for text, count in lines if text == FIVE_MINUTES] != [1], lines
    tail = page.locator("#result_list code.posixcron-schedule-long").evaluate(
        "code => { const r = document.createRange(); r.selectNodeContents(code.lastChild);"
        " return [code.lastChild.textContent.replace(/\\u00a0/g, ' '),"
        " r.getClientRects().length]; }"
    )
    assert tail == ["55 * * * *", 1], tail


@pytest.mark.parametrize(
    ("scheme", "red"), [("light", "rgb(198, 40, 40)"), ("dark", "rgb(255, 138, 128)")]
)
def test_the_failing_count_is_red(page: Any, scheme: str, red: str) -> None:
    # Django's a:link and a:visited colours are more specific than a class alone.
    from playwright.sync_api import expect

    _seed()
    page.emulate_media(color_scheme=scheme)
    page.goto("/admin/django_posixcron/task/")
    failing = page.locator("#posixcron-failing")
    expect(failing).to_contain_text("1 failing task")
    assert failing.evaluate("a => getComputedStyle(a).color") == red
    overdue = page.locator("#posixcron-overdue")  # none: the link's own colour
    assert overdue.evaluate("a => getComputedStyle(a).color") != red


def test_a_traceback_fits_a_phone(page: Any, artifacts: Path) -> None:
    _report, failed = _seed()
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"/admin/django_posixcron/run/{failed.pk}/change/")
    page.screenshot(path=str(artifacts / "failed-run-phone.png"), full_page=True)
    # Within the row that clips it: what overflows the row is out of reach of the box's own
    # scroll bar.
    box, row = page.locator("pre.posixcron-traceback").evaluate(
        "pre => [pre.getBoundingClientRect().right,"
        " pre.closest('.form-row').getBoundingClientRect().right]"
    )
    assert box <= row + 1, (box, row)


def test_failed_run_shows_its_traceback(page: Any, artifacts: Path) -> None:
    from playwright.sync_api import expect

    _report, failed = _seed()
    page.goto("/admin/django_posixcron/run/?status__exact=failed")
    page.locator("#result_list tbody tr", has_text="nightly-report").locator("th a").click()
    traceback = page.locator("pre.posixcron-traceback")
    expect(traceback).to_contain_text("Traceback (most recent call last):")
    expect(traceback).to_contain_text(
        "ConnectionRefusedError: <smtp.internal:25> refused the connection"
    )
    expect(page.locator("pre.posixcron-error")).to_contain_text("<smtp.internal:25>")
    assert f"/admin/django_posixcron/run/{failed.pk}/change/" in page.url
    page.screenshot(path=str(artifacts / "failed-run.png"), full_page=True)


def test_delete_all_runs_across_pages_keeps_the_running_one(page: Any, artifacts: Path) -> None:
    from playwright.sync_api import expect

    task = make_task(name="chatty", schedule="* * * * *", timezone="UTC")
    start = timezone.now() - dt.timedelta(days=2)
    Run.objects.bulk_create(
        Run(
            task=task,
            trigger=Trigger.CRON,
            status=RunStatus.SUCCEEDED,
            scheduled_for=start + dt.timedelta(minutes=i),
            started_at=start + dt.timedelta(minutes=i),
            finished_at=start + dt.timedelta(minutes=i),
            duration=dt.timedelta(0),
        )
        for i in range(150)
    )
    running = make_run(task, status=RunStatus.RUNNING, started_at=timezone.now())

    page.goto("/admin/django_posixcron/run/")
    page.check("#action-toggle")
    page.click("div.actions .question a")  # "Select all 151 runs", beyond the first page
    page.select_option("select[name=action]", "delete_selected")
    page.click("button[name=index]")
    expect(page.locator("#posixcron-delete-count")).to_contain_text("150 runs of history")
    expect(page.locator("#posixcron-delete-running")).to_contain_text("still queued or running")
    page.screenshot(path=str(artifacts / "delete-runs-confirm.png"), full_page=True)
    page.click("#posixcron-delete-confirm")
    expect(page.locator("ul.messagelist")).to_contain_text("Successfully deleted 150 runs.")
    expect(page.locator("ul.messagelist")).to_contain_text("Kept 1 queued or running run")
    assert list(Run.objects.values_list("pk", flat=True)) == [running.pk]


LONG_NAME = "a" * 90 + "-long-name"  # 100 characters: the longest name a task may have
FIVE_MINUTES = "0,5,10,15,20,25,30,35,40,45,50,55 * * * *"


@pytest.mark.parametrize("width", [1400, 1920])
def test_a_long_task_name_wraps_and_the_list_fits_the_window(
    page: Any, artifacts: Path, width: int
) -> None:
    from playwright.sync_api import expect

    now = timezone.now()
    report = make_task(name="morning-report", schedule="30 6 * * 1-5", timezone="Europe/Berlin")
    make_run(report, status=RunStatus.FAILED)
    Task.objects.filter(pk=report.pk).update(
        retry_at=now + dt.timedelta(minutes=4, seconds=30), next_run_at=now + dt.timedelta(hours=5)
    )
    make_run(make_task(name="cleanup-sessions", schedule="0 * * * *", timezone="UTC"))
    make_task(name=LONG_NAME, schedule="5 * * * *", timezone="UTC")
    # The longest zone name, a pause the scheduler made (its reason names a settings key) and
    # a pending request: each widened its column past the window.
    make_task(name="plata", schedule="0 9 * * *", timezone="America/Argentina/ComodRivadavia")
    make_task(
        name="held",
        paused=True,
        paused_reason="Paused automatically after 3 failed runs in a row "
        "(pause_after_failures = 3).",
    )
    make_task(name="asked").request_run()
    # Every five minutes, as POSIX cron spells it: on one line it widened the schedule
    # column by half the window.
    make_task(name="five", schedule=FIVE_MINUTES, timezone="UTC")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/admin/django_posixcron/task/")
    page.screenshot(path=str(artifacts / f"task-list-long-name-{width}.png"), full_page=True)

    # Every column on screen: the table fits the box that would otherwise scroll it.
    table = page.locator("#result_list").bounding_box()
    results = page.locator("#changelist .results").bounding_box()
    assert table is not None
    assert results is not None
    assert table["x"] + table["width"] <= results["x"] + results["width"] + 1, (table, results)
    retry = page.locator("#result_list thead th.column-retry_display")
    expect(retry).to_contain_text("Pending retry", ignore_case=True)
    box = retry.bounding_box()
    assert box is not None
    assert box["x"] + box["width"] <= results["x"] + results["width"] + 1
    # The long name wraps; an ordinary one stays on one line.
    name = page.locator("#result_list th.field-name a")
    heights = dict(name.evaluate_all("as => as.map(a => [a.textContent, a.offsetHeight])"))
    assert heights[LONG_NAME] > 2 * heights["cleanup-sessions"], heights
    assert heights["morning-report"] == heights["cleanup-sessions"], heights

    # On the task page the title wraps beside the buttons rather than run under them.
    name.filter(has_text="-long-name").click()
    page.screenshot(path=str(artifacts / f"task-page-long-name-{width}.png"), full_page=True)
    tools = page.locator("ul.object-tools").bounding_box()
    assert tools is not None
    # The boxes of the title's text, line by line: none under the buttons.
    # Django 6.1 puts the titles in a box of their own beside the buttons.
    lines = page.locator("#content > h2, #content .titles > h2").first.evaluate(
        """h2 => { const range = document.createRange(); range.selectNodeContents(h2);
        return [...range.getClientRects()].map(r => [r.left, r.top, r.right, r.bottom]); }"""
    )
    right, bottom = tools["x"] + tools["width"], tools["y"] + tools["height"]
    for left, top, end, low in lines:
        assert end <= tools["x"] or left >= right or low <= tools["y"] or top >= bottom, (
            lines,
            tools,
        )


# The WCAG 2.1 relative luminance and contrast ratio, in the page.
CONTRASTS = """els => els.map(e => {
  const lum = c => { const [r, g, b] = c.match(/[\\d.]+/g).slice(0, 3).map(v => {
      v = v / 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const style = getComputedStyle(e);
  const [a, b] = [lum(style.color), lum(style.backgroundColor)].sort((x, y) => y - x);
  return [e.className, e.textContent.trim(), (a + 0.05) / (b + 0.05)];
})"""


def test_badges_and_marks_meet_the_aa_contrast_for_small_text(page: Any) -> None:
    _seed()  # failed, succeeded, retired, active
    make_task(name="held", paused=True)
    make_run(make_task(name="going"), status=RunStatus.RUNNING, started_at=timezone.now())
    make_task(name="asked").request_run()
    odd = make_task(name="odd")
    make_run(odd, status=RunStatus.SKIPPED)
    # A status this version does not know (a newer one wrote it): the badges' default colour.
    Task.objects.filter(pk=odd.pk).update(last_run_status="deferred")
    page.goto("/admin/django_posixcron/task/")
    ratios = page.locator(".posixcron-badge, .posixcron-mark").evaluate_all(CONTRASTS)
    kinds = {cls.split()[-1] for cls, _text, _ratio in ratios}
    assert {"posixcron-paused", "posixcron-deferred", "posixcron-failure"} <= kinds, kinds
    low = [(cls, text, round(ratio, 2)) for cls, text, ratio in ratios if ratio < 4.5]
    assert not low, low
