"""History at a glance: a strip of recent runs per task in the list, a chart on the task page.

"Each task's recent runs as a strip of status marks in the list; recent durations and fire lag
as a chart on the task page." Inline SVG and HTML, no front-end build step. Readable without
colour: every status has its own shape, every mark and bar its own title, and the strip and
the chart carry a text alternative for screen readers.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable

from django.db.models import OuterRef, Q, QuerySet
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext

from django_posixcron.admin import display
from django_posixcron.db import ByTaskIndex, app_alias
from django_posixcron.models import FAILURE_STATUSES, Run, RunStatus, Task

STRIP_RUNS = 10
CHART_RUNS = 30

# One shape per status, so the strip reads in grey scale and to the colour-blind too.
MARKS = {
    RunStatus.SUCCEEDED: "✓",
    RunStatus.FAILED: "✗",
    RunStatus.TIMED_OUT: "◷",
    RunStatus.LOST: "?",
    RunStatus.INTERRUPTED: "‖",
    RunStatus.SKIPPED: "\u2013",  # an en dash
    RunStatus.RUNNING: "▶",
    RunStatus.QUEUED: "…",  # handed to a worker, waiting for it
}


def _kind(status: str) -> str:
    return "failure" if status in FAILURE_STATUSES else status


def _label(status: str) -> str:
    return str(RunStatus(status).label) if status in RunStatus.values else status


def recent_runs(task_ids: Iterable[int], per_task: int = STRIP_RUNS) -> dict[int, list[Run]]:
    """Return each task's latest runs, newest last, in two queries for the whole page."""
    runs = Run.objects.using(app_alias()).only(
        "id", "task_id", "status", "trigger", "scheduled_for", "duration"
    )
    return latest_runs(runs, task_ids, per_task)


def latest_runs(
    runs: QuerySet[Run], task_ids: Iterable[int], per_task: int
) -> dict[int, list[Run]]:
    """Return each task's latest `runs` by scheduled time, newest last, in two queries.

    First each task's cutoff, the scheduled time of its `per_task`-th latest run (an index
    look-up per task), then the runs from there on. Numbering every run of the page's tasks
    and keeping the first ten read all their history: 6 s for a page of minutely tasks with
    two million runs.
    """
    ids = list(task_ids)
    if not ids:
        return {}
    # By scheduled time alone, the order of the (task, -scheduled_for) index: with the
    # primary key as a tie-break MariaDB sorted each task's whole history. Ties at the cutoff
    # only bring a run or two more, dropped below.
    nth = (
        runs.filter(task=OuterRef("pk"))
        .order_by("-scheduled_for")
        .values("scheduled_for")[per_task - 1 : per_task]
    )
    cutoffs = Task.objects.using(runs.db).filter(pk__in=ids).annotate(cut=ByTaskIndex(nth))
    wanted = Q()
    few = []  # tasks with fewer runs than that: all of them
    for pk, cut in cutoffs.values_list("pk", "cut"):
        if cut is None:
            few.append(pk)
        else:
            wanted |= Q(task_id=pk, scheduled_for__gte=cut)
    if few:
        wanted |= Q(task_id__in=few)
    found: dict[int, list[Run]] = {pk: [] for pk in ids}
    if not wanted:
        return found
    for run in runs.filter(wanted):
        found[run.task_id].append(run)
    for pk, listed in found.items():
        listed.sort(key=lambda r: (r.scheduled_for, r.pk))
        found[pk] = listed[-per_task:]
    return found


def strip(task: Task, runs: list[Run]) -> SafeString:
    """Return the strip of status marks of a task's recent runs, oldest first."""
    if not runs:
        return display.muted(gettext("no runs"))
    marks = format_html_join(
        "",
        '<span class="posixcron-mark posixcron-{}" title="{}">{}</span>',
        (
            (
                _kind(run.status),
                f"{_label(run.status)} · {run.get_trigger_display()} · "
                f"{display.in_zone(run.scheduled_for, task.timezone)}"
                + (f" · {display.duration(run.duration)}" if run.duration is not None else ""),
                MARKS.get(RunStatus(run.status), "•") if run.status in RunStatus.values else "•",
            )
            for run in runs
        ),
    )
    summary = ngettext(
        "Last run: %(statuses)s",
        "Last %(count)d runs, oldest first: %(statuses)s",
        len(runs),
    ) % {
        "count": len(runs),
        "statuses": ", ".join(_label(run.status) for run in runs),
    }
    return format_html(
        '<span class="posixcron-strip" role="img" aria-label="{}">{}</span>', summary, marks
    )


