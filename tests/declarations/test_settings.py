"""Settings validation: one case per check id, with the path, the value and the hint."""

from __future__ import annotations

import datetime as dt
import enum
import io
import struct
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from django_posixcron.checks import E_UNKNOWN_ALIAS
from django_posixcron.declarations import (
    DEFAULT_RETRY_DELAY,
    TaskDeclaration,
    collect,
    load_declarations,
)
from django_posixcron.models import Task
from django_posixcron.reconcile import reconcile
from tests.harness.declaring import task
from tests.testapp import uncheckable

TASK = "settings.POSIXCRON['TASKS']['t']"
# A zone file for UTC (TZif version 1: one local time type, no transitions), for a ZoneInfo
# read from a file, which has no key.
UTC_TZIF = (
    b"TZif"
    + bytes(16)
    + struct.pack(">6l", 0, 0, 0, 0, 1, 4)
    + struct.pack(">lBB", 0, 0, 0)
    + b"UTC\0"
)


def problems_for(raw: Any) -> list[tuple[str, str, str]]:
    _, problems = collect(raw)
    return [(p.id, p.msg, p.hint) for p in problems]


def one_task(**definition: Any) -> dict[str, Any]:
    return {"TASKS": {"t": definition}, "POLL_INTERVAL": 1}


