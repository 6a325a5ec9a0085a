"""The run list's date hierarchy, drawn from index probes instead of a DISTINCT over history.

Django's own `date_hierarchy` tag lists the years, months or days that hold rows with
`SELECT DISTINCT date_trunc(...)` over every selected row: seconds on a million runs. Here
each candidate period between the first and the last run is asked `EXISTS` over a range of
`scheduled_for`, which the index answers at once: 12 months or 31 days; the years are found
one per probe, each asking for the first row after the last year found.

A probe walks the index until a row matches the list's filters too: a filter that matches few
runs of a long history (``status=interrupted``) made each walk read most of it (the bounds
alone took 6.3 s on PostgreSQL with 1.5 million runs). A list the paginator counted whole
(at most its cap of 10,000 runs) is few rows: their instants are read once instead, and the
periods found among them.
"""

from __future__ import annotations

import bisect
import calendar
import datetime as dt
import inspect
from typing import Any, cast

from django import template
from django.contrib.admin.templatetags.base import InclusionAdminNode
from django.db import connections
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.text import capfirst
from django.utils.translation import gettext as _

from django_posixcron.db import indexed_by

register = template.Library()


def _start(year: int, month: int = 1, day: int = 1) -> dt.datetime:
    # Periods are read in the current time zone, as Django's __year/__month/__day lookups are.
    return timezone.make_aware(dt.datetime(year, month, day))


def _end(year: int, month: int = 1, day: int = 1) -> dt.datetime | None:
    """Return the end of a period (the next one's start), or None, no end, past year 9999."""
    return _start(year, month, day) if year <= dt.MAXYEAR else None


def _next_month(year: int, month: int) -> tuple[int, int]:
    return (year + 1, 1) if month == 12 else (year, month + 1)


def _int(value: Any) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def _narrowed_by(where: Any, columns: set[str]) -> bool:
    """Whether a WHERE clause tests one of `columns` (at any depth: the search's
    `task_id IN (...)` under an OR of its words)."""
    for child in getattr(where, "children", ()):
        if _narrowed_by(child, columns):
            return True
        target = getattr(getattr(child, "lhs", None), "target", None)
        if getattr(target, "column", None) in columns:
            return True
    return False


class _Hierarchy:
    """The change list's date field, its current drill-down and its links."""

    def __init__(self, cl: Any) -> None:
        self.cl = cl
        self.field = field = cl.date_hierarchy
        self.year_field, self.month_field, self.day_field = (
            f"{field}__{part}" for part in ("year", "month", "day")
        )
        self.queryset = cl.queryset.order_by()
        # The list's instants, oldest first, when they are few (see the module's docstring).
        self.instants: list[dt.datetime] | None = None
        paginator = getattr(cl, "paginator", None)
        # Counted (the count is cached on it), and not past the cap.
        counted = "count" in getattr(paginator, "__dict__", {})
        if counted and getattr(paginator, "capped", True) is False:
            self.instants = sorted(self.queryset.values_list(field, flat=True))
        # SQLite keeps no statistics unless someone runs ANALYZE: it answered each probe
        # under a filter of the list (status=succeeded) through the status index, sorting
        # every matching run of the history per probe (a month's 31 days: 3.5 s at 300,000
        # runs). There the probes are told to walk the field's own index, as they are meant
        # to: more than the count's cap match. Not a list narrowed to some tasks (the task
        # filter, the search): their runs may sit in a corner of the history, which the
        # task's own index reaches at once and a walk of the dates only after all the rest.
        self.index: str | None = None
        model = self.queryset.model
        if connections[self.queryset.db].vendor == "sqlite" and not _narrowed_by(
            self.queryset.query.where, {"task_id"}
        ):
            self.index = next(
                (i.name for i in model._meta.indexes if list(i.fields) == [field]), None
            )

    def bounds(self) -> tuple[dt.datetime | None, dt.datetime | None]:
        """Return the first and the last instant of the list."""
        if self.instants is not None:
            return (self.instants[0], self.instants[-1]) if self.instants else (None, None)
        # Two ordered probes, each from one end of the index: MariaDB answered MIN and MAX
        # under a filter (status=failed) with a scan of the whole table (3-4 s at 1.5 million
        # runs). Many rows match here (more than the count's cap), so each walk is short.
        return (
            self._first(self.queryset.order_by(self.field), self.field),
            self._first(self.queryset.order_by(f"-{self.field}"), self.field),
        )

    def _first(self, ordered: QuerySet[Any], value: str) -> Any:
        """Return `value` of the first row of an ordered probe, or None."""
        if self.index is None:
            found = list(ordered.values_list(value, flat=True)[:1])
            return found[0] if found else None
        connection = connections[ordered.db]
        qn = connection.ops.quote_name
        sql, params = ordered.values_list("pk", flat=True)[:1].query.sql_with_params()
        sql = indexed_by(sql, qn(ordered.model._meta.db_table), qn(self.index))
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if row is None or value == "pk":
            return None if row is None else row[0]
        rows = ordered.model._base_manager.using(ordered.db).filter(pk=row[0])
        return rows.values_list(value, flat=True).first()

    def param(self, name: str) -> int | None:
        return _int(self.cl.params.get(name))

    def link(self, filters: dict[str, Any]) -> str:
        return str(self.cl.get_query_string(filters, [f"{self.field}__"]))

    def holds(self, start: dt.datetime, end: dt.datetime | None) -> bool:
        """Return whether a row falls in [start, end), or after start: one index probe."""
        if self.instants is not None:
            at = bisect.bisect_left(self.instants, start)
            return at < len(self.instants) and (end is None or self.instants[at] < end)
        period = {f"{self.field}__gte": start}
        if end is not None:
            period[f"{self.field}__lt"] = end
        # The first row of the period by the field's order, not any row: told "any", the
        # PostgreSQL planner reckons a period of a busy history matches so many rows that a
        # scan of the table finds one at once, and read most of two million runs to reach
        # the newest days (written last). Ordered, it walks the index from the start.
        return self._first(self._within(period).order_by(self.field), "pk") is not None

    def _within(self, period: dict[str, Any]) -> QuerySet[Any]:
        """The list's rows in `period`, the period's bounds first in the WHERE clause: SQLite
        walks the index from the first lower bound it reads there, and the list's own (the
        month drilled into) came first: each day's probe walked from the month's start."""
        listed: QuerySet[Any] = self.queryset
        if self.index is None or listed.query.distinct:
            # (Django combines no distinct query with another: a list made distinct by a
            # project's filter keeps its own bounds first.)
            return listed.filter(**period)
        rows: QuerySet[Any] = listed.model._base_manager.using(listed.db).filter(**period)
        return rows & listed

    def year_after(self, year: int) -> int | None:
        """Return the first year after `year` that holds a row: one ordered probe, as holds()."""
        start = _end(year + 1)
        if start is None:
            return None
        if self.instants is not None:
            at = bisect.bisect_left(self.instants, start)
            return timezone.localtime(self.instants[at]).year if at < len(self.instants) else None
        later = self._within({f"{self.field}__gte": start}).order_by(self.field)
        found = self._first(later, self.field)
        return timezone.localtime(found).year if found is not None else None