@dataclasses.dataclass(frozen=True)
class Point:
    run: Run
    duration: float | None
    lag: float | None


def chart_points(task: Task, limit: int = CHART_RUNS) -> list[Point]:
    """Return the task's latest started runs (skips left out), oldest first.

    Latest by scheduled time, through latest_runs() as the strip: ordered by their start,
    the database read and sorted all of the task's history (a task with 86,000 runs: 3.5 s on
    MariaDB, 0.3 s on PostgreSQL). A run starts at its scheduled time, give or take its fire
    lag, so the two orders differ only around runs that started late.
    """
    started = (
        Run.objects.using(app_alias())
        .exclude(status=RunStatus.SKIPPED)
        .filter(started_at__isnull=False)
    )
    runs = latest_runs(started, [task.pk], limit)[task.pk]
    return [
        Point(
            run,
            None if run.duration is None else run.duration.total_seconds(),
            None
            if run.started_at is None
            else (run.started_at - run.scheduled_for).total_seconds(),
        )
        for run in runs
    ]


# The chart's geometry, in SVG user units; it scales with the page (viewBox).
# The left margin holds the axis's top label ("0.50 s", "30 min", "120 h") at 10 px.
WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 600, 180, 64, 24, 12


def _n(value: float) -> str:
    """Return a coordinate for the SVG markup (format_html escapes before it formats)."""
    return f"{value:.1f}"


def _nice(value: float) -> float:
    """Return a round upper bound for an axis: 1, 2 or 5 times a power of ten."""
    if value <= 0:
        return 1.0
    power = 10.0 ** int(f"{value:e}".split("e")[1])
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return step * power
    return 10 * power


# Round tops for an axis of a minute or more, in seconds: whole minutes, then whole hours.
_MINUTES, _HOURS = (1, 2, 5, 10, 15, 20, 30), (1, 2, 3, 6, 12, 24)
_TIME_TOPS = tuple(60 * m for m in _MINUTES) + tuple(3600 * h for h in _HOURS)


