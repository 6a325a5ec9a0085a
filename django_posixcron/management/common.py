"""What both commands share: argument types, the --database option, the database checks."""

from __future__ import annotations

import argparse
from typing import Any

import django
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, router

from django_posixcron import __version__
from django_posixcron.conf import MAX_POLL_INTERVAL, MIN_POLL_INTERVAL, poll_interval_fault
from django_posixcron.db import (
    app_alias,
    has_summer_time,
    migrate_command,
    missing_table,
    mysql_stored_zone,
    one_line,
    outage,
    read_only,
)
from django_posixcron.log import get_logger

logger = get_logger("django_posixcron.scheduler")


class Command(BaseCommand):
    """The base of the package's commands."""

    def get_version(self) -> str:
        # --version names this package's version, not only Django's.
        return f"django-posixcron {__version__} (Django {django.get_version()})"


def command_alias(override: str | None) -> str:
    """app_alias() for a command: an alias settings.DATABASES lacks is a one-line error."""
    try:
        return app_alias(override)
    except ImproperlyConfigured as exc:
        raise CommandError(str(exc)) from None


def refused(
    away: str, exc: BaseException, what: str = "the start-up", using: str = DEFAULT_DB_ALIAS
) -> str:
    """The one line a command stops with on a database error: "The database `away`" for an
    outage (worth trying again as it is), "The database refused `what`" for a refusal that
    would fail again (a role without the privileges, a file that is not an SQLite database).
    A database other than "default" is named: a project with two says which one."""
    database = "The database" if using == DEFAULT_DB_ALIAS else f"The database {using!r}"
    if missing_table(exc):
        return (
            f"{database} refused {what}: {one_line(exc)}: this app's tables are missing "
            f"(a database replaced or emptied?): run `{migrate_command(using)}`"
        )
    if outage(exc) and not read_only(exc):
        return f"{database} {away}: {one_line(exc)}"
    return f"{database} refused {what}: {one_line(exc)}"


def add_database_option(parser: CommandParser) -> None:
    """Add --database: "runscheduler --database ALIAS and schedulerstatus --database ALIAS
    override" the alias the routers choose."""
    parser.add_argument(
        "--database",
        default=None,
        metavar="ALIAS",
        help="The database alias of the app's tables (default: the one DATABASE_ROUTERS "
        "choose for them, else 'default').",
    )


def _number(value: str, convert: type[float] | type[int], expected: str) -> Any:
    try:
        return convert(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value!r}") from None


def poll_interval(value: str) -> float:
    """Parse a number of seconds within the bounds of POSIXCRON['POLL_INTERVAL']."""
    number: float = _number(value, float, "a number of seconds")
    # The same bounds as the setting (posixcron.E021), for the same reasons (conf.py).
    fault = poll_interval_fault(number)
    if fault == "not positive":
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value!r}")
    if fault == "too large":
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_POLL_INTERVAL:g} seconds (one day), got {value!r}"
        )
    if fault == "too small":
        raise argparse.ArgumentTypeError(
            f"must be at least {MIN_POLL_INTERVAL:g} seconds, got {value!r}"
        )
    return number


def non_negative_float(value: str) -> float:
    """Parse a number of seconds, zero allowed."""
    number: float = _number(value, float, "a number of seconds")
    if not number >= 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(
            f"must be a finite number of seconds, zero or more, got {value!r}"
        )
    return number


# Ten years: a lag longer than that says nothing, and one of 2,000 years would reach back past
# the first instant a datetime can hold.
MAX_LAG = 10 * 365 * 86400


def max_lag(value: str) -> float:
    """Parse --max-lag: zero or more seconds, at most ten years."""
    number = non_negative_float(value)
    if number > MAX_LAG:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_LAG:d} seconds (ten years), got {value!r}"
        )
    return number


def positive_int(value: str) -> int:
    """Parse a whole number of at least 1."""
    number: int = _number(value, int, "a whole number")
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value!r}")
    return number


def check_database_support(using: str) -> str:
    """Refuse databases without SKIP LOCKED; return a description of the database."""
    connection = connections[using]
    vendor = connection.vendor
    db: Any = connection  # the vendor's attributes (mysql_version, pg_version) are not typed
    if vendor == "mysql":
        connection.ensure_connection()
        check_stored_zone(using)
        version = ".".join(str(part) for part in db.mysql_version)
        if db.mysql_is_mariadb:
            if db.mysql_version < (10, 6):
                raise CommandError(
                    f"MariaDB {version} is not supported: runscheduler needs SELECT ... FOR "
                    "UPDATE SKIP LOCKED, which MariaDB has from 10.6. Upgrade the server."
                )
            return f"MariaDB {version}"
        if db.mysql_version < (8, 0, 1):
            raise CommandError(
                f"MySQL {version} is not supported: runscheduler needs SELECT ... FOR UPDATE "
                "SKIP LOCKED, which MySQL has from 8.0.1. Upgrade the server."
            )
        return f"MySQL {version}"
    if vendor == "postgresql":
        connection.ensure_connection()
        major, minor = divmod(db.pg_version, 10000)
        return f"PostgreSQL {major}.{minor}"
    if vendor == "sqlite":
        import sqlite3

        return f"SQLite {sqlite3.sqlite_version} (one host only)"
    return vendor