def posixcron_date_hierarchy(cl: Any) -> dict[str, Any]:
    """Return the context of admin/date_hierarchy.html for a change list."""
    h = _Hierarchy(cl)
    year, month, day = h.param(h.year_field), h.param(h.month_field), h.param(h.day_field)
    if year is None:
        bounds = h.bounds()
        if bounds[0] is None or bounds[1] is None:
            return {"show": False}
        first, last = (timezone.localtime(bound) for bound in bounds)
        if first.year != last.year:
            return _years(h, first.year, last.year)
        # All rows in one year (or one month): open it straight away, as Django does.
        year = first.year
        if first.month == last.month:
            month = first.month
    if month is None:
        return _months(h, year)
    if day is None:
        return _days(h, year, month)
    return _day(h, year, month, day)


def _years(h: _Hierarchy, first: int, last: int) -> dict[str, Any]:
    # A probe per year that holds rows, not per calendar year: a run stamped year 1 beside
    # this year's asked 2,000 questions of every page.
    years = [first]
    while years[-1] < last and (following := h.year_after(years[-1])) is not None:
        years.append(following)
    return {
        "show": True,
        "back": None,
        "choices": [{"link": h.link({h.year_field: y}), "title": str(y)} for y in years],
    }


def _months(h: _Hierarchy, year: int) -> dict[str, Any]:
    months = [m for m in range(1, 13) if h.holds(_start(year, m), _end(*_next_month(year, m)))]
    return {
        "show": True,
        "back": {"link": h.link({}), "title": _("All dates")},
        "choices": [
            {
                "link": h.link({h.year_field: year, h.month_field: m}),
                "title": capfirst(date_format(dt.date(year, m, 1), "YEAR_MONTH_FORMAT")),
            }
            for m in months
        ],
    }


def _days(h: _Hierarchy, year: int, month: int) -> dict[str, Any]:
    starts = [_start(year, month, d) for d in range(1, calendar.monthrange(year, month)[1] + 1)]
    ends = [*starts[1:], _end(*_next_month(year, month))]
    days = [start.day for start, end in zip(starts, ends, strict=True) if h.holds(start, end)]
    return {
        "show": True,
        "back": {"link": h.link({h.year_field: year}), "title": str(year)},
        "choices": [
            {
                "link": h.link({h.year_field: year, h.month_field: month, h.day_field: d}),
                "title": capfirst(date_format(dt.date(year, month, d), "MONTH_DAY_FORMAT")),
            }
            for d in days
        ],
    }


def _day(h: _Hierarchy, year: int, month: int, day: int) -> dict[str, Any]:
    try:
        chosen = dt.date(year, month, day)
    except ValueError:
        return {"show": False}
    return {
        "show": True,
        "back": {
            "link": h.link({h.year_field: year, h.month_field: month}),
            "title": capfirst(date_format(chosen, "YEAR_MONTH_FORMAT")),
        },
        "choices": [{"title": capfirst(date_format(chosen, "MONTH_DAY_FORMAT"))}],
    }


# Django 6.1 gave InclusionAdminNode a leading `name` argument (for its error messages).
_NODE_TAKES_NAME = "name" in inspect.signature(InclusionAdminNode.__init__).parameters


@register.tag(name="posixcron_date_hierarchy")
def posixcron_date_hierarchy_tag(parser: Any, token: Any) -> InclusionAdminNode:
    args: tuple[Any, ...] = (parser, token)
    if _NODE_TAKES_NAME:
        args = ("posixcron_date_hierarchy", *args)
    node: Any = InclusionAdminNode  # its stubs follow one Django version's signature
    return cast(
        InclusionAdminNode,
        node(
            *args,
            func=posixcron_date_hierarchy,
            template_name="date_hierarchy.html",
            takes_context=False,
        ),
    )