CASES = [
    ("posixcron.E001", ["cron"], "settings.POSIXCRON is misconfigured", "['cron']", "POSIXCRON ="),
    ("posixcron.E002", {"TASK": {}}, "unknown key 'TASK'", "'TASK'", "Did you mean 'TASKS'?"),
    ("posixcron.E002", {"CONCURENCY": 2}, "unknown key", "'CONCURENCY'", "'CONCURRENCY'"),
    ("posixcron.E003", {"TASKS": ["a"]}, "settings.POSIXCRON['TASKS']", "['a']", "Declare"),
    (
        "posixcron.E004",
        {"TASKS": {"Nightly Report": task()}},
        "not a valid name",
        "'Nightly Report'",
        "Rename",
    ),
    ("posixcron.E004", {"TASKS": {"x" * 101: task()}}, "at most 100", "'xxx", "Rename"),
    ("posixcron.E004", {"TASKS": {"-a": task()}}, "not a valid name", "'-a'", "Rename"),
    ("posixcron.E004", {"TASKS": {"a\n": task()}}, "not a valid name", "'a\\n'", "Rename"),
    (
        "posixcron.E005",
        {"TASKS": {"t": "0 3 * * *"}},
        f"{TASK} is misconfigured",
        "'0 3 * * *'",
        "Declare",
    ),
    (
        "posixcron.E006",
        one_task(schedul="0 3 * * *", callable="tests.testapp.jobs.noop"),
        f"{TASK} has an unknown key 'schedul'",
        "'schedul'",
        "Did you mean 'schedule'?",
    ),
    (
        "posixcron.E007",
        one_task(callable="tests.testapp.jobs.noop"),
        f"{TASK} has no 'schedule'",
        "'schedule'",
        "15 3 * * *",
    ),
    (
        "posixcron.E007",
        one_task(schedule="0 3 * * *"),
        f"{TASK} has no 'callable'",
        "'callable'",
        "myapp.jobs",
    ),
    (
        "posixcron.E008",
        one_task(schedule=315, callable="tests.testapp.jobs.noop"),
        f"{TASK}['schedule'] is misconfigured",
        "315",
        "five POSIX fields",
    ),
    (
        "posixcron.E009",
        one_task(schedule="61 3 * * *", callable="tests.testapp.jobs.noop"),
        f"{TASK}['schedule'] is not a valid POSIX cron expression",
        "'61 3 * * *'",
        "Fix the minute field, '61'",
    ),
    (
        "posixcron.E009",
        one_task(schedule="*/15 * * * *", callable="tests.testapp.jobs.noop"),
        "Bad minute '*/15'",
        "'*/15 * * * *'",
        "Fix the minute field",
    ),
    (
        "posixcron.E009",
        one_task(schedule="0 0 * * mon", callable="tests.testapp.jobs.noop"),
        "Bad day-of-week 'mon'",
        "'0 0 * * mon'",
        "Fix the day-of-week field, 'mon'",
    ),
    (
        "posixcron.E010",
        one_task(schedule="0 3 * * *", callable=print),
        f"{TASK}['callable'] is misconfigured",
        "<built-in function print>",
        "import path",
    ),
    (
        "posixcron.E010",
        one_task(schedule="0 3 * * *", callable="noop"),
        "dotted path",
        "'noop'",
        "import path",
    ),
    (
        "posixcron.E011",
        one_task(schedule="0 3 * * *", callable="tests.testapp.nope.run"),
        "cannot be imported: ModuleNotFoundError",
        "'tests.testapp.nope.run'",
        "module path",
    ),
    (
        "posixcron.E011",
        one_task(schedule="0 3 * * *", callable="tests.testapp.jobs.nope"),
        "cannot be imported: ImportError",
        "'tests.testapp.jobs.nope'",
        "attribute name",
    ),
    (
        "posixcron.E011",
        one_task(schedule="0 3 * * *", callable="tests.testapp.exits_on_import.run"),
        "cannot be imported: SystemExit: bye from module",
        "'tests.testapp.exits_on_import.run'",
        "imports cleanly",
    ),
    (
        "posixcron.E011",
        one_task(**task(callable="tests.testapp.raises_base_exception_on_import.run")),
        "cannot be imported: Abort: aborted at import",
        "'tests.testapp.raises_base_exception_on_import.run'",
        "imports cleanly",
    ),
    (
        "posixcron.E037",
        one_task(**task(callable="tests.testapp.uncheckable.exploding_signature")),
        "['callable'] could not be checked: looking at it raised RuntimeError: signature exploded",
        "'tests.testapp.uncheckable.exploding_signature'",
        "declare a plain value",
    ),
    (
        "posixcron.E037",
        one_task(**task(description=uncheckable.exploding_description)),
        "['description'] could not be checked: looking at it raised RuntimeError: lazy text "
        "exploded",
        "Got <",
        "fix the code that raised",
    ),
    (
        "posixcron.E037",
        one_task(**task(kwargs=uncheckable.ExplodingMapping())),
        "['kwargs'] could not be checked: looking at it raised RuntimeError: getitem exploded",
        "ExplodingMapping object",
        "declare a plain value",
    ),
    (
        "posixcron.E010",
        one_task(**task(callable="tests.testapp.jobs." + "n" * 240)),
        "is 259 characters long; the database stores at most 255",
        "'tests.testapp.jobs.nnnn",
        "shorter path",
    ),
    (
        "posixcron.E026",
        one_task(schedule="0 3 * * *", callable="tests.testapp.jobs.CallableJob"),
        "is a class whose instances are callable; calling the class only creates an instance",
        "'tests.testapp.jobs.CallableJob'",
        "module-level instance",
    ),
    (
        "posixcron.E026",
        one_task(schedule="0 3 * * *", callable="django.core.management.commands.check.Command"),
        "is a management command class; calling it only creates the command, which never runs",
        "'django.core.management.commands.check.Command'",
        'Declare "callable": "django.core.management.call_command" with "kwargs": '
        '{"command_name": "check", ...its options}.',
    ),
    (
        "posixcron.E016",
        one_task(schedule="0 3 * * *", callable="tests.testapp.jobs.noop", timezone="localtime"),
        "not a link to this host's zone",
        "'localtime'",
        "another host may link 'localtime' to another zone",
    ),
    (
        "posixcron.E016",
        one_task(**task(), timezone="right/Europe/Berlin"),
        "not a variant from this host's zone files",
        "'right/Europe/Berlin'",
        "such as 'Europe/Berlin': the 'right/' and 'posix/' zones are not IANA names",
    ),
    (
        "posixcron.E016",
        one_task(**task(), timezone="posix/UTC"),
        "not a variant from this host's zone files",
        "'posix/UTC'",
        "such as 'UTC'",
    ),
    (
        "posixcron.E016",
        one_task(**task(), timezone=ZoneInfo.from_file(io.BytesIO(UTC_TZIF))),
        "not a zone read from a file",
        "ZoneInfo.from_file",
        "use ZoneInfo(name)",
    ),
    (
        "posixcron.E030",
        one_task(schedule="0 3 * * *", callable="tests.testapp.jobs.noop", enqueue=None),
        "Expected True, False or a dict but got None",
        "None",
        "Leave the key out to follow ENQUEUE",
    ),
    (
        "posixcron.E012",
        one_task(schedule="0 3 * * *", callable="tests.testapp.jobs.NOT_CALLABLE"),
        "is not callable (it is int 42)",
        "'tests.testapp.jobs.NOT_CALLABLE'",
        "function",
    ),
    (
        "posixcron.E026",
        one_task(schedule="0 3 * * *", callable="asyncio.sleep", kwargs={"delay": 1}),
        "is an async function; calling it does not run its body",
        "'asyncio.sleep'",
        "async_to_sync",
    ),
    (
        "posixcron.E026",
        one_task(schedule="0 3 * * *", callable="os.fwalk", kwargs={"top": "/"}),
        "is a generator function; calling it does not run its body",
        "'os.fwalk'",
        "plain function",
    ),
    (
        "posixcron.E015",
        one_task(
            schedule="0 3 * * *", callable="tests.testapp.jobs.record", kwargs={"label": "a\x00b"}
        ),
        "holds a NUL character",
        "'a\\x00b'",
        "Remove the NUL character",
    ),
    (
        "posixcron.E020",
        one_task(schedule="0 3 * * *", callable="tests.testapp.jobs.noop", description="a\x00"),
        "holds a NUL character",
        "'a\\x00'",
        "Remove the NUL character",
    ),
    (
        "posixcron.E020",
        one_task(schedule="0 3 * * *", callable="tests.testapp.jobs.noop", description="x\ud800"),
        "holds a lone surrogate",
        "'x\\ud800'",
        "valid Unicode",
    ),
    (
        "posixcron.E015",
        one_task(
            schedule="0 3 * * *",
            callable="tests.testapp.jobs.record",
            kwargs={"label": ["fine", {"k\udcff": 1}]},
        ),
        "holds a lone surrogate",
        "'label'",
        "not valid Unicode",
    ),
    (
        "posixcron.E013",
        one_task(schedule="0 3 * * *", callable="tests.testapp.jobs.noop", kwargs={"full": True}),
        "cannot be called with the declared kwargs",
        "{'full': True}",
        "noop()",
    ),
    (
        "posixcron.E014",
        one_task(schedule="0 3 * * *", callable="tests.testapp.jobs.noop", kwargs=["a"]),
        f"{TASK}['kwargs'] is misconfigured",
        "['a']",
        "callable(**kwargs)",
    ),
    (
        "posixcron.E014",
        one_task(schedule="0 3 * * *", callable="tests.testapp.jobs.noop", kwargs={1: "a"}),
        "Expected a dict with str keys",
        "{1: 'a'}",
        "callable(**kwargs)",
    ),
    (
        "posixcron.E015",
        one_task(
            schedule="0 3 * * *", callable="tests.testapp.jobs.record", kwargs={"label": {1, 2}}
        ),
        f"{TASK}['kwargs'] is not JSON-serialisable",
        "{'label': {1, 2}}",
        "stored in the database",
    ),
    (
        "posixcron.E015",
        one_task(
            schedule="0 3 * * *",
            callable="tests.testapp.jobs.record",
            kwargs={"label": float("nan")},
        ),
        "is not JSON-serialisable",
        "nan",
        "finite",
    ),
    (
        "posixcron.E016",
        one_task(schedule="0 3 * * *", callable="tests.testapp.jobs.noop", timezone="Europe/Berln"),
        f"{TASK}['timezone'] is misconfigured",
        "'Europe/Berln'",
        "Did you mean 'Europe/Berlin'?",
    ),
    (
        "posixcron.E016",
        one_task(
            schedule="0 3 * * *", callable="tests.testapp.jobs.noop", timezone="../etc/passwd"
        ),
        "IANA time zone",
        "'../etc/passwd'",
        "settings.TIME_ZONE",
    ),
    (
        "posixcron.E016",
        one_task(schedule="0 3 * * *", callable="tests.testapp.jobs.noop", timezone=1),
        "IANA time zone",
        "got 1.",
        "'UTC'",
    ),
    *[
        (
            "posixcron.E017",
            one_task(schedule="0 3 * * *", callable="tests.testapp.jobs.noop", retry_delay=value),
            f"{TASK}['retry_delay'] is misconfigured",
            shown,
            "300",
        )
        for value, shown in [
            (-5, "-5"),
            (0, "got 0."),
            (True, "True"),
            ("300", "'300'"),
            (float("nan"), "nan"),
            (dt.timedelta(0), "timedelta(0)"),
        ]
    ],
    *[
        (
            "posixcron.E018",
            one_task(schedule="0 3 * * *", callable="tests.testapp.jobs.noop", timeout=value),
            f"{TASK}['timeout'] is misconfigured",
            shown,
            "no timeout",
        )
        for value, shown in [(-1, "-1"), (0.0, "0.0"), (False, "False"), ("10m", "'10m'")]
    ],
    (
        "posixcron.E019",
        one_task(schedule="0 3 * * *", callable="tests.testapp.jobs.noop", overlap="forbid"),
        f"{TASK}['overlap'] is misconfigured",
        "'forbid'",
        "'skip'",
    ),
    (
        "posixcron.E020",
        one_task(schedule="0 3 * * *", callable="tests.testapp.jobs.noop", description=["x"]),
        f"{TASK}['description'] is misconfigured",
        "['x']",
        "sentence",
    ),
    ("posixcron.E021", {"POLL_INTERVAL": 0}, "settings.POSIXCRON['POLL_INTERVAL']", "got 0.", "10"),
    ("posixcron.E021", {"POLL_INTERVAL": True}, "positive number", "True", "10"),
    ("posixcron.E021", {"POLL_INTERVAL": "10"}, "positive number", "'10'", "10"),
    ("posixcron.E022", {"CONCURRENCY": 0}, "settings.POSIXCRON['CONCURRENCY']", "got 0.", "4"),
    ("posixcron.E022", {"CONCURRENCY": 2.5}, "positive int", "2.5", "4"),
    ("posixcron.E023", {"HISTORY_DAYS": -1}, "settings.POSIXCRON['HISTORY_DAYS']", "-1", "30"),
    (
        "posixcron.E024",
        {"TASKS": {"t": task("* * * * *")}, "POLL_INTERVAL": 120},
        f"{TASK}['schedule'] = '* * * * *' can fire every minute",
        "(120 s)",
        "POLL_INTERVAL",
    ),
    (
        "posixcron.E024",
        {"TASKS": {"t": task("0,1 3 * * *")}, "POLL_INTERVAL": 61},
        "can fire every minute",
        "'0,1 3 * * *'",
        "less often",
    ),
    ("posixcron.E027", one_task(**task(), takes_context=1), "['takes_context']", "1", "True"),
    ("posixcron.E028", one_task(**task(), pause_after_failures=0), "positive int", "0", "5"),
    ("posixcron.E028", one_task(**task(), pause_after_failures=True), "positive int", "True", "5"),
    ("posixcron.E029", {"FAILING_AFTER": 0}, "settings.POSIXCRON['FAILING_AFTER']", "0", "3"),
    (
        "posixcron.E017",
        one_task(**task(), retry_delay=1e-7),
        "is too small: expected at least one microsecond (0.000001 seconds)",
        "1e-07",
        "300",
    ),
    (
        "posixcron.E031",
        one_task(**task(), enqueue=True, start_deadline=0),
        "is too small: expected at least 10 seconds",
        "got 0.",
        "at least 10",
    ),
    (
        "posixcron.E031",
        one_task(**task(), enqueue=True, start_deadline=-dt.timedelta(minutes=5)),
        "is too small: expected at least 10 seconds",
        "timedelta(days=-1, seconds=86100)",
        "at least 10",
    ),
    (
        "posixcron.E031",
        one_task(**task(), enqueue=True, start_deadline=float("nan")),
        "Expected a positive number of seconds or a positive timedelta",
        "nan",
        "worker",
    ),
    ("posixcron.E030", {"ENQUEUE": "yes"}, "settings.POSIXCRON['ENQUEUE']", "'yes'", "True"),
    (
        "posixcron.E030",
        {"ENQUEUE": None},
        "settings.POSIXCRON['ENQUEUE'] is misconfigured",
        "None",
        "Leave the key out (or say False) to run tasks inside the scheduler",
    ),
    (
        "posixcron.E030",
        one_task(**task(), enqueue={"queue": "cron"}),
        "has an unknown key 'queue'",
        "{'queue': 'cron'}",
        "Did you mean 'queue_name'?",
    ),
    (
        "posixcron.E030",
        one_task(**task(), enqueue={"priority": 1000}),
        "'priority' to be an int from -100 to 100",
        "1000",
        "default priority",
    ),
    (
        "posixcron.E031",
        one_task(**task(), enqueue=True, start_deadline=5),
        "at least 10 seconds",
        "5",
        "at least 10",
    ),
    (
        "posixcron.E031",
        one_task(**task(), start_deadline=60),
        "not handed to a Tasks backend",
        "60",
        '"enqueue": True',
    ),
    (
        "posixcron.E013",
        one_task(**task(), takes_context=True, kwargs={"a": 1}),
        "cannot be called with a RunContext first and the declared kwargs",
        "'tests.testapp.jobs.noop'",
        "Make the kwargs match",
    ),
    (
        "posixcron.E013",
        one_task(**task(), takes_context=True),
        "cannot be called with a RunContext first",
        "'tests.testapp.jobs.noop'",
        "gets the RunContext as its first positional argument: give noop a parameter for it",
    ),
    (
        "posixcron.E013",
        one_task(
            schedule="0 3 * * *",
            callable="tests.testapp.jobs.fail_unless_file",
            kwargs={"paht": "/tmp/x"},
        ),
        "cannot be called with the declared kwargs",
        "{'paht': '/tmp/x'}",
        "fail_unless_file(path: 'str') -> 'None'. It has no parameter 'paht'.",
    ),
]


