"""How the admin shows times, durations, states and statuses; and which clock it reads."""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any, cast

from django.db.models import QuerySet
from django.utils import timezone, translation
from django.utils.formats import date_format, number_format
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince, timeuntil
from django.utils.translation import gettext, gettext_noop, ngettext, pgettext_lazy

from django_posixcron.conf import poll_interval_or_default
from django_posixcron.db import DatabaseNow, app_alias, database_now, has_clock
from django_posixcron.models import FAILURE_STATUSES, RunStatus, SchedulerProcess
from django_posixcron.scheduling.rules import stale_after
from django_posixcron.timing import expression, zone

# In a context of their own: Django's catalogue translates a bare "active" (a user's), which
# showed "Aktiv" beside an untranslated "paused" in a language this app has no catalogue for.
STATE_LABELS = {
    "active": pgettext_lazy("task state", "active"),
    "paused": pgettext_lazy("task state", "paused"),
    "retired": pgettext_lazy("task state", "retired"),
}

# The name of the annotation that carries the database's clock on each row of a list.
ROW_NOW = "posixcron_now"


def poll_interval() -> dt.timedelta:
    return dt.timedelta(seconds=poll_interval_or_default())


def process_stale_after() -> dt.timedelta:
    """Return the heartbeat age past which the scheduler itself counts a process as dead."""
    return stale_after(poll_interval_or_default())


def live_processes(now: dt.datetime) -> QuerySet[SchedulerProcess]:
    """Return the scheduler processes the admin counts as live at `now` (see clock()): not
    stopped, with a heartbeat younger than the age past which the scheduler presumes one
    dead. The task list's header lists them; Run now warns when there are none."""
    return SchedulerProcess.objects.using(app_alias()).live(now, process_stale_after())


def clock() -> dt.datetime:
    """Return the instant the admin judges "overdue", "live" and "in 3 minutes" by.

    The scheduler's clock, so the admin and the loop agree: "whether a task is due is judged
    by the database's clock where the backend has one (PostgreSQL, MariaDB)".
    """
    return database_now(app_alias())


def with_clock(queryset: QuerySet[Any]) -> QuerySet[Any]:
    """Return `queryset` with the database's clock read on each row by the same SELECT.

    A list of 100 tasks then needs no extra query for its relative times, and every row is
    judged by one instant.
    """
    if not has_clock(queryset.db):
        return queryset
    return cast("QuerySet[Any]", queryset.annotate(**{ROW_NOW: DatabaseNow()}))


def row_clock(obj: Any) -> dt.datetime:
    """Return the clock reading that came with `obj` (see with_clock), else this host's."""
    value: dt.datetime | None = getattr(obj, ROW_NOW, None)
    return value if value is not None else timezone.now()


def in_zone(value: dt.datetime, tz: str, *, seconds: bool = False) -> str:
    """Return `value` as wall-clock time in zone `tz`, with the zone's abbreviation; to the
    second when it has seconds, or when `seconds` asks for them whatever they are."""
    try:
        local = timezone.localtime(value, zone(tz))
    except (ValueError, LookupError, OverflowError):
        # A retired task may carry a zone this Python no longer knows, and the last hours of
        # year 9999 have no wall-clock time east of UTC; UTC still says when.
        local = timezone.localtime(value, dt.UTC)
    # Cron occurrences fall on whole minutes; retries and manual runs do not, and "15:15"
    # for a run 20 s after the 15:15 failure it retries would hide what happened.
    to_the_second = seconds or local.second or local.microsecond
    wall = date_format(local, "Y-m-d H:i:s" if to_the_second else "Y-m-d H:i")
    return f"{wall} {zone_label(local)}"


def zone_label(local: dt.datetime) -> str:
    """Return the abbreviation of the offset `local` is at ("CET", "EDT", "+1030").

    Django's "T" format leaves it out in a repeated (fall-back) hour, where it is needed
    most: 01:30 EDT and 01:30 EST are an hour apart. Where both instances of the hour bear
    one abbreviation, the offset tells them apart.
    """
    name = local.tzname() or ""
    other = local.replace(fold=1 - local.fold)
    if other.utcoffset() != local.utcoffset() and other.tzname() == name:
        offset = local.strftime("%z")
        return f"{name} (UTC{offset[:3]}:{offset[3:]})"
    return name


# Phrases around Django's "3 minutes", marked for makemessages: given to gettext() as a
# variable, they were never extracted, and a project's catalogue could not translate them.
IN_DELTA = gettext_noop("in %(delta)s")
DELTA_AGO = gettext_noop("%(delta)s ago")
FOR_ELAPSED = gettext_noop("for %(elapsed)s")


