"""History at a glance in a real browser: the strip and the chart, as the accessibility tree
and the screen show them."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from django_posixcron.models import RunStatus
from tests.admin.conftest import make_run, make_task

pytestmark = pytest.mark.browser


def _seed() -> None:
    task = make_task(name="hourly-export", timezone="Europe/Berlin")
    start = timezone.now() - dt.timedelta(hours=12)
    statuses = [RunStatus.SUCCEEDED] * 5 + [RunStatus.FAILED, RunStatus.TIMED_OUT]
    statuses += [RunStatus.LOST, RunStatus.SKIPPED, RunStatus.SUCCEEDED, RunStatus.SUCCEEDED]
    for i, status in enumerate(statuses):
        when = start + dt.timedelta(hours=i)
        make_run(
            task,
            status=status,
            scheduled_for=when,
            started_at=when + dt.timedelta(seconds=i % 4),
            duration=dt.timedelta(seconds=20 + 7 * (i % 5)),
        )
    make_task(
        name="tired",
        paused=True,
        paused_reason="Paused automatically after 3 failed runs in a row "
        "(pause_after_failures = 3).",
    )


def test_the_strip_and_the_chart_read_without_colour(page: Any, artifacts: Path) -> None:
    from playwright.sync_api import expect

    _seed()
    page.goto("/admin/django_posixcron/task/")
    # The browser's own accessible name for the strip: the statuses in words.
    strip = page.get_by_role("img", name=re.compile(r"^Last 10 runs, oldest first: "))
    expect(strip).to_have_accessible_name(
        "Last 10 runs, oldest first: succeeded, succeeded, succeeded, succeeded, failed, "
        "timed out, lost, skipped, succeeded, succeeded"
    )
    expect(strip).to_be_in_viewport()  # in the last-run cell, not scrolled out of sight
    expect(strip.locator(".posixcron-mark")).to_have_text(
        ["✓", "✓", "✓", "✓", "✗", "◷", "?", "\u2013", "✓", "✓"]
    )
    row = page.locator("#result_list tbody tr", has_text="tired")
    expect(row).to_contain_text("Paused automatically after 3 failed runs in a row")
    page.screenshot(path=str(artifacts / "task-list-history.png"), full_page=True)
    # Without colour: the same page in grey scale still shows the shapes (kept for review).
    page.emulate_media(forced_colors="active")
    page.screenshot(path=str(artifacts / "task-list-history-forced-colors.png"), full_page=True)
    page.emulate_media(forced_colors="none")

    page.locator("#result_list tbody tr", has_text="hourly-export").locator("th a").click()
    chart = page.get_by_role("img", name="Recent durations and fire lag", exact=True)
    expect(chart).to_have_accessible_description(
        re.compile(r"^Durations of the last 10 runs as bars, fire lag")
    )
    expect(chart.locator("rect.posixcron-bar")).to_have_count(10)
    expect(chart.locator("circle.posixcron-lag")).to_have_count(10)
    expect(chart.locator("text.posixcron-bar-mark")).to_have_count(3)  # failed, timed out, lost
    box = chart.bounding_box()
    assert box is not None
    assert box["width"] > 300
    assert box["height"] > 80
    page.locator("#posixcron-history-chart").screenshot(path=str(artifacts / "task-chart.png"))


@pytest.mark.parametrize(
    ("longest", "label"),
    [
        (0.3, "0.50 s"),
        (42, "50 s"),
        (55, "1 min"),
        (1234.5, "30 min"),
        (50_000, "24 h"),
        (5 * 86_400, "120 h"),
    ],
)
def test_the_charts_axis_label_is_whole_inside_the_chart(
    page: Any, longest: float, label: str
) -> None:
    from playwright.sync_api import expect

    task = make_task(name="long-export")
    start = timezone.now() - dt.timedelta(days=30)
    for i, seconds in enumerate([longest / 3, longest]):
        when = start + dt.timedelta(days=i * 10)
        make_run(task, scheduled_for=when, started_at=when, duration=dt.timedelta(seconds=seconds))

    page.goto(f"/admin/django_posixcron/task/{task.pk}/change/")
    chart = page.get_by_role("img", name="Recent durations and fire lag", exact=True)
    top = chart.locator("text.posixcron-axis-label").first
    expect(top).to_have_text(label)
    # The label is drawn right-aligned left of the axis: as the browser lays it out, it
    # starts inside the chart, so no character is cut off at its left edge.
    left = top.evaluate("label => label.getBBox().x")
    assert left >= 0, f"the axis label {label!r} starts at x={left}, outside the chart"