@pytest.mark.parametrize(
    ("check_id", "raw", "in_message", "value_shown", "in_hint"),
    CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)],
)
def test_each_problem_has_its_id_path_value_and_hint(
    check_id, raw, in_message, value_shown, in_hint
):
    found = problems_for(raw)
    matching = [(msg, hint) for id_, msg, hint in found if id_ == check_id]
    assert matching, found
    msg, hint = matching[0]
    assert in_message in msg
    assert value_shown in msg
    assert in_hint in hint


def test_use_tz_off_is_an_error(settings):
    settings.USE_TZ = False
    [(check_id, msg, hint)] = problems_for({"TASKS": {}})
    assert check_id == "posixcron.E025"
    assert msg == "settings.USE_TZ is False; django-posixcron requires USE_TZ = True."
    assert "USE_TZ = True" in hint


def test_an_invalid_time_zone_setting_is_one_error_naming_it(settings):
    settings.TIME_ZONE = None
    raw = {"TASKS": {"a": task("0 3 * * *"), "b": task("0 4 * * *"), "c": task("0 5 * * *")}}
    raw["TASKS"]["c"]["timezone"] = "Europe/Berlin"

    [(check_id, msg, hint)] = problems_for(raw)

    assert check_id == "posixcron.E016"
    assert msg == (
        "settings.TIME_ZONE is misconfigured. Expected an IANA time zone name, the zone of every "
        "task without its own 'timezone' but got None."
    )
    assert "give each task its own 'timezone'" in hint
    # Only the tasks with their own zone are declared; with every task zoned, no problem.
    assert list(collect(raw)[0]) == ["c"]
    assert problems_for({"TASKS": {"c": raw["TASKS"]["c"]}}) == []


