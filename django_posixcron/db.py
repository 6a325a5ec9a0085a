"""The database the app's rows live on, and the one clock due-ness is judged by.

"Every query of the app, in the scheduler, the admin and the commands, goes to the alias the
project's DATABASE_ROUTERS choose for the app's models (`default` without routers);
`runscheduler --database ALIAS` and `schedulerstatus --database ALIAS` override it."
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import os
import re
import threading
import weakref
import zoneinfo
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    InterfaceError,
    OperationalError,
    connections,
    router,
)
from django.db.models import DateTimeField, Exists, Func, Subquery
from django.utils import timezone as dj_timezone

UTC = dt.UTC


# PostgreSQL's lock_not_available (lock_timeout); MySQL's ER_LOCK_WAIT_TIMEOUT.
_PG_LOCK_NOT_AVAILABLE = "55P03"
_MYSQL_LOCK_WAIT_TIMEOUT = 1205


# MySQL and MariaDB errors that refuse a value sent (mysqlclient raises every server error it
# does not classify as OperationalError): an incorrect string for the column's character set
# (an emoji on a utf8mb3 connection or table), an invalid character, a mix of collations, an
# incorrect date, invalid JSON, a failed CHECK constraint. Sending the same value again fails
# the same way: they are not outages.
_MYSQL_VALUE_REFUSED = frozenset({1267, 1270, 1271, 1292, 1300, 1366, 3140, 4025})


class LockNotGranted(OperationalError):
    """A lock the app waits for (the reconcile lock) was not granted in time."""


def lock_not_granted(exc: BaseException) -> bool:
    """Whether `exc` is the database saying a lock was not granted in time: the database
    answered, and another process held what this one waited for."""
    if isinstance(exc, LockNotGranted):
        return True
    if not isinstance(exc, OperationalError):
        return False
    # Django re-raises the driver's error with its arguments, the driver's as its cause.
    if getattr(exc.__cause__, "sqlstate", None) == _PG_LOCK_NOT_AVAILABLE:
        return True
    if _sqlite_code(exc) in _SQLITE_LOCKED:
        # "database is locked": another connection held the file's write lock for longer
        # than the connection's busy timeout (`timeout`, 5 s by default).
        return True
    return bool(exc.args) and exc.args[0] == _MYSQL_LOCK_WAIT_TIMEOUT


# SQLite's primary result codes: SQLITE_BUSY and SQLITE_LOCKED; SQLITE_READONLY.
_SQLITE_LOCKED = frozenset({5, 6})
_SQLITE_READONLY = 8


def _sqlite_code(exc: BaseException) -> int | None:
    """Return the primary result code of the sqlite3 error behind `exc`, if it is one."""
    code = getattr(exc.__cause__, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


# PostgreSQL's serialization_failure and deadlock_detected; MySQL's ER_LOCK_DEADLOCK.
_PG_CONFLICTS = frozenset({"40001", "40P01"})
_MYSQL_DEADLOCK = 1213


def conflict(exc: BaseException) -> bool:
    """Whether `exc` is the database turning a transaction away for a concurrent one (a
    deadlock, a serialization failure under SERIALIZABLE, a lock not granted in time): it
    answered, and the same work is worth trying again at once."""
    if lock_not_granted(exc):
        return True
    if not isinstance(exc, DatabaseError):
        return False
    if getattr(exc.__cause__, "sqlstate", None) in _PG_CONFLICTS:
        return True
    return bool(exc.args) and exc.args[0] == _MYSQL_DEADLOCK


def outage(exc: BaseException) -> bool:
    """Whether `exc` says the database is away or failing, so that the same work is worth
    trying again later, and not that it refused what was sent (which would fail forever)."""
    if pg_read_only(exc):
        return True
    if not isinstance(exc, (OperationalError, InterfaceError)):
        return False
    return not (exc.args and exc.args[0] in _MYSQL_VALUE_REFUSED)


# MySQL's ER_OPTION_PREVENTS_STATEMENT (read_only, among other options) and ER_READ_ONLY_MODE.
_MYSQL_READ_ONLY = frozenset({1290, 1836})


def database_read_only(exc: BaseException) -> bool:
    """Whether `exc` says the database refuses writes for now (read-only), on PostgreSQL or
    MariaDB/MySQL: waited out as an outage, and said as what it is."""
    if pg_read_only(exc):
        return True
    return (
        isinstance(exc, OperationalError)
        and bool(exc.args)
        and exc.args[0] in _MYSQL_READ_ONLY
        and "read" in str(exc).lower()
    )


def away(exc: BaseException) -> bool:
    """Whether `exc` is one the scheduler waits out where it writes: the connection's errors,
    and PostgreSQL's read-only database (pg_read_only())."""
    return isinstance(exc, (OperationalError, InterfaceError)) or pg_read_only(exc)