def _axis_top(seconds: float) -> tuple[float, str]:
    """Return a round upper bound for the chart's axis, and its label.

    A clock-like figure ("30 min", "6 h") under a minute's: "2000 s" would read as
    "33 min 20 s", too long for the margin and no use as a scale.
    """
    if seconds <= 50:  # 1, 2, 5, 10, 20 or 50 s (and tenths); past that, whole minutes
        top = _nice(seconds)
        return top, display.duration(dt.timedelta(seconds=top))
    for top in _TIME_TOPS:
        if seconds <= top:
            break
    else:
        top = _nice(seconds / 86400) * 86400
    if top < 3600:
        return top, gettext("%(minutes)d min") % {"minutes": top // 60}
    return top, gettext("%(hours)d h") % {"hours": top // 3600}


# The plotting area inside the chart's margins.
PLOT_W, PLOT_H = WIDTH - LEFT - 8, HEIGHT - BOTTOM - TOP


@dataclasses.dataclass(frozen=True)
class Scale:
    """Seconds to SVG coordinates: one slot per run, one axis from 0 to `top` seconds."""

    top: float
    slots: int

    @property
    def slot(self) -> float:
        return PLOT_W / self.slots

    def x(self, i: int) -> float:
        return LEFT + i * self.slot

    def y(self, seconds: float) -> float:
        return TOP + PLOT_H - PLOT_H * min(max(seconds, 0.0), self.top) / self.top


def _title(task: Task, p: Point) -> str:
    return gettext("%(when)s: %(status)s, took %(took)s, started %(lag)s late") % {
        "when": display.in_zone(p.run.scheduled_for, task.timezone),
        "status": _label(p.run.status),
        "took": display.duration(p.run.duration)
        or (gettext("(unknown)") if p.run.status == RunStatus.LOST else gettext("(running)")),
        "lag": display.duration(dt.timedelta(seconds=p.lag or 0)),
    }


def _bars(task: Task, points: list[Point], scale: Scale) -> list[SafeString]:
    """Return a bar per finished run, and a mark above each failed one."""
    bars = []
    for i, p in enumerate(points):
        x = scale.x(i)
        if p.duration is not None:
            bars.append(
                format_html(
                    '<rect class="posixcron-bar posixcron-{}" x="{}" y="{}" width="{}"'
                    ' height="{}"><title>{}</title></rect>',
                    _kind(p.run.status),
                    _n(x + scale.slot * 0.15),
                    _n(scale.y(p.duration)),
                    _n(scale.slot * 0.7),
                    _n(TOP + PLOT_H - scale.y(p.duration)),
                    _title(task, p),
                )
            )
        if p.run.status in FAILURE_STATUSES:
            # A failed run is marked by a letter above its bar, not by its colour alone.
            bars.append(
                format_html(
                    '<text class="posixcron-bar-mark" x="{}" y="{}">✗</text>',
                    _n(x + scale.slot / 2),
                    _n(scale.y(p.duration or 0) - 2),
                )
            )
    return bars


def _lag_line(task: Task, points: list[Point], scale: Scale) -> SafeString:
    """Return the fire lag as a dashed polyline through a titled dot per started run."""
    dots = [
        (_n(scale.x(i) + scale.slot / 2), _n(scale.y(p.lag)), _title(task, p))
        for i, p in enumerate(points)
        if p.lag is not None
    ]
    return format_html(
        '<polyline class="posixcron-lag-line" points="{}"/>{}',
        " ".join(f"{x},{y}" for x, y, _ in dots),
        format_html_join(
            "",
            '<circle class="posixcron-lag" cx="{}" cy="{}" r="3"><title>{}</title></circle>',
            dots,
        ),
    )


def _time_axis(first: str, last: str | None) -> SafeString:
    """Return the scheduled times of the first and the last run charted (None: one run),
    under the axis at its ends: the runs are evenly spaced, whatever time lies between."""
    label = (
        '<text class="posixcron-axis-label posixcron-axis-time" x="{}" y="{}" '
        'text-anchor="{}">{}</text>'
    )
    y = TOP + PLOT_H + 16
    start = format_html(label, LEFT, y, "start", first)
    return start if last is None else format_html("{}" + label, start, WIDTH - 8, y, "end", last)


def chart(task: Task, points: list[Point]) -> SafeString:
    """Return an inline SVG of durations (bars) and fire lag (a dashed line of dots)."""
    if not points:
        return display.muted(gettext("No runs to chart yet."))
    longest = max([p.duration or 0 for p in points] + [max(p.lag or 0, 0) for p in points])
    top, top_label = _axis_top(longest)
    scale = Scale(top, len(points))
    first, last = (
        display.in_zone(p.run.scheduled_for, task.timezone) for p in (points[0], points[-1])
    )
    description = gettext(
        "Durations of the last %(count)d runs as bars, fire lag (start minus scheduled time) "
        "as a dashed line of dots; the axis goes from 0 to %(top)s. The runs were scheduled "
        "from %(first)s to %(last)s."
    ) % {
        "count": len(points),
        "top": top_label,
        "first": first,
        "last": last,
    }
    return format_html(
        '<svg class="posixcron-chart" viewBox="0 0 {} {}" role="img" '
        'aria-labelledby="posixcron-chart-title" aria-describedby="posixcron-chart-desc">'
        '<title id="posixcron-chart-title">{}</title><desc id="posixcron-chart-desc">{}</desc>'
        '<line class="posixcron-axis" x1="{}" y1="{}" x2="{}" y2="{}"/>'
        '<text class="posixcron-axis-label" x="{}" y="{}" text-anchor="end">{}</text>'
        '<text class="posixcron-axis-label" x="{}" y="{}" text-anchor="end">0</text>'
        "{}{}{}</svg>"
        '<p class="posixcron-legend"><span class="posixcron-legend-bar"></span> {} '
        '<span class="posixcron-legend-lag">- ● -</span> {} <span>✗</span> {}</p>',
        WIDTH,
        HEIGHT,
        gettext("Recent durations and fire lag"),
        description,
        LEFT,
        TOP + PLOT_H,
        WIDTH - 8,
        TOP + PLOT_H,
        LEFT - 4,
        TOP + 10,
        top_label,
        LEFT - 4,
        TOP + PLOT_H,
        format_html_join("", "{}", ((bar,) for bar in _bars(task, points, scale))),
        _lag_line(task, points, scale),
        _time_axis(first, last if len(points) > 1 else None),
        gettext("duration"),
        gettext("fire lag"),
        gettext("failed, lost, interrupted or timed out"),
    )
