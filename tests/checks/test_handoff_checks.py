"""The hand-off's system checks, against the real Tasks framework and backends installed.

tests.settings defines "default" (django-tasks-db, queues default and cron) and "rq"
(django-tasks-rq, no priorities); each test adds the backends it needs.
"""

from __future__ import annotations

import sys

import django
import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from django_posixcron.declarations import collect
from django_posixcron.handoff import framework
from django_posixcron.handoff.checks import handoff_messages as check_handoff

DB = {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default", "cron"]}
RQ = {"BACKEND": "django_tasks_rq.RQBackend", "QUEUES": ["default"]}
FRAMEWORK = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"


def job(**extra: object) -> dict[str, object]:
    return {"schedule": "0 3 * * *", "callable": "tests.testapp.jobs.noop", **extra}


def handoff_messages() -> list[checks.CheckMessage]:
    return [
        m
        for m in checks.run_checks()
        if m.id in ("posixcron.E032", "posixcron.E033", "posixcron.E034", "posixcron.E035")
        or m.id == "posixcron.W002"
    ]


@pytest.fixture
def tasks_backends(settings):
    """Set settings.TASKS (the framework rebuilds its backends on setting_changed)."""

    def configure(**backends: dict[str, object]) -> None:
        settings.TASKS = backends

    return configure


def test_valid_hand_offs_give_no_message(posixcron, tasks_backends):
    tasks_backends(default=DB, rq=RQ)
    posixcron(
        {
            "a": job(enqueue=True),
            "b": job(enqueue={"queue_name": "cron", "priority": 10}),
            "c": job(enqueue={"backend": "rq"}),
            "d": job(),
        }
    )
    assert handoff_messages() == []


def test_an_unknown_backend_is_an_error_naming_the_path_and_the_defined_ones(
    posixcron, tasks_backends
):
    tasks_backends(default=DB, rq=RQ)
    posixcron({"export": job(enqueue={"backend": "rqq"})})

    (error,) = handoff_messages()

    assert error.id == "posixcron.E033"
    assert error.level == checks.ERROR
    assert "settings.POSIXCRON['TASKS']['export']['enqueue']" in error.msg
    assert "'rqq'" in error.msg
    assert "Did you mean 'rq'?" in str(error.hint)
    assert "'default', 'rq'" in str(error.hint)


def test_no_backend_defined_says_so_instead_of_suggesting_the_missing_default(
    posixcron, tasks_backends
):
    tasks_backends()  # TASKS = {}
    posixcron({"export": job(enqueue=True)})

    (error,) = handoff_messages()

    assert error.id == "posixcron.E033"
    assert "names the Tasks backend 'default'" in error.msg
    assert str(error.hint).startswith("settings.TASKS defines no backend: define one")
    assert "Did you mean" not in str(error.hint)


def test_the_top_level_enqueue_is_named_once_for_every_task_inheriting_it(
    posixcron, tasks_backends
):
    tasks_backends(default=DB)
    posixcron(
        {f"job-{i}": job() for i in range(5)} | {"own": job(enqueue=False)},
        ENQUEUE={"backend": "elsewhere"},
    )

    (error,) = handoff_messages()

    assert error.msg.startswith("settings.POSIXCRON['ENQUEUE'] names the Tasks backend")
    assert "tasks job-0, job-1, job-2 and 2 more" in error.msg


def test_the_dummy_backend_is_an_error_runs_would_never_execute(posixcron, tasks_backends):
    tasks_backends(default={"BACKEND": f"{FRAMEWORK}.backends.dummy.DummyBackend"})
    posixcron({"export": job(enqueue=True)})

    (error,) = handoff_messages()

    assert error.id == "posixcron.E034"
    assert "never" in error.msg


def test_the_immediate_backend_is_a_warning(posixcron, tasks_backends):
    tasks_backends(default={"BACKEND": f"{FRAMEWORK}.backends.immediate.ImmediateBackend"})
    posixcron({"export": job(enqueue=True)})

    (warning,) = handoff_messages()

    assert warning.id == "posixcron.W002"
    assert warning.level == checks.WARNING
    assert "inside the scheduler" in warning.msg


def test_a_priority_on_a_backend_without_priorities_is_an_error(posixcron, tasks_backends):
    tasks_backends(default=DB, rq=RQ)
    posixcron({"export": job(enqueue={"backend": "rq", "priority": 5})})

    (error,) = handoff_messages()

    assert error.id == "posixcron.E035"
    assert "priority 5" in error.msg
    assert "RQBackend" in error.msg


def test_a_queue_the_backend_does_not_have_is_an_error(posixcron, tasks_backends):
    tasks_backends(default=DB)
    posixcron({"export": job(enqueue={"queue_name": "crn"})})

    (error,) = handoff_messages()

    assert error.id == "posixcron.E035"
    assert "'crn'" in error.msg
    assert "Did you mean 'cron'?" in str(error.hint)


@pytest.mark.skipif(django.VERSION >= (6, 0), reason="Django 6 has django.tasks built in")
def test_the_backport_missing_on_django_5_2_is_an_error_with_the_extra_to_install(
    posixcron, monkeypatch
):
    framework.framework.cache_clear()
    for name in [m for m in sys.modules if m == "django_tasks" or m.startswith("django_tasks.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "django_tasks", None)
    posixcron({"export": job(enqueue=True)})
    try:
        # This check alone: the other apps' checks need the modules hidden here.
        (error,) = check_handoff(collect()[0])
    finally:
        monkeypatch.undo()
        framework.framework.cache_clear()

    assert error.id == "posixcron.E032"
    assert "django-posixcron[tasks]" in str(error.hint)


def test_nothing_handed_off_needs_no_tasks_framework(posixcron, monkeypatch):
    framework.framework.cache_clear()
    monkeypatch.setitem(sys.modules, "django_tasks", None)
    monkeypatch.setitem(sys.modules, "django.tasks", None)
    posixcron({"export": job()})
    try:
        assert check_handoff(collect()[0]) == []
    finally:
        monkeypatch.undo()
        framework.framework.cache_clear()


def test_manage_py_check_fails_on_a_hand_off_error(posixcron, tasks_backends):
    tasks_backends(default={"BACKEND": f"{FRAMEWORK}.backends.dummy.DummyBackend"})
    posixcron({"export": job(enqueue=True)})

    with pytest.raises(SystemCheckError, match=r"posixcron\.E034"):
        call_command("check")


def test_a_defined_backend_that_does_not_import_is_not_called_undefined(posixcron, tasks_backends):
    tasks_backends(default={"BACKEND": "nosuch.Backend"})
    posixcron({"export": job(enqueue=True)})

    # This check alone: the Tasks framework's own check raises on such a backend.
    (error,) = check_handoff(collect()[0])

    assert error.id == "posixcron.E033"
    assert error.msg.startswith(
        "settings.POSIXCRON['TASKS']['export']['enqueue'] names the Tasks backend 'default' "
        "(task export), which cannot be loaded: "
    )
    assert "nosuch" in error.msg
    assert "does not define" not in error.msg
    assert error.hint == (
        "Fix settings.TASKS['default']['BACKEND']: a dotted path to a Tasks backend class."
    )


def test_a_task_with_a_mistake_of_its_own_still_has_its_backend_checked(posixcron, tasks_backends):
    """One `check` lists every mistake: the unknown backend of a task whose callable does not
    import, and the queue a top-level ENQUEUE names for a task whose kwargs do not bind."""
    tasks_backends(default=DB)
    posixcron(
        {
            "export": job(callable="tests.testapp.jobs.nope", enqueue={"backend": "dflt"}),
            "inherits": job(kwargs={"unexpected": 1}),
        },
        ENQUEUE={"queue_name": "nightly"},
    )

    messages = {m.id: m for m in checks.run_checks() if (m.id or "").startswith("posixcron.")}

    assert {"posixcron.E011", "posixcron.E013", "posixcron.E033", "posixcron.E035"} <= set(messages)
    assert "settings.POSIXCRON['TASKS']['export']['enqueue']" in messages["posixcron.E033"].msg
    assert "settings.POSIXCRON['ENQUEUE']" in messages["posixcron.E035"].msg
    assert "'nightly'" in messages["posixcron.E035"].msg