def test_every_id_is_tested_and_documented():
    from django_posixcron import declarations

    ids = {v for k, v in vars(declarations).items() if k.startswith("E_")}
    # The backends a hand-off names are checked against settings.TASKS by a check of their
    # own, tested in tests/checks/test_handoff_checks.py.
    handoff = {"posixcron.E032", "posixcron.E033", "posixcron.E034", "posixcron.E035"}
    tested = {case[0] for case in CASES} | {"posixcron.E025"} | handoff
    assert ids == tested
    # Numbered without a gap, with the database alias check's own id (checks.py).
    every = ids | {E_UNKNOWN_ALIAS}
    assert every == {f"posixcron.E{n:03d}" for n in range(1, len(every) + 1)}
    text = (Path(__file__).parents[2] / "docs" / "settings.rst").read_text("utf-8")
    for check_id in ids:
        assert check_id in text


def test_valid_task_with_defaults(settings):
    settings.TIME_ZONE = "Europe/Berlin"
    declarations, problems = collect({"TASKS": {"nightly-report": task("15  3 * * 1-5")}})
    assert problems == []
    assert declarations == {
        "nightly-report": TaskDeclaration(
            name="nightly-report",
            schedule="15 3 * * 1-5",  # normalised
            callable_path="tests.testapp.jobs.noop",
            kwargs={},
            timezone="Europe/Berlin",  # settings.TIME_ZONE, resolved now
            retry_delay=DEFAULT_RETRY_DELAY,
            overlap="skip",
            timeout=None,
            description="",
        )
    }


