"""A django-health-check (4.x) plugin judging the schedulers as ``schedulerstatus`` does.

"Unhealthy when no scheduler is live (the same stale rule as schedulerstatus) or a task is
overdue by more than POLL_INTERVAL (as schedulerstatus --max-lag); failing tasks are reported
but do not make it unhealthy." Install the extra: ``pip install 'django-posixcron[health-check]'``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError

try:
    from health_check.base import HealthCheck
    from health_check.exceptions import ServiceUnavailable
except ImportError as error:  # pragma: no cover - exercised without the extra only
    raise ImproperlyConfigured(
        "django_posixcron.contrib.health_check needs django-health-check 4.x, which is not "
        "installed. Install the extra: pip install 'django-posixcron[health-check]'."
    ) from error

from django_posixcron.conf import poll_interval_or_default
from django_posixcron.db import app_alias, close_outside_transactions, database_now
from django_posixcron.management.commands.schedulerstatus import collect
from django_posixcron.management.common import missing_migrations
from django_posixcron.scheduling.rules import stale_after


@dataclasses.dataclass
class SchedulerHealthCheck(HealthCheck):  # type: ignore[misc]
    """Live schedulers and no overdue task; failing tasks are listed in the status only.

    Args:
        database: the alias to read, instead of the one the routers choose.
    """

    database: str | None = None
    failing: list[str] = dataclasses.field(default_factory=list, repr=False, init=False)

    def run(self) -> None:
        poll_interval = poll_interval_or_default()
        using = None
        try:
            using = app_alias(self.database)
            status = collect(
                database_now(using),
                max_lag=dt.timedelta(seconds=poll_interval),
                stale=stale_after(poll_interval),
                ignore_failing=True,
                using=using,
            )
        except DatabaseError as error:
            # As schedulerstatus says it: a missed `migrate` names the migrations, not an
            # outage.
            missing = None if using is None else missing_migrations(using)
            said = missing or "The scheduler's database is unavailable."
            raise ServiceUnavailable(said) from error
        except ImproperlyConfigured as error:  # an alias settings.DATABASES lacks
            raise ServiceUnavailable(str(error)) from error
        finally:
            # Run in a thread of the view's executor: its connection must not outlive the probe.
            # Called directly (a project's TestCase), not one inside the caller's transaction.
            close_outside_transactions()
        self.failing = [task.name for task in status.failing]
        if status.problems:
            raise ServiceUnavailable("; ".join(status.problems))

    def __repr__(self) -> str:
        # The view shows a check by its repr, and has no other place for a note that is not
        # an error (a warning would make it answer 500): failing tasks are listed there.
        name = f"{type(self).__name__}(database={self.database!r})"
        if not self.failing:
            return name
        return f"{name} failing, not judged unhealthy: {', '.join(self.failing)}"