# PostgreSQL's read_only_sql_transaction.
_PG_READ_ONLY = "25006"


def pg_read_only(exc: BaseException) -> bool:
    """Whether `exc` is PostgreSQL refusing a write because the database is read-only: a hot
    standby, a primary a failover demoted, `default_transaction_read_only` set. The state
    of the database, not a refusal of what was sent: waited out, as MariaDB's read-only
    error (an OperationalError there). psycopg raises it as an InternalError, which the
    outcome writes took for a refusal: a finished run's outcome was dropped, the run left
    `running` for the life of the process, and every later run of an `overlap: skip` task
    skipped."""
    return isinstance(exc, DatabaseError) and (
        getattr(exc.__cause__, "sqlstate", None) == _PG_READ_ONLY
    )


def read_only(exc: BaseException) -> bool:
    """Whether `exc` is SQLite's "attempt to write a readonly database": at start-up, a file
    or directory this user cannot write, which waiting does not change. While running it may
    be a moment (a file replaced, a filesystem remounted): an outage then, waited out."""
    return _sqlite_code(exc) == _SQLITE_READONLY


# PostgreSQL's undefined_table; MySQL's ER_NO_SUCH_TABLE.
_PG_UNDEFINED_TABLE = "42P01"
_MYSQL_NO_SUCH_TABLE = 1146


def missing_table(exc: BaseException) -> bool:
    """Whether `exc` says a table the query names does not exist: while running, a database
    replaced, emptied or restored without this app's tables (SQLite creates an empty file
    where one was deleted), which `manage.py migrate` is the answer to."""
    if not isinstance(exc, DatabaseError):
        return False
    if getattr(exc.__cause__, "sqlstate", None) == _PG_UNDEFINED_TABLE:
        return True
    if exc.args and exc.args[0] == _MYSQL_NO_SUCH_TABLE:
        return True
    return isinstance(exc, OperationalError) and str(exc).startswith("no such table: ")


def migrate_command(using: str) -> str:
    """The command that migrates `using`: `migrate` alone migrates "default", and routers
    that keep the app elsewhere need the alias named."""
    if using == DEFAULT_DB_ALIAS:
        return "manage.py migrate"
    return f"manage.py migrate --database {using}"


def one_line(exc: BaseException) -> str:
    """The error's text on one line: the driver's own runs over several ("Connection refused"
    then "Is the server running..."), and a probe or a log reads one line per error."""
    lines = [" ".join(line.split()) for line in str(exc).splitlines()]
    return "; ".join(line for line in lines if line) or type(exc).__name__


def app_alias(override: str | None = None) -> str:
    """Return the alias the app's rows live on: `override`, else the routers' choice.

    An alias settings.DATABASES does not define is an ImproperlyConfigured that names it and
    where it came from, not Django's ConnectionDoesNotExist at the first query.

    The routers are asked for writes to Task; the app's three models live together (a run
    references its task and its process), so one answer holds for all of them.
    """
    from django_posixcron.models import Task

    if override:
        alias = override
    else:
        try:
            alias = router.db_for_write(Task) or DEFAULT_DB_ALIAS
        except Exception as exc:
            # A router that raises, or a DATABASE_ROUTERS entry that does not import (the
            # routers are imported at their first use, often this one): said in one line,
            # not as a traceback that seems to blame this app.
            raise ImproperlyConfigured(
                f"DATABASE_ROUTERS raised {type(exc).__name__}: {exc} choosing the database "
                "of django_posixcron's models."
            ) from exc
    if alias not in connections.settings:
        defined = ", ".join(repr(name) for name in connections.settings)
        if override:
            problem = f"The database alias {alias!r} is not in settings.DATABASES"
        else:
            problem = (
                f"DATABASE_ROUTERS send django_posixcron's models to the database alias "
                f"{alias!r}, which settings.DATABASES does not define"
            )
        raise ImproperlyConfigured(f"{problem} (it defines {defined}).")
    return alias


