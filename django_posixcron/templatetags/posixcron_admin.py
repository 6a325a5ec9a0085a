"""The run list's date hierarchy, drawn from index probes instead of a DISTINCT over history.

Django's own `date_hierarchy` tag lists the years, months or days that hold rows with
`SELECT DISTINCT date_trunc(...)` over every selected row: seconds on a million runs. Here
each candidate period between the first and the last run is asked `EXISTS` over a range of
`scheduled_for`, which the index answers at once: at most a few years, 12 months or 31 days.
"""

from __future__ import annotations

import datetime as dt
import inspect
from typing import Any, cast

from django import template
from django.contrib.admin.templatetags.base import InclusionAdminNode
from django.db.models import Max, Min
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.text import capfirst
from django.utils.translation import gettext as _

register = template.Library()


def _start(year: int, month: int = 1, day: int = 1) -> dt.datetime:
    # Periods are read in the current time zone, as Django's __year/__month/__day lookups are.
    return timezone.make_aware(dt.datetime(year, month, day))


def _next_month(year: int, month: int) -> tuple[int, int]:
    return (year + 1, 1) if month == 12 else (year, month + 1)


def _int(value: Any) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def posixcron_date_hierarchy(cl: Any) -> dict[str, Any]:
    """Return the context of admin/date_hierarchy.html for a change list."""
    field = cl.date_hierarchy
    year_field, month_field, day_field = (f"{field}__{part}" for part in ("year", "month", "day"))
    year = _int(cl.params.get(year_field))
    month = _int(cl.params.get(month_field))
    day = _int(cl.params.get(day_field))
    queryset = cl.queryset.order_by()

    def link(filters: dict[str, Any]) -> str:
        return str(cl.get_query_string(filters, [f"{field}__"]))

    def holds(start: dt.datetime, end: dt.datetime) -> bool:
        return bool(queryset.filter(**{f"{field}__gte": start, f"{field}__lt": end}).exists())

    if year is None:
        bounds = queryset.aggregate(first=Min(field), last=Max(field))
        if bounds["first"] is None or bounds["last"] is None:
            return {"show": False}
        first, last = (timezone.localtime(bounds[key]) for key in ("first", "last"))
        if first.year != last.year:
            years = [y for y in range(first.year, last.year + 1) if holds(_start(y), _start(y + 1))]
            return {
                "show": True,
                "back": None,
                "choices": [{"link": link({year_field: y}), "title": str(y)} for y in years],
            }
        year = first.year
        if first.month == last.month:
            month = first.month

    if month is None:
        months = [m for m in range(1, 13) if holds(_start(year, m), _start(*_next_month(year, m)))]
        return {
            "show": True,
            "back": {"link": link({}), "title": _("All dates")},
            "choices": [
                {
                    "link": link({year_field: year, month_field: m}),
                    "title": capfirst(date_format(dt.date(year, m, 1), "YEAR_MONTH_FORMAT")),
                }
                for m in months
            ],
        }

    if day is None:
        end = _start(*_next_month(year, month))
        days = []
        current = _start(year, month)
        while current < end:
            following = _start(*(current.date() + dt.timedelta(days=1)).timetuple()[:3])
            if holds(current, following):
                days.append(current.day)
            current = following
        return {
            "show": True,
            "back": {"link": link({year_field: year}), "title": str(year)},
            "choices": [
                {
                    "link": link({year_field: year, month_field: month, day_field: d}),
                    "title": capfirst(date_format(dt.date(year, month, d), "MONTH_DAY_FORMAT")),
                }
                for d in days
            ],
        }

    try:
        chosen = dt.date(year, month, day)
    except ValueError:
        return {"show": False}
    return {
        "show": True,
        "back": {
            "link": link({year_field: year, month_field: month}),
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