def check_stored_zone(using: str) -> None:
    """Refuse a MySQL/MariaDB connection with a TIME_ZONE the server cannot convert to.

    With DATABASES[alias]["TIME_ZONE"], Django stores datetimes as that zone's wall-clock
    times, and the database's clock is read in it with CONVERT_TZ(), which needs the server's
    time zone tables: without them it gives NULL, and no task would ever be due.
    """
    connection = connections[using]
    zone = mysql_stored_zone(connection)
    if zone is None:
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT CONVERT_TZ(UTC_TIMESTAMP(), '+00:00', %s)", [zone])
        (converted,) = cursor.fetchone()
    if converted is None:
        raise CommandError(
            f"DATABASES[{using!r}]['TIME_ZONE'] is {zone!r}, and the database server has no "
            "time zone tables to convert its clock to that zone (CONVERT_TZ() gives NULL), "
            "so no due time could be judged. Load them (mariadb-tzinfo-to-sql "
            "/usr/share/zoneinfo | mariadb -u root mysql, or mysql_tzinfo_to_sql on MySQL), "
            "or remove TIME_ZONE from the database's settings."
        )
    if has_summer_time(zone):
        # Django stores this connection's datetimes as wall-clock times without their
        # offset: in the hour the clocks go back each wall-clock time names two instants,
        # and reads back as the first. A run scheduled in the second is taken for one
        # already made, and the loop goes on finding it due until the hour has passed.
        logger.warning(
            "DATABASES[%r]['TIME_ZONE'] is %r, which has summer "
            "time: MySQL and MariaDB store this connection's datetimes as its wall-clock "
            "times, which repeat in the hour the clocks go back, so occurrences due in that "
            "hour can be missed. Route django_posixcron to a database alias without TIME_ZONE "
            "(its tables hold UTC then), or give it a zone without summer time.",
            using,
            zone,
            extra={"action": "database_zone_summer_time", "zone": zone},
        )


def check_migrated(using: str) -> None:
    """Refuse a database that lacks this app's migrations, naming the command to run."""
    from django.db.migrations.executor import MigrationExecutor

    connection = connections[using]
    executor = MigrationExecutor(connection)
    targets = [key for key in executor.loader.graph.leaf_nodes() if key[0] == "django_posixcron"]
    missing = [migration.name for migration, _ in executor.migration_plan(targets)]
    if missing and _made_without_migrations(connection, executor):
        return
    if missing:
        raise CommandError(
            f"The database {using!r} lacks django_posixcron migrations ({', '.join(missing)}): "
            f"run `{migrate_command(using)}` first."
        )
    _refuse_routed_away(connection)


def _refuse_routed_away(connection: Any) -> None:
    """Refuse a database whose routers keep this app off it: `migrate` recorded the app's
    migrations there without making its tables, and every read then failed with "no such
    table", taken for an outage (a scheduler on SQLite retried it forever)."""
    from django_posixcron.models import Task

    if router.allow_migrate_model(connection.alias, Task):
        return
    if Task._meta.db_table in connection.introspection.table_names():
        return  # made some other way (another alias of the same database migrated them)
    raise CommandError(
        f"The routers keep django_posixcron off the database {connection.alias!r} (their "
        "allow_migrate() refuses it there), so `migrate` recorded its migrations without "
        "making its tables. Route the app's models (db_for_read and db_for_write) to the "
        "database where allow_migrate() accepts them and migrate that one (`manage.py "
        "migrate --database ALIAS`), or name it with --database ALIAS."
    )


def missing_migrations(using: str) -> str | None:
    """Say which of this app's migrations the database lacks, and the command to run; None
    when it lacks none, or cannot even say (the error that led here then says more)."""
    try:
        check_migrated(using)
    except CommandError as missing:
        return str(missing)
    except DatabaseError:
        pass
    return None


def read_failure(using: str, exc: BaseException, what: str = "the query") -> str:
    """The one line a read of the app's tables that failed with `exc` is reported with.

    A missing table is a missed deploy step, not an outage: then the migrations to apply
    and the command to run. Else the database away (`database unavailable: ...`), or
    refusing what was asked (a role without the privileges: `database refused what: ...`).
    """
    # A database that could not even be reached is not asked which migrations it lacks: a
    # second connection would wait out its timeout again (a probe's own ran out first).
    reached = connections[using].connection is not None
    missing = missing_migrations(using) if reached or not outage(exc) else None
    if missing is not None:
        return missing
    said = "unavailable" if outage(exc) else f"refused {what}"
    return f"database {said}: {one_line(exc)}"


def _made_without_migrations(connection: Any, executor: Any) -> bool:
    """Return whether this is a test database Django made from the models, not migrations.

    ``DATABASES[...]["TEST"]["MIGRATE"] = False`` makes the test runner create every table
    straight from the models and record no migration: runscheduler called from such a
    project's tests was refused with "lacks django_posixcron migrations: run `manage.py
    migrate` first", advice that changes nothing there. Such a database records none of this
    app's migrations and has its tables. One that records some of them (a project's real
    database, whose settings may carry that TEST key too) is partly migrated, and refused.
    """
    from django_posixcron.models import Task

    if (connection.settings_dict.get("TEST") or {}).get("MIGRATE", True):
        return False
    if any(app == "django_posixcron" for app, _name in executor.loader.applied_migrations):
        return False
    return Task._meta.db_table in connection.introspection.table_names()