def relative(value: dt.datetime, now: dt.datetime) -> str:
    """Return "in 3 minutes", "5 minutes ago", "in 20 seconds" or "now"."""
    gap = abs(value - now)
    if gap < dt.timedelta(seconds=1):
        return gettext("now")
    if gap < dt.timedelta(minutes=1):
        seconds = int(gap.total_seconds())
        if value > now:
            return ngettext("in %(n)d second", "in %(n)d seconds", seconds) % {"n": seconds}
        return ngettext("%(n)d second ago", "%(n)d seconds ago", seconds) % {"n": seconds}
    if value > now:
        with _language_of(IN_DELTA):
            return gettext(IN_DELTA) % {"delta": timeuntil(value, now, depth=1)}
    with _language_of(DELTA_AGO):
        return gettext(DELTA_AGO) % {"delta": timesince(value, now, depth=1)}


def elapsed(since: dt.datetime, now: dt.datetime) -> str:
    """Return how long a run has been running: "for 20 seconds", "for 3 minutes"."""
    if now - since < dt.timedelta(minutes=1):
        seconds = max(0, int((now - since).total_seconds()))
        return ngettext("for %(n)d second", "for %(n)d seconds", seconds) % {"n": seconds}
    with _language_of(FOR_ELAPSED):
        return gettext(FOR_ELAPSED) % {"elapsed": timesince(since, now)}


def _language_of(phrase: str) -> translation.override | contextlib.nullcontext[None]:
    """Render Django's "3 minutes" in the language our phrase around it is shown in.

    Django translates timesince() in every language it ships; this app ships no catalogues
    (a project can add its own through LOCALE_PATHS). Without one for the active language,
    "%(delta)s ago" stays English around a translated delta: "3 Minuten ago". The whole phrase
    is then English, as the rest of the app's pages are.
    """
    language = translation.get_language()
    if language is None or language.startswith("en") or gettext(phrase) != phrase:
        return contextlib.nullcontext()
    return translation.override("en")


def duration(delta: dt.timedelta | None) -> str:
    """Return a short human duration: "0.25 s", "42 s", "3 min 5 s", "2 h 4 min"."""
    if delta is None:
        return ""
    seconds = delta.total_seconds()
    if seconds < 10:
        # In the page's language's format: "0,47 s" in German.
        return gettext("%(seconds)s s") % {"seconds": number_format(seconds, 2)}
    whole = int(seconds)
    if whole < 60:
        return gettext("%(seconds)d s") % {"seconds": whole}
    if whole < 3600:
        return gettext("%(minutes)d min %(seconds)d s") % {
            "minutes": whole // 60,
            "seconds": whole % 60,
        }
    return gettext("%(hours)d h %(minutes)d min") % {
        "hours": whole // 3600,
        "minutes": whole % 3600 // 60,
    }


def when(value: dt.datetime, tz: str, now: dt.datetime) -> SafeString:
    """Return the wall-clock time in zone `tz` above its relative form ("in 3 minutes")."""
    return format_html(
        '<span class="posixcron-time">{}</span><br><span class="posixcron-muted">{}</span>',
        in_zone(value, tz),
        relative(value, now),
    )


# An expression up to this long stays on one line, as written.
SCHEDULE_ON_ONE_LINE = 20


def schedule_html(schedule: str) -> SafeString:
    """Return a cron expression for a page: on one line (the code element does not wrap), or,
    when longer, one that breaks only after a comma of a list, never between its fields.

    "30 2 * *" over "*" would read as an expression of fewer fields; a long list
    ("0,5,10,...,55 * * * *") on one line widened the task list past the window.
    """
    if len(schedule) <= SCHEDULE_ON_ONE_LINE:
        return format_html('<code class="posixcron-schedule">{}</code>', schedule)
    fields = (
        ",<wbr>".join(escape(part) for part in field.split(",")) for field in schedule.split()
    )
    return format_html(
        '<code class="posixcron-schedule posixcron-schedule-long">{}</code>',
        mark_safe("\N{NO-BREAK SPACE}".join(fields)),
    )


def badge(kind: str, label: str) -> SafeString:
    return format_html('<span class="posixcron-badge posixcron-{}">{}</span>', kind, label)


def muted(text: str) -> SafeString:
    return format_html('<span class="posixcron-muted">{}</span>', text)


def dash() -> SafeString:
    return format_html("{}", "—")


def status_badge(status: str) -> SafeString:
    """Return the coloured badge for a run status."""
    if not status:
        return dash()
    kind = "failure" if status in FAILURE_STATUSES else status
    return badge(kind, str(RunStatus(status).label) if status in RunStatus.values else status)


def runs_of_history(count: int) -> str:
    """Return "3 runs of history": how a deletion names the runs it takes."""
    return ngettext("%(count)d run of history", "%(count)d runs of history", count) % {
        "count": count
    }


def describe_schedule(schedule: str) -> str:
    """Return the schedule's plain-English description, or why there is none."""
    try:
        return expression(schedule).describe()
    except ValueError as exc:
        # Only a retired task can hold a schedule the engine now rejects: checks refuse
        # declared ones. The page must still render.
        return gettext("Invalid schedule: %(error)s") % {"error": exc}