def test_valid_task_with_every_key():
    declarations, problems = collect(
        {
            "TASKS": {
                "a.b_c-1": {
                    "schedule": "0 0 1,15 * 1",
                    "callable": "tests.testapp.jobs.record",
                    "retry_delay": dt.timedelta(minutes=2),
                    "kwargs": {"label": "x", "task_name": "y"},
                    "timezone": ZoneInfo("America/New_York"),
                    "overlap": "allow",
                    "timeout": 1.5,
                    "description": "Mail it",
                }
            },
            "POLL_INTERVAL": 0.5,
            "CONCURRENCY": 1,
            "HISTORY_DAYS": 1,
        }
    )
    assert problems == []
    declaration = declarations["a.b_c-1"]
    assert declaration.retry_delay == dt.timedelta(minutes=2)
    assert declaration.timeout == dt.timedelta(seconds=1.5)
    assert declaration.timezone == "America/New_York"
    assert declaration.overlap == "allow"
    from tests.testapp import jobs

    assert declaration.resolve() is jobs.record


class Text(str, enum.Enum):  # noqa: UP042 - the case: a (str, Enum), not a StrEnum
    """Settings text from a project's own (str, Enum): str() of a member is "Text.ALLOW"."""

    ALLOW = "allow"
    ZONE = "Europe/Berlin"
    CALLABLE = "tests.testapp.jobs.record"
    DESCRIPTION = "Mail it"