class _ForcedIndex:
    """A subquery of the runs that names, on MySQL and MariaDB, the index to answer it with
    (INDEX). Elsewhere the planners choose well (PostgreSQL has partial indexes besides)."""

    INDEX: str

    def as_mysql(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        expression: Any = self  # a Subquery or an Exists (see the subclasses)
        sql, params = expression.as_sql(compiler, connection, **extra_context)
        qn = connection.ops.quote_name
        model = expression.query.model
        assert model is not None
        return force_index(sql, qn(model._meta.db_table), qn(self.INDEX)), params


def force_index(sql: str, table: str, index: str) -> str:
    """Return `sql` with `FORCE INDEX (index)` after its first `FROM table` and the alias.

    The alias a subquery's tables get (U0) is quoted by Django 6.1 and not before; the hint
    goes between it and the clause that follows. Another spelling: `sql` as it is, never a
    statement the server refuses.
    """
    return _after_table(sql, table, f"FORCE INDEX ({index})", "`")


def indexed_by(sql: str, table: str, index: str) -> str:
    """Return `sql` with SQLite's `INDEXED BY index` after its first `FROM table` and the
    alias, as force_index() places MySQL's hint."""
    return _after_table(sql, table, f"INDEXED BY {index}", '"')


def _after_table(sql: str, table: str, clause: str, quote: str) -> str:
    q = re.escape(quote)
    alias = rf"(?: (?:AS )?(?:[A-Z]\d+\b|{q}[A-Z]\d+{q}))?"
    follows = r"(?= WHERE | INNER | LEFT | ORDER | GROUP | LIMIT |\)|$)"
    found = re.search(rf"FROM {re.escape(table)}{alias}{follows}", sql)
    if found is None:
        return sql
    return f"{sql[: found.end()]} {clause}{sql[found.end() :]}"


class ByTaskIndex(_ForcedIndex, Subquery):
    """A subquery of one task's runs in the order of the (task, -scheduled_for) index: its
    latest runs, read from the index's end however long the history is.

    MariaDB may answer it through the unique (task, trigger, scheduled_for) index instead,
    then sort all of the task's runs for each task: with 1.5 million runs a metrics scrape
    took 80-90 s, and whether the plan holds changes with the sampled index statistics
    (measured).
    """

    INDEX = "posixcron_run_task_sched"


class UnfinishedExists(_ForcedIndex, Exists):
    """Whether a task has an unfinished (queued or running) run, through the index of the
    runs by status, task and process (migration 0011 on MariaDB and MySQL): two short ranges,
    whatever the history and however many runs other tasks have queued.

    With three unfinished runs or more in the table, MariaDB answered it through a task's
    index and read each claimed task's whole history, under the claim's row locks (468,000
    index entries for five busy tasks at 1.5 million runs). PostgreSQL has a partial index
    of the unfinished runs by task (migration 0006).
    """

    INDEX = "posixcron_run_status_proc"


class DatabaseNow(Func):
    """The database server's current instant, as UTC: the clock due-ness is judged by."""

    template = "CURRENT_TIMESTAMP"
    output_field = DateTimeField()

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # Not CURRENT_TIMESTAMP: on PostgreSQL that is the start of the transaction.
        return self.as_sql(compiler, connection, template="STATEMENT_TIMESTAMP()", **extra)

    def as_mysql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # Not CURRENT_TIMESTAMP(6): that follows the session time zone, which Django leaves as
        # the server's; UTC_TIMESTAMP is UTC whatever the server is configured with.
        sql, params = self.as_sql(compiler, connection, template="UTC_TIMESTAMP(6)", **extra)
        zone = mysql_stored_zone(connection)
        if zone is None:
            return sql, params
        # Django stores and reads this connection's datetimes as wall-clock times of its
        # DATABASES TIME_ZONE: the clock must be in that zone too, or every due time is
        # judged hours off (the server's time zone tables are needed: checked at start-up).
        return f"CONVERT_TZ({sql}, '+00:00', %s)", (*params, zone)


def mysql_stored_zone(connection: Any) -> str | None:
    """Return the zone a MySQL/MariaDB connection stores datetimes in, when not UTC."""
    if not settings.USE_TZ or connection.vendor != "mysql":
        return None
    zone: str = connection.timezone_name
    return None if is_utc(zone) else zone


# Instants a zone's offset is read at to tell UTC under another name ("Etc/UTC", "GMT") from
# a zone that only sometimes sits at +00:00 (Europe/London in winter).
_ZONE_PROBES = tuple(
    dt.datetime(year, month, 1, tzinfo=UTC) for year in (1980, 2000, 2026) for month in (1, 7)
)


@functools.lru_cache(maxsize=32)
def is_utc(zone: str) -> bool:
    """Return True for UTC and its aliases: a zone at +00:00 with no summer time."""
    if zone == "UTC":
        return True
    offsets = _zone_offsets(zone)
    return offsets is not None and offsets == {dt.timedelta(0)}


@functools.lru_cache(maxsize=32)
def has_summer_time(zone: str) -> bool:
    """Return True when `zone` changed its offset within the last years or plans to: its
    wall-clock times repeat once a year, in the hour the clocks go back."""
    offsets = _zone_offsets(zone, tuple(_recent_probes()))
    return offsets is not None and len(offsets) > 1


def _recent_probes() -> list[dt.datetime]:
    """Every week from a year ago to a year ahead (a month's change, Morocco's in Ramadan,
    falls between two month starts)."""
    start = dt.datetime.now(UTC) - dt.timedelta(days=366)
    return [start + dt.timedelta(weeks=week) for week in range(106)]


def _zone_offsets(
    zone: str, probes: tuple[dt.datetime, ...] = _ZONE_PROBES
) -> set[dt.timedelta | None] | None:
    try:
        info = zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None
    return {probe.astimezone(info).utcoffset() for probe in probes}


_CLOCK_SQL = {
    "postgresql": "SELECT STATEMENT_TIMESTAMP()",
    "mysql": "SELECT UTC_TIMESTAMP(6)",
}


def has_clock(using: str) -> bool:
    """Return whether due-ness is judged by the database's clock (SQLite has none)."""
    return connections[using].vendor in _CLOCK_SQL


def database_now(using: str) -> dt.datetime:
    """Return the database's current UTC instant; this host's clock where it has none.

    "Whether a task is due is judged by the database's clock where the backend has one
    (PostgreSQL, MariaDB), so a host whose clock runs minutes ahead never fires early."
    """
    connection = connections[using]
    sql = _CLOCK_SQL.get(connection.vendor)
    if sql is None:
        return dj_timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(sql)
        value: dt.datetime = cursor.fetchone()[0]
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


# The raw connections fast_timestamps() has looked at (and changed, where it could).
_LOOKED_AT: weakref.WeakSet[Any] = weakref.WeakSet()


def fast_timestamps(connection: Any) -> None:
    """Read ``timestamptz`` values on this connection with psycopg's C loader.

    Django's loader is a Python subclass of psycopg's pure-Python one, whatever psycopg's
    implementation: about a tenth of the scheduler loop's time in a burst went to parsing
    timestamps. On a connection whose session time zone is UTC and whose results Django
    gives in UTC (``USE_TZ = True`` and no ``TIME_ZONE`` on the database, the usual case),
    psycopg's C loader gives the very same values. Elsewhere (another zone, psycopg 2, the
    pure-Python psycopg) nothing changes. Only this connection's loaders change.
    """
    raw = connection.connection
    if raw is None or connection.vendor != "postgresql" or raw in _LOOKED_AT:
        return
    _LOOKED_AT.add(raw)
    adapters = getattr(raw, "adapters", None)  # psycopg 3 only
    if adapters is None or connection.timezone is not UTC:
        return
    loader = _utc_loader()
    if loader is not None and raw.info.parameter_status("TimeZone") == "UTC":
        adapters.register_loader("timestamptz", loader)


@functools.cache
def _utc_loader() -> type[Any] | None:
    """A loader of ``timestamptz`` that psycopg's C implementation does the work of."""
    import psycopg
    from psycopg.adapt import Loader
    from psycopg.pq import Format

    native = psycopg.adapters.get_loader(psycopg.postgres.types["timestamptz"].oid, Format.TEXT)
    if native is None or psycopg.pq.__impl__ == "python":
        return None
    c_loader: type[psycopg.abc.Loader] = native

    class UTCLoader(Loader):
        # Django compares this with its own zone when it opens a cursor.
        timezone = UTC

        def __init__(self, oid: int, context: Any = None) -> None:
            super().__init__(oid, context)
            self.native = c_loader(oid, context)

        def load(self, data: Any) -> Any:
            return self.native.load(data)

    return UTCLoader


# Timeouts a scheduler's connections get unless the project's OPTIONS set them: a database
# that stops answering without closing the connection (a partition, a failover that moves the
# address) is then an error the loop logs and backs off from, not a silent wait of about
# 15 minutes until the kernel gives up on the socket. libpq's parameters for PostgreSQL;
# mysqlclient's for MariaDB/MySQL (no read_timeout: it would cut the task code's own long
# queries too, since they share these settings).
CONNECTION_TIMEOUTS = {
    "postgresql": {
        "connect_timeout": 10,
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "tcp_user_timeout": 30_000,  # ms a sent statement may stay unacknowledged
    },
    "mysql": {"connect_timeout": 10, "write_timeout": 30},
}


def with_connection_timeouts(using: str) -> dict[str, Any]:
    """Give `using`'s connections the timeouts above where its OPTIONS set none; return the
    ones added. Connections opened from now on in this process use them (they share the
    alias's settings); the one open on this thread, if any, is closed to pick them up,
    unless it is inside a transaction (a command called from code that holds one)."""
    connection = connections[using]
    defaults = CONNECTION_TIMEOUTS.get(connection.vendor, {})
    options = connection.settings_dict.setdefault("OPTIONS", {})
    added = {key: value for key, value in defaults.items() if key not in options}
    if added:
        options.update(added)
        if not connection.in_atomic_block:
            connection.close()
    return added


def own_connection(using: str) -> Callable[[], None]:
    """Give this thread a connection to `using` outside Django's connection pool, if the
    alias has one (PostgreSQL's ``OPTIONS["pool"]``); return what gives the thread its
    pooled connection back (a command called from code: its thread goes on).

    For the scheduler's own threads (the loop, the heartbeat, the shutdown's): task code on
    the worker threads takes connections from the pool, and a pool no bigger than
    CONCURRENCY (its default size is 4, as CONCURRENCY's) is then all held by tasks, so the
    heartbeat waited for one until its process was presumed dead and its runs run again
    elsewhere, and the loop and the shutdown's writes waited too. Nor does a session setting
    of the scheduler's (the idle-transaction bound) reach a pooled connection that task code
    takes next. Only this thread's connection changes; it opens on first use, and stays open
    between ticks (checked before reuse) where the pool required CONN_MAX_AGE = 0.

    Inside a transaction of the caller's (a command called from code in ``atomic()``)
    nothing changes: the transaction must end on the connection it began on.
    """
    pooled = connections[using]
    options = pooled.settings_dict.get("OPTIONS") or {}
    if not options.get("pool") or pooled.in_atomic_block:
        return _nothing
    if pooled.connection is not None:
        pooled.close()  # back to the pool
    own = {
        **pooled.settings_dict,
        "OPTIONS": {key: value for key, value in options.items() if key != "pool"},
        "CONN_MAX_AGE": None,
        "CONN_HEALTH_CHECKS": True,
    }
    connection = type(pooled)(own, using)
    connections[using] = connection

    def give_back() -> None:
        if connections[using] is connection and not connection.in_atomic_block:
            connection.close()
            connections[using] = pooled

    return give_back


def _nothing() -> None:
    pass


def drop_connection(using: str) -> None:
    """Close this thread's connection to `using`, whatever state it was left in (a
    statement cut off by a signal, a broken session); the next query opens a new one. Not
    one inside a transaction of the caller's (a backend's, a test case's)."""
    connection = connections[using]
    if connection.in_atomic_block:
        return
    with contextlib.suppress(Exception):
        connection.close()


def close_outside_transactions() -> None:
    """Close this thread's connections, except those inside a transaction of the caller's.

    ``connections.close_all()`` closes those too: a scheduler run from code inside
    ``atomic()`` (``call_command("runscheduler", "--once")`` in a ``TestCase``) ended the
    caller's transaction with it, and every query after it failed with "the connection is
    closed".
    """
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close()


# How long the server keeps a transaction of the scheduler's own threads (the loop, the
# heartbeat) idle before ending its session. A process cut off from the database
# in the middle of a claim or an outcome write (a partition, a frozen host) leaves its session
# open on the server, and with it the row locks it took: every other scheduler skips those
# rows (SKIP LOCKED) for as long as the server keeps the session, hours by default. Bounded,
# the locks go about when the process is presumed gone (the 30 s stale limit). The scheduler's
# transactions never wait on anything but their own statements; task code runs on other
# threads, whose connections keep the project's settings.
IDLE_IN_TRANSACTION_LIMIT = 30

# Threads whose connections get the bound: the main thread (the loop, start-up) and these.
_BOUNDED_THREADS = frozenset(
    {"posixcron-heartbeat", "posixcron-signals-watch", "posixcron-stop-deadline"}
)


def bound_idle_transactions(using: str) -> Callable[[], None]:
    """Have the server end a session of the scheduler's own threads on `using` left idle in
    a transaction longer than IDLE_IN_TRANSACTION_LIMIT (PostgreSQL, MariaDB; MySQL has no
    such setting), for the connections this process opens until the returned function is
    called (a command called from code: its process goes on).

    On PostgreSQL the bound is set in each transaction (``SET LOCAL``), not on the session:
    behind PgBouncer in transaction pooling a session setting stayed on the server
    connection and reached whichever client PgBouncer gave it to next (a web process, whose
    long transactions it ended). MariaDB has no such scope; its bound is the session's.
    """
    from django.db.backends.signals import connection_created

    pid = os.getpid()

    def bound(sender: Any, connection: Any, **kwargs: Any) -> None:
        thread = threading.current_thread()
        if (
            connection.alias != using
            or os.getpid() != pid  # a child forked by task code: its connections are its own
            or (thread is not threading.main_thread() and thread.name not in _BOUNDED_THREADS)
        ):
            return
        if connection.vendor == "postgresql":
            if _bound_each_transaction not in connection.execute_wrappers:
                connection.execute_wrappers.append(_bound_each_transaction)
        elif _is_mariadb(connection):
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SET SESSION idle_transaction_timeout = {IDLE_IN_TRANSACTION_LIMIT}"
                )

    uid = f"posixcron-idle-bound-{using}"
    connection_created.connect(bound, weak=False, dispatch_uid=uid)
    connection = connections[using]
    if connection.connection is not None and not connection.in_atomic_block:
        connection.close()  # this thread's, opened before: reopened with the bound

    def unbind() -> None:
        connection_created.disconnect(dispatch_uid=uid)
        # The caller's thread goes on with its connection: its transactions are its own.
        connection = connections[using]
        if _bound_each_transaction in connection.execute_wrappers:
            connection.execute_wrappers.remove(_bound_each_transaction)
        # Open connections only: asking a closed one whether it is MariaDB connects it.
        if connection.connection is not None and _is_mariadb(connection):
            if connection.in_atomic_block:
                return  # the caller's transaction, on a connection opened before the bound
            with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
                cursor.execute("SET SESSION idle_transaction_timeout = DEFAULT")

    return unbind


def _is_mariadb(connection: Any) -> bool:
    return connection.vendor == "mysql" and bool(getattr(connection, "mysql_is_mariadb", False))


_PG_IDLE_BOUND = f"SET LOCAL idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_LIMIT}000"


def _bound_each_transaction(
    execute: Callable[..., Any], sql: Any, params: Any, many: bool, context: dict[str, Any]
) -> Any:
    """Before the first statement of a transaction, bound it on the server (PostgreSQL).

    psycopg (2 and 3) begins a transaction with its first statement: until then the server
    side of the connection is idle (libpq's PQTRANS_IDLE, 0) although Django has turned
    autocommit off. The bound is sent on a raw cursor of its own (the statement's may be a
    named, server-side one), outside Django's query log but inside its error conversion: as
    the first statement of a transaction it is often what finds a dead connection, and the
    scheduler's outage handling knows Django's errors, not the driver's.
    """
    connection = context["connection"]
    if not connection.get_autocommit() and connection.connection.info.transaction_status == 0:
        with connection.wrap_database_errors, connection.connection.cursor() as cursor:
            cursor.execute(_PG_IDLE_BOUND)
    return execute(sql, params, many, context)