@pytest.mark.django_db
def test_text_given_as_str_enum_members_is_stored_as_the_text():
    # The overlap was stored as "Text.ALLOW": the claim, which compares it with "skip",
    # then treated every such task as "allow" (and "skip" ones too).
    definition = task(
        callable=Text.CALLABLE, overlap=Text.ALLOW, timezone=Text.ZONE, description=Text.DESCRIPTION
    )
    declarations, problems = collect({"TASKS": {"t": definition}})
    assert problems == []
    reconcile(declarations=declarations)
    stored = Task.objects.values("overlap", "timezone", "callable_path", "description").get()
    assert stored == {
        "overlap": "allow",
        "timezone": "Europe/Berlin",
        "callable_path": "tests.testapp.jobs.record",
        "description": "Mail it",
    }
    assert all(type(value) is str for value in stored.values())
    declaration = declarations["t"]
    assert type(declaration.overlap) is type(declaration.timezone) is str


def test_kwargs_are_normalised_to_what_the_database_returns():
    definition = task(kwargs={"label": ("a", 1)}, callable="tests.testapp.jobs.record")
    declarations, problems = collect({"TASKS": {"t": definition}})
    assert problems == []
    assert declarations["t"].kwargs == {"label": ["a", 1]}


def test_timeout_none_means_no_timeout():
    declarations, problems = collect({"TASKS": {"t": task(timeout=None)}})
    assert problems == []
    assert declarations["t"].timeout is None


def test_all_problems_at_once_and_valid_tasks_kept():
    declarations, problems = collect(
        {
            "TASKS": {
                "good": task(),
                "bad": task("61 * * * *", overlap="x", retry_delay=-1),
            },
            "POLL_INTERVAL": -1,
        }
    )
    assert list(declarations) == ["good"]
    assert [p.id for p in problems] == [
        "posixcron.E021",
        "posixcron.E009",
        "posixcron.E017",
        "posixcron.E019",
    ]


def test_every_mistake_of_an_enqueue_dict_is_in_its_one_error():
    enqueue = {"queue": "cron", "backnd": "rq", "backend": "", "priority": 1000}
    found = problems_for(one_task(**task(), enqueue=enqueue))
    assert [id_ for id_, _, _ in found] == ["posixcron.E030"]
    _, msg, hint = found[0]
    assert msg == (
        f"{TASK}['enqueue'] has unknown keys 'queue', 'backnd'; needs 'backend' to be a "
        "non-empty str; needs 'priority' to be an int from -100 to 100. Got "
        f"{enqueue!r}."
    )
    assert hint.startswith(
        "For 'queue', did you mean 'queue_name'? For 'backnd', did you mean 'backend'? "
        "Known keys: backend, queue_name, priority."
    )
    assert "alias, e.g. 'default'" in hint
    assert hint.endswith("Use e.g. 0, the Django Tasks default priority.")


def test_missing_posixcron_means_no_tasks(settings):
    del settings.POSIXCRON
    assert collect() == ({}, [])


class TestHash:
    def test_stable_and_normalised(self):
        a = collect({"TASKS": {"t": task("15 3 * * *")}})[0]["t"]
        b = collect({"TASKS": {"t": task("15\t3  * * *", retry_delay=300)}})[0]["t"]
        assert a.definition_hash == b.definition_hash
        assert len(a.definition_hash) == 64
        # Pinned: the hash is compared across processes and versions (rolling deploys).
        assert a.definition_hash == (
            "6e8b478a12eaa9e3ebc6e1e9cdb0b2135e6ffe5049f5f436a56d95478cc5ccb5"
        )

    @pytest.mark.parametrize(
        "change",
        [
            {"schedule": "16 3 * * *"},
            {"timezone": "Europe/Berlin"},
            {"retry_delay": 301},
            {"overlap": "allow"},
            {"timeout": 5},
            {"description": "x"},
            {"callable": "tests.testapp.jobs.fail"},
        ],
    )
    def test_any_definition_change_changes_it(self, change):
        a = collect({"TASKS": {"t": task()}})[0]["t"]
        b = collect({"TASKS": {"t": {**task(), **change}}})[0]["t"]
        assert a.definition_hash != b.definition_hash


class TestLoadAndChecks:
    def test_load_declarations_raises_listing_every_problem(self, posixcron):
        posixcron({"a": task("61 * * * *"), "b": task(overlap="no")})
        with pytest.raises(ImproperlyConfigured) as excinfo:
            load_declarations()
        text = str(excinfo.value)
        assert "2 problem(s)" in text
        assert "posixcron.E009" in text
        assert "posixcron.E019" in text

    def test_load_declarations(self, posixcron):
        posixcron({"a": task()})
        assert list(load_declarations()) == ["a"]

    def test_registered_system_check(self, posixcron):
        posixcron({"a": task("61 * * * *", timezone="Mars/Base")}, CONCURENCY=1)
        errors = [e for e in checks.run_checks() if (e.id or "").startswith("posixcron.")]
        assert [e.id for e in errors] == ["posixcron.E002", "posixcron.E009", "posixcron.E016"]
        assert all(isinstance(e, checks.Error) for e in errors)
        assert all(e.hint for e in errors)

    def test_manage_py_check_shows_them_all(self, posixcron):
        posixcron({"a": task("61 * * * *"), "b": task(retry_delay="5m")})
        with pytest.raises(SystemCheckError) as excinfo:
            call_command("check")
        text = str(excinfo.value)
        assert "posixcron.E009" in text
        assert "posixcron.E017" in text
        assert "settings.POSIXCRON['TASKS']['a']['schedule']" in text

    def test_clean_settings_pass(self, posixcron):
        posixcron({"a": task()})
        assert [e for e in checks.run_checks() if (e.id or "").startswith("posixcron.")] == []

    def test_nothing_checked_at_import(self, tmp_path):
        import subprocess
        import sys

        code = (
            "import django, os\n"
            "from django.conf import settings\n"
            "settings.configure(USE_TZ=True, INSTALLED_APPS=['django_posixcron'],"
            " POSIXCRON={'TASKS': {'x': {'schedule': 'bad', 'callable': 'no.such.mod'}}})\n"
            "django.setup()\n"
            "import django_posixcron.declarations, django_posixcron.reconcile\n"
            "print('ok')\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
        )
        assert out.stdout.strip() == "ok"


def test_the_hint_for_a_management_command_is_a_valid_declaration():
    # E026's hint for a command's class: call_command, the command's name as a keyword.
    declared = one_task(
        schedule="0 3 * * *",
        callable="django.core.management.call_command",
        kwargs={"command_name": "check", "verbosity": 0},
    )
    assert problems_for(declared) == []
